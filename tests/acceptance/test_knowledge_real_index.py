"""``envforge knowledge refresh`` / ``status`` against the real package index (the one pip
is configured with; CI reaches it). Fails under ENVFORGE_REQUIRE_ENGINE=1 when the index
cannot be reached, is skipped otherwise."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from packaging.version import Version

from envforge.core.net import Deadline, Policy
from envforge.knowledge import load_table
from envforge.knowledge.companion_refresh import check_companions, check_pinned
from envforge.knowledge.companions import load_companions
from envforge.knowledge.index import IndexClient, IndexProblem, Listing, pip_index_url

from .helpers import Envforge, parse_json, unavailable


def test_refresh_finds_every_known_release_and_nothing_new(tmp_path: Path) -> None:
    cli = Envforge(tmp_path / "home")
    done = cli("knowledge", "refresh", "--no-pytorch-index", "--json", timeout=300)
    if done.returncode == 4:
        unavailable(f"the package index did not answer: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    data = parse_json(done)
    listed = set(data["torch_versions"])
    table = load_table()
    assert set(table.known_versions) <= listed
    new = [
        f["subject"]
        for f in data["findings"]
        if f["kind"] == "new-release" and Version(f["subject"].split()[-1]) <= Version("2.15.0")
    ]
    assert new == []
    assert [f for f in data["findings"] if f["kind"] == "missing-release"] == []
    # the companion table knows every torchvision and torchaudio release listed
    assert [f for f in data["findings"] if f["kind"] == "companion-new"] == []


def test_status_against_the_package_index(tmp_path: Path) -> None:
    cli = Envforge(tmp_path / "home")
    done = cli("knowledge", "status", "--json", timeout=120)
    if done.returncode == 4:
        unavailable(f"the package index did not answer: {done.stderr.strip()}")
    data = parse_json(done)
    assert data["newest_known"] == max(load_table().known_versions, key=Version)
    assert Version(data["newest_listed"]) >= Version("2.15.0")
    # exit 1 exactly when the index lists a release the table lacks
    assert done.returncode == (1 if data["missing"] else 0)


def test_companion_metadata_proposes_the_tables_rows() -> None:
    """torchvision's real project page and PEP 658 metadata (no wheel is downloaded), read
    as if the table stopped before 0.28.0: every row proposed from metadata that answers
    equals the table's row (the index serves metadata for some uploads only: at least one
    must answer; here 0.28.0 from its .metadata file and the newest, 0.29.2, from the JSON
    API, paired with torch 2.15.0 by upload time)."""
    root = pip_index_url()
    probe = IndexClient(policy=Policy.for_urls([root]), deadline=Deadline.start(60))
    page = probe.listing(root, "torchvision")
    if isinstance(page, IndexProblem):
        unavailable(f"the package index did not answer: {page.one_line()}")
    assert isinstance(page, Listing)
    torch = probe.listing(root, "torch")
    assert isinstance(torch, Listing), torch
    # the metadata files live beside the wheels, wherever the index puts them
    hosts = {
        f.url.split("/", 3)[2]
        for f in (*page.files_of_version("0.28.0"), *torch.files_of_version("2.13.0"))
    }
    client = IndexClient(
        policy=Policy.for_urls([root, *(f"https://{h}" for h in hosts)]),
        deadline=Deadline.start(120),
    )
    shipped = load_companions()
    earlier = dataclasses.replace(
        shipped,
        rows=tuple(
            r
            for r in shipped.rows
            if r.package != "torchvision" or Version(r.version) < Version("0.28.0")
        ),
    )
    found = check_companions(earlier, client, [page], [torch], "2026-11-25")
    assert "torchvision 0.28.0" in {f.subject for f in found.findings}
    assert found.rows, found.notes
    for row in found.rows:
        want = shipped.row("torchvision", row.version)
        assert want is not None, row
        assert (row.torch, row.requires, row.confidence) == (
            want.torch,
            want.requires,
            want.confidence,
        ), row
        # PEP 658, or the JSON API for the newest release (its metadata is a 404 here)
        assert row.source.endswith((".whl.metadata", "/torchvision/json"))
    # triton: torch's own metadata pins it (torch 2.13.0's answers here)
    earlier = dataclasses.replace(
        shipped,
        rows=tuple(
            r for r in shipped.rows if r.package != "triton" or Version(r.torch) < Version("2.13.0")
        ),
    )
    pinned = check_pinned(earlier, client, [(None, torch)], "2026-11-25")
    assert pinned.rows, pinned.notes
    for row in pinned.rows:
        want = next((r for r in shipped.rows_of("triton") if r.torch == row.torch), None)
        assert want is not None, row
        assert (row.version, row.accepts, row.requires) == (
            want.version,
            want.accepts,
            want.requires,
        ), row
