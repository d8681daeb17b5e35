"""``knowledge status`` / ``refresh`` watch the companions, Triton and the compiled
extensions the table knows (envforge/knowledge/watch.py) for releases newer than the
table: recorded project pages (tests/fixtures/index: torch, torchvision, torchaudio,
torchcodec, torchao, triton, xformers) served by a fake client; the 127.0.0.1 server is
the acceptance tests'."""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from envforge.core.net import Policy
from envforge.knowledge import load_table
from envforge.knowledge.companions import load_companions
from envforge.knowledge.extensions import load_extensions
from envforge.knowledge.index import PEP691_JSON, IndexClient, IndexProblem, Response
from envforge.knowledge.refresh import refresh, status
from envforge.knowledge.watch import watch, watched_packages
from tests.helpers import paths

FIXTURES = paths.TESTS / "fixtures" / "index"
ROOT = "http://127.0.0.1:9/simple"
DAY = datetime.date(2026, 11, 27)
RECORDED = ("torch", "torchvision", "torchaudio", "torchcodec", "torchao", "triton", "xformers")


@dataclass
class FakeClient(IndexClient):
    """Answers GETs from ``bodies`` (URL -> bytes, or a problem); anything else is a 404."""

    bodies: Mapping[str, bytes | IndexProblem] = field(default_factory=dict)

    def get(
        self, url: str, accept: str = "*/*", *, immutable: bool = False, limit: int = 0
    ) -> Response | IndexProblem:
        got = self.bodies.get(url)
        if isinstance(got, IndexProblem):
            return got
        if got is not None:
            return Response(url, got, PEP691_JSON, "network")
        return IndexProblem(url, "http", "HTTP 404 Not Found", 404)


def _recorded(project: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{project}.json").read_text("utf-8"))
    return data


def _with_release(project: str, old: str, new: str) -> dict[str, Any]:
    """The recorded page of ``project`` with ``new``: ``old``'s files renamed."""
    data = _recorded(project)
    out = copy.deepcopy(data)
    for f in data["files"]:
        if f"-{old}-" in f["filename"]:
            g = copy.deepcopy(f)
            g["filename"] = f["filename"].replace(f"-{old}-", f"-{new}-")
            g["url"] = f["url"].replace(f"-{old}-", f"-{new}-")
            out["files"].append(g)
    return out


def _client(**pages: dict[str, Any] | IndexProblem) -> FakeClient:
    bodies: dict[str, bytes | IndexProblem] = {
        f"{ROOT}/{p}/": json.dumps(_recorded(p)).encode() for p in RECORDED
    }
    for project, page in pages.items():
        url = f"{ROOT}/{project}/"
        bodies[url] = page if isinstance(page, IndexProblem) else json.dumps(page).encode()
    return FakeClient(policy=Policy.for_urls([ROOT], {}), bodies=bodies)


def test_the_watched_packages_are_the_tables_companions_and_extensions() -> None:
    watched = dict(watched_packages(load_companions(), load_extensions()))
    # the package index serves these; the ROCm Triton packages live on the rocm indexes
    assert watched == {
        "torchvision": "0.29.2",
        "torchaudio": "2.11.1",
        "torchcodec": "0.17.0",
        "torchao": "0.18.0",
        "triton": "3.9.0",
        "xformers": "0.0.35",
    }
    skipped = dict(
        watched_packages(load_companions(), load_extensions(), skip=("torchvision", "torchaudio"))
    )
    assert set(skipped) == {"torchcodec", "torchao", "triton", "xformers"}


def test_status_is_current_when_the_index_lists_nothing_newer() -> None:
    report = status(load_table(), _client(), ROOT, today=DAY)
    assert report.current
    by_name = {w.package: w for w in report.packages}
    assert by_name["triton"].listed == "3.9.0"
    assert by_name["xformers"].listed == "0.0.35"
    assert by_name["torchvision"].listed == "0.29.2"
    assert not any(w.newer for w in report.packages)
    lines = report.lines()
    assert lines[-1] == "current"
    assert "  triton: table 3.9.0, index 3.9.0" in lines


def test_status_is_not_current_when_a_companion_or_extension_is_newer() -> None:
    client = _client(
        triton=_with_release("triton", "3.9.0", "3.10.0"),
        xformers=_with_release("xformers", "0.0.35", "0.0.36"),
        torchvision=_with_release("torchvision", "0.29.2", "0.30.0"),
    )
    report = status(load_table(), client, ROOT, today=DAY)
    assert report.missing == ()  # torch itself is current
    assert not report.current
    newer = {w.package: w.newer for w in report.packages if w.newer}
    assert newer == {"triton": ("3.10.0",), "xformers": ("0.0.36",), "torchvision": ("0.30.0",)}
    data = report.to_dict()
    assert data["current"] is False
    assert {p["package"] for p in data["packages"] if p["newer"]} == set(newer)
    assert any("newer than the table: 3.10.0" in line for line in report.lines())


def test_a_missing_page_is_an_answer_and_a_failed_one_is_not_checked() -> None:
    problem = IndexProblem(f"{ROOT}/triton/", "timeout", "the deadline passed")
    client = _client(triton=problem)
    items = watch(client, ROOT, [("triton", "3.9.0"), ("no-such-package", "1.0")])
    triton, missing = items
    assert triton.problem is problem
    assert "NOT checked" in triton.line()
    assert missing.problem is None
    assert missing.listed == ""
    assert missing.newer == ()


def test_refresh_reports_new_triton_and_extension_releases_once() -> None:
    client = _client(
        triton=_with_release("triton", "3.9.0", "3.10.0"),
        xformers=_with_release("xformers", "0.0.35", "0.0.36"),
    )
    report = refresh(load_table(), client, [ROOT], today=DAY)
    found = sorted(f.subject for f in report.findings if f.kind == "package-new")
    assert found == ["triton 3.10.0", "xformers 0.0.36"]
    assert all(f.new for f in report.findings if f.kind == "package-new")
    # torchvision/torchaudio stay with the companion check (no package-new for them)
    assert not any(
        f.subject.startswith("torch") for f in report.findings if f.kind == "package-new"
    )


def _toolkit_page(*versions: str) -> dict[str, Any]:
    files = [
        {
            "filename": f"cuda_toolkit-{v}-py2.py3-none-any.whl",
            "hashes": {"sha256": "0" * 64},
            "upload-time": "2026-11-04T23:44:09Z",
            "url": f"/packages/cuda_toolkit-{v}-py2.py3-none-any.whl",
            "yanked": False,
        }
        for v in versions
    ]
    return {
        "meta": {"api-version": "1.1"},
        "name": "cuda-toolkit",
        "versions": list(versions),
        "files": files,
    }


def test_status_watches_the_cuda_toolkit_against_the_newest_toolkit_row() -> None:
    """A CUDA newer than every ``cuda_toolkits`` row (a torch built with it would need a
    variant row the table lacks) makes status not current (audit 2026-11-27 §4.7)."""
    table = load_table()
    newest = max((k.version for k in table.cuda_toolkits), key=Version)
    assert newest == "13.5.0"
    current = status(
        table, _client(**{"cuda-toolkit": _toolkit_page("13.4.3", newest)}), ROOT, today=DAY
    )
    assert current.current
    kit = next(w for w in current.packages if w.package == "cuda-toolkit")
    assert (kit.known, kit.listed, kit.newer) == (newest, newest, ())
    client = _client(**{"cuda-toolkit": _toolkit_page(newest, "13.6.0")})
    report = status(table, client, ROOT, today=DAY)
    assert not report.current
    assert {w.package: w.newer for w in report.packages if w.newer} == {"cuda-toolkit": ("13.6.0",)}
    found = [
        f for f in refresh(table, client, [ROOT], today=DAY).findings if f.kind == "package-new"
    ]
    assert [f.subject for f in found] == ["cuda-toolkit 13.6.0"]
    assert "cuda_toolkits row" in found[0].message
