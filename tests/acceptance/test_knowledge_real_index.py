"""``envforge knowledge refresh`` / ``status`` against the real package index (the one pip
is configured with; CI reaches it). Fails under ENVFORGE_REQUIRE_ENGINE=1 when the index
cannot be reached, is skipped otherwise."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from envforge.knowledge import load_table

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
