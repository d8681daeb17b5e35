"""``knowledge refresh``'s companion rows (envforge/knowledge/companion_refresh.py): the
recorded torchvision/torchaudio pages and torchvision 0.28.0's recorded METADATA
(tests/fixtures/index), served by a fake opener (the 127.0.0.1 server is the acceptance
tests'); releases newer than the table are read, each turned into a row."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from packaging.version import Version

from envforge.core.net import Policy
from envforge.knowledge.companion_refresh import (
    NEW_RELEASES_CHECKED,
    CompanionCheck,
    check_companions,
    check_pinned,
    pinned_rows,
    released_with,
)
from envforge.knowledge.companions import CompanionTable, load_companions
from envforge.knowledge.index import PEP691_JSON, IndexClient, IndexProblem, Listing, Response
from envforge.knowledge.listing import parse_listing
from envforge.knowledge.report import RefreshReport
from tests.helpers import paths

FIXTURES = paths.TESTS / "fixtures" / "index"
ROOT = "http://127.0.0.1:9/simple"
DAY = "2026-12-03"
TV_META = "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"


@dataclass
class FakeClient(IndexClient):
    """Answers GETs from ``bodies`` (URL -> bytes); anything else is a 404."""

    bodies: Mapping[str, bytes] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def get(
        self, url: str, accept: str = "*/*", *, immutable: bool = False, limit: int = 0
    ) -> Response | IndexProblem:
        self.asked.append(url)
        if url in self.bodies:
            return Response(url, self.bodies[url], PEP691_JSON, "network")
        return IndexProblem(url, "http", "HTTP 404 Not Found", 404)


def _client(bodies: Mapping[str, bytes], *hosts: str) -> FakeClient:
    return FakeClient(policy=Policy.for_urls([ROOT, *hosts], {}), bodies=bodies)


def _page(data: dict[str, Any], project: str) -> Listing:
    got = parse_listing(json.dumps(data).encode(), PEP691_JSON, f"{ROOT}/{project}/", project)
    assert isinstance(got, Listing), got
    return got


def _recorded(project: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{project}.json").read_text("utf-8"))
    return data


def _without(table: CompanionTable, package: str, since: str) -> CompanionTable:
    """The table as it was before ``package`` ``since`` was published."""
    rows = tuple(
        r for r in table.rows if r.package != package or Version(r.version) < Version(since)
    )
    return replace(table, rows=rows)


def _metadata_url(page: Listing, filename: str) -> str:
    return next(f.url for f in page.files if f.filename == filename) + ".metadata"


def _add_release(data: dict[str, Any], old: str, new: str, uploaded: str) -> dict[str, Any]:
    """The page with ``new``: ``old``'s files renamed, uploaded at ``uploaded``."""
    out = copy.deepcopy(data)
    for f in data["files"]:
        if f"-{old}-" in f["filename"]:
            g = copy.deepcopy(f)
            g["filename"] = f["filename"].replace(f"-{old}-", f"-{new}-")
            g["url"] = f["url"].replace(f"-{old}-", f"-{new}-")
            g["upload-time"] = uploaded
            out["files"].append(g)
    return out


def _torch_pages() -> list[Listing]:
    return [_page(_recorded("torch"), "torch")]


def test_recorded_metadata_proposes_the_tables_row() -> None:
    """torchvision 0.28.0 as if the table did not know it: the row from its recorded
    METADATA equals the shipped row (requires ==2.13.0, paired with 2.13.0, verified)."""
    shipped = load_companions()
    page = _page(_recorded("torchvision"), "torchvision")
    url = _metadata_url(page, TV_META.removesuffix(".metadata"))
    client = _client({url: (FIXTURES / TV_META).read_bytes()})
    found = check_companions(
        _without(shipped, "torchvision", "0.28.0"), client, [page], _torch_pages(), DAY
    )
    [row] = found.rows
    want = shipped.row("torchvision", "0.28.0")
    assert want is not None
    assert (row.package, row.version, row.torch, row.requires, row.confidence) == (
        want.package,
        want.version,
        want.torch,
        want.requires,
        want.confidence,
    )
    assert (row.source, row.checked) == (url, DAY)
    # every newer release was listed as new; those without metadata are notes, not problems
    assert [f.subject for f in found.findings] == [
        "torchvision 0.28.0",
        "torchvision 0.29.0",
        "torchvision 0.29.1",
        "torchvision 0.29.2",
    ]
    assert (
        "torchvision 0.29.1: no wheel metadata answered (PEP 658): no row proposed" in found.notes
    )
    assert found.problems == ()
    # the cp310 wheel's metadata is a 404 (as on the index), the cp311 one answers
    tried = [u for u in client.asked if "0.28.0" in u]
    assert tried[-1] == url
    assert len(tried) == 2
    # METADATA_TRIES wheels of each later release (0.29.2 has one Linux x86_64 wheel)
    assert [
        len([u for u in client.asked if f"-{v}-" in u]) for v in ("0.29.0", "0.29.1", "0.29.2")
    ] == [4, 4, 1]


def test_a_table_that_knows_every_release_reads_no_metadata() -> None:
    client = _client({})
    pages = [_page(_recorded(p), p) for p in ("torchvision", "torchaudio")]
    assert (
        check_companions(load_companions(), client, pages, _torch_pages(), DAY) == CompanionCheck()
    )
    assert client.asked == []


def test_a_later_requirement_pairs_by_upload_time() -> None:
    """0.29.3 requires torch>=2.14.0 and was uploaded after torch 2.15.0: paired with it."""
    data = _add_release(_recorded("torchvision"), "0.29.2", "0.29.3", "2026-11-02T10:00:00Z")
    page = _page(data, "torchvision")
    name = "torchvision-0.29.3-py3-none-manylinux_2_28_x86_64.whl"
    meta = (
        b"Metadata-Version: 2.1\nName: torchvision\nVersion: 0.29.3\n"
        b"Requires-Dist: torch>=2.14.0\n\n"
    )
    client = _client({_metadata_url(page, name): meta})
    found = check_companions(load_companions(), client, [page], _torch_pages(), DAY)
    [row] = found.rows
    assert (row.version, row.torch, row.requires, row.confidence) == (
        "0.29.3",
        "2.15.0",
        ">=2.14.0",
        "verified",
    )
    assert "released with torch 2.15.0 (upload dates)" in row.note


def test_no_torch_requirement_is_uncertain_and_says_so() -> None:
    data = _add_release(_recorded("torchaudio"), "2.11.0", "2.12.0", "2026-07-08T16:30:00Z")
    page = _page(data, "torchaudio")
    url = _metadata_url(page, "torchaudio-2.12.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    meta = b"Metadata-Version: 2.1\nName: torchaudio\nVersion: 2.12.0\nRequires-Dist: numpy\n\n"
    # every wheel of it answers with the same metadata: the first Linux one is read
    bodies = {f.url + ".metadata": meta for f in page.files if f.version == "2.12.0"}
    client = _client(bodies)
    found = check_companions(load_companions(), client, [page], _torch_pages(), DAY)
    [row] = found.rows
    assert (row.version, row.torch, row.requires, row.confidence) == (
        "2.12.0",
        "2.13.0",
        "==2.13.0",
        "uncertain",
    )
    assert "names no torch requirement" in row.note
    assert any(n.startswith("torchaudio 2.12.0: proposed uncertain: ") for n in found.notes)
    assert url in bodies
    assert len([u for u in client.asked if u.endswith(".metadata")]) == 1
    # the report prints it for companions.yaml, and its JSON carries it
    report = RefreshReport(
        date=DAY,
        roots=(),
        findings=found.findings,
        problems=(),
        notes=found.notes,
        torch_versions=(),
        proposed=(),
        seconds=0.0,
        companions=found.rows,
    )
    lines = report.lines()
    head = lines.index(
        "proposed companion rows (envforge/data/companions.yaml, review before use):"
    )
    assert lines[head + 1].startswith('  - {package: torchaudio, version: "2.12.0"')
    [as_json] = report.to_dict()["proposed_companions"]
    assert as_json["confidence"] == "uncertain"
    assert as_json["source"] == row.source
    # the overlay file keeps the compat schema; the companion rows ride along as comments
    overlay = report.overlay_yaml()
    assert yaml.safe_load(overlay) == {"schema": 1, "releases": []}
    assert f"# {lines[head + 1]}" in overlay


def test_a_metadata_host_outside_the_policy_is_a_note_naming_it() -> None:
    data = _add_release(_recorded("torchaudio"), "2.11.0", "2.12.0", "2026-07-08T16:30:00Z")
    for f in data["files"]:
        f["url"] = "https://files.example.org" + f["url"]
    page = _page(data, "torchaudio")
    client = _client({})
    found = check_companions(load_companions(), client, [page], _torch_pages(), DAY)
    assert found.rows == ()
    # no metadata file was asked for; only the index's own JSON API (a 404 here)
    assert client.asked == ["http://127.0.0.1:9/pypi/torchaudio/json"]
    assert any(
        "files.example.org, not a configured host" in n
        and "ENVFORGE_ALLOW_HOSTS=files.example.org" in n
        for n in found.notes
    )
    allowed = _client({}, "https://files.example.org")
    found = check_companions(load_companions(), allowed, [page], _torch_pages(), DAY)
    assert len([u for u in allowed.asked if u.endswith(".metadata")]) == 4  # METADATA_TRIES


def test_metadata_of_another_release_or_a_failure_proposes_nothing() -> None:
    data = _add_release(_recorded("torchaudio"), "2.11.0", "2.12.0", "2026-07-08T16:30:00Z")
    page = _page(data, "torchaudio")
    other = b"Metadata-Version: 2.1\nName: torchvision\nVersion: 9.9.9\n\n"
    bodies = {f.url + ".metadata": other for f in page.files if f.version == "2.12.0"}
    found = check_companions(load_companions(), _client(bodies), [page], _torch_pages(), DAY)
    assert found.rows == ()
    assert any("names torchvision 9.9.9: no row proposed" in n for n in found.notes)

    @dataclass
    class Broken(FakeClient):
        def get(
            self, url: str, accept: str = "*/*", *, immutable: bool = False, limit: int = 0
        ) -> Response | IndexProblem:
            return IndexProblem(url, "timeout", "no answer")

    broken = Broken(policy=Policy.for_urls([ROOT], {}))
    found = check_companions(load_companions(), broken, [page], _torch_pages(), DAY)
    assert found.rows == ()
    assert [p.kind for p in found.problems] == ["timeout"] * 4  # not checked: exit 4


def test_only_the_newest_releases_of_an_unknown_package_are_read() -> None:
    data = _recorded("torchvision")
    for i in range(10):
        data = _add_release(data, "0.29.2", f"0.29.{i + 3}", "2026-11-02T10:00:00Z")
    page = _page(data, "torchvision")
    client = _client({})
    found = check_companions(load_companions(), client, [page], _torch_pages(), DAY)
    assert [f.subject for f in found.findings] == [
        f"torchvision 0.29.{i}" for i in range(13 - NEW_RELEASES_CHECKED, 13)
    ]


def test_released_with_picks_the_last_torch_uploaded_before() -> None:
    uploads = {
        "2.14.0": "2026-09-02T13:42:48",
        "2.14.1": "2026-09-30T17:43:48",
        "2.15.0": "2026-10-28T15:16:25",
    }
    assert released_with(uploads, "2026-09-30T17:56:58") == "2.14.1"
    assert released_with(uploads, "2026-10-28T15:21:30") == "2.15.0"
    assert released_with(uploads, "2026-01-01T00:00:00") is None
    assert released_with(uploads, "") is None
    torch = _torch_pages()[0]
    assert next(f for f in torch.files if f.version == "2.13.0").upload_time.startswith(
        "2026-07-08T"
    )


# ----------------------------------------------------------------------------- Triton

TORCH_META = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"


def _variant_page(variant: str, version: str) -> Listing:
    links = "".join(
        f'<a href="/whl/{variant}/torch-{version}%2B{variant}-cp3{m}-cp3{m}-'
        f'manylinux_2_28_x86_64.whl">torch-{version}+{variant}-cp3{m}-cp3{m}-'
        f"manylinux_2_28_x86_64.whl</a>\n"
        for m in (11, 12)
    )
    url = f"http://127.0.0.1:9/whl/{variant}/torch/"
    got = parse_listing(f"<html><body>{links}</body></html>".encode(), "text/html", url, "torch")
    assert isinstance(got, Listing), got
    return got


def test_torchs_recorded_metadata_proposes_the_tables_triton_row() -> None:
    shipped = load_companions()
    earlier = replace(
        shipped,
        rows=tuple(
            r for r in shipped.rows if r.package != "triton" or Version(r.torch) < Version("2.13.0")
        ),
    )
    page = _torch_pages()[0]
    url = _metadata_url(page, TORCH_META.removesuffix(".metadata"))
    client = _client({url: (FIXTURES / TORCH_META).read_bytes()})
    found = check_pinned(earlier, client, [(None, page)], DAY)
    # 2.14.0, 2.14.1 and 2.15.0's metadata is a 404 here (as on the index): notes
    assert [r.torch for r in found.rows] == ["2.13.0"]
    [row] = found.rows
    want = next(r for r in shipped.rows_of("triton") if r.torch == "2.13.0")
    assert (row.package, row.version, row.requires, row.accepts, row.confidence) == (
        want.package,
        want.version,
        want.requires,
        want.accepts,
        want.confidence,
    )
    assert row.source == url
    assert any(
        n.startswith("triton for torch 2.15.0 (") and "no wheel metadata" in n for n in found.notes
    )
    assert found.problems == ()


def test_a_rocm_variant_index_gives_the_rocm_triton_row() -> None:
    page = _variant_page("rocm7.2", "2.15.0")
    meta = (
        b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0+rocm7.2\n"
        b"Requires-Dist: filelock\nRequires-Dist: triton-rocm==3.9.0+gitabc; "
        b'platform_system == "Linux"\n\n'
    )
    bodies = {f.url + ".metadata": meta for f in page.files}
    client = _client(bodies)
    found = check_pinned(
        load_companions(), client, [("rocm7.2", page), ("cpu", _variant_page("cpu", "2.16.0"))], DAY
    )
    [row] = found.rows
    assert (row.package, row.version, row.torch, row.requires, row.accepts) == (
        "triton-rocm",
        "3.9.0",
        "2.15.0",
        "==2.15.0",
        None,
    )
    assert row.confidence == "verified"
    assert len(client.asked) == 1  # the cpu index: torch pins no Triton there
    # a build whose metadata pins no Triton: a note
    bare = dict.fromkeys(bodies, b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n\n")
    found = check_pinned(load_companions(), _client(bare), [("rocm7.2", page)], DAY)
    assert found.rows == ()
    assert any("pins none of them" in n for n in found.notes)


def test_a_compatible_release_pin_becomes_accepts() -> None:
    meta = (
        "Name: torch\nVersion: 2.15.0\nRequires-Dist: triton~=3.9.0; platform_system == "
        '"Linux"\nRequires-Dist: triton==1.0; extra == "old"\n\n'
    )
    [row] = pinned_rows(meta, ("triton",), "2.15.0", "https://127.0.0.1/m", DAY)
    assert (row.version, row.accepts, row.requires) == ("3.9.0", "~=3.9.0", "==2.15.0")


def test_a_release_on_several_indexes_is_read_once_package_index_first() -> None:
    data = _add_release(_recorded("torchvision"), "0.29.2", "0.29.3", "2026-11-02T10:00:00Z")
    index_page = _page(data, "torchvision")
    name = "torchvision-0.29.3+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    url = "http://127.0.0.1:9/whl/cpu/torchvision/"
    got = parse_listing(
        f'<a href="/whl/cpu/{name.replace("+", "%2B")}">{name}</a>'.encode(),
        "text/html",
        url,
        "torchvision",
    )
    assert isinstance(got, Listing)
    meta = (
        b"Metadata-Version: 2.1\nName: torchvision\nVersion: 0.29.3+cpu\n"
        b"Requires-Dist: torch==2.15.0+cpu\n\n"
    )
    client = _client({got.files[0].url + ".metadata": meta})
    found = check_companions(load_companions(), client, [index_page, got], _torch_pages(), DAY)
    assert [f.subject for f in found.findings] == ["torchvision 0.29.3"]
    [row] = found.rows
    # the variant's local tags are the table's business, not the row's
    assert (row.version, row.torch, row.requires) == ("0.29.3", "2.15.0", "==2.15.0")
    # the package index's one Linux wheel (404) was tried first, then the cpu index's
    assert [u.split("/")[-1] for u in client.asked] == [
        "torchvision-0.29.3-py3-none-manylinux_2_28_x86_64.whl.metadata",
        "torchvision-0.29.3%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl.metadata",
    ]


def test_the_newest_release_without_metadata_is_read_from_the_json_api() -> None:
    """0.29.3's metadata files are 404s; the index's JSON API describes it (``info``)."""
    data = _add_release(_recorded("torchvision"), "0.29.2", "0.29.3", "2026-11-02T10:00:00Z")
    page = _page(data, "torchvision")
    api = "http://127.0.0.1:9/pypi/torchvision/json"
    info = {"info": {"version": "0.29.3", "requires_dist": ["numpy", "torch>=2.14.0"]}}
    client = _client({api: json.dumps(info).encode()})
    found = check_companions(load_companions(), client, [page], _torch_pages(), DAY)
    [row] = found.rows
    assert (row.version, row.torch, row.requires, row.source) == (
        "0.29.3",
        "2.15.0",
        ">=2.14.0",
        api,
    )
    # another version in info (the index moved on) proposes nothing
    info["info"]["version"] = "0.29.4"
    client = _client({api: json.dumps(info).encode()})
    assert check_companions(load_companions(), client, [page], _torch_pages(), DAY).rows == ()


def test_a_torch_release_on_several_variant_indexes_is_read_once_per_family() -> None:
    pages = [_variant_page(v, "2.15.0") for v in ("rocm7.2", "rocm7.14")]
    meta = (
        b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0+rocm7.14\n"
        b'Requires-Dist: triton-rocm==3.9.0; platform_system == "Linux"\n\n'
    )
    second = pages[1].files[0].url + ".metadata"
    client = _client({second: meta})
    found = check_pinned(
        load_companions(), client, [("rocm7.2", pages[0]), ("rocm7.14", pages[1])], DAY
    )
    assert [(r.package, r.version, r.torch) for r in found.rows] == [
        ("triton-rocm", "3.9.0", "2.15.0")
    ]
    # rocm7.2's two wheels (404), then rocm7.14's first: one release, one search
    assert len(client.asked) == 3
    assert client.asked[-1] == second
