"""A venv rebuild reuses the wheelhouse and CA bundle its last build used (its
build.json) unless told otherwise, and says so in one line (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envforge.backends.venv.layout import VenvOptions, remembered


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh2").mkdir()
    (tmp_path / "ca.pem").write_text("pem\n")
    return tmp_path


def _said() -> tuple[list[str], VenvOptions]:
    lines: list[str] = []
    return lines, VenvOptions(say=lines.append)


def test_a_rebuild_reuses_the_last_builds_wheelhouse_and_ca_bundle(site: Path) -> None:
    lines, options = _said()
    built = {"wheelhouse": str(site / "wh"), "ca_bundle": str(site / "ca.pem")}
    again = remembered(options, built, site / "venv")
    assert (again.wheelhouse, again.ca_bundle) == (site / "wh", site / "ca.pem")
    assert len(lines) == 1
    assert f"--wheelhouse {site / 'wh'}" in lines[0]
    assert "last build" in lines[0]


def test_a_build_json_from_before_reads_the_wheelhouse_from_its_sources(site: Path) -> None:
    lines, options = _said()
    built = {"sources": ["--find-links", str(site / "wh")], "ca_bundle": None}
    assert remembered(options, built, site / "venv").wheelhouse == site / "wh"
    assert len(lines) == 1


def test_what_is_given_wins_and_what_is_gone_is_left_out(site: Path) -> None:
    lines, options = _said()
    built = {"wheelhouse": str(site / "wh"), "ca_bundle": str(site / "gone.pem")}
    given = VenvOptions(wheelhouse=site / "wh2", say=lines.append)
    assert remembered(given, built, site / "venv") == given
    assert remembered(options, None, site / "venv") == options
    assert remembered(options, {"sources": ["--extra-index-url", "x"]}, site) == options
    only = remembered(options, built, site / "venv")
    assert (only.wheelhouse, only.ca_bundle) == (site / "wh", None)
    assert len(lines) == 1
    assert "--ca-bundle" not in lines[0]
