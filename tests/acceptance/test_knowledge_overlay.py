"""The overlay that ``knowledge refresh -o FILE`` writes loads as a table overlay: refresh
against the recorded index server (indexserver.py: ``/future`` lists a torch 2.16.0),
then ``ENVFORGE_KNOWLEDGE_PATH=FILE`` makes a recipe pinning 2.16.0 known (it validates
under ``--strict``); without the overlay the same recipe is unknown (a warning; refused
under ``--strict``). The CLI runs as a child process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.knowledge import load_table

from .helpers import Envforge, parse_json
from .indexserver import IndexServer, serve


@pytest.fixture(scope="module")
def server() -> Iterator[IndexServer]:
    yield from serve()


def test_refresh_overlay_makes_the_new_release_known(server: IndexServer, tmp_path: Path) -> None:
    cli = Envforge(tmp_path / "home")
    quiet = {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "ENVFORGE_KNOWLEDGE_PATH": "",
        "ENVFORGE_STRICT": "",
    }
    overlay = tmp_path / "proposed.yaml"
    done = cli(
        "knowledge",
        "refresh",
        "--no-pytorch-index",
        "--index",
        f"{server.url}/future",
        "-o",
        str(overlay),
        timeout=120,
        extra_env=quiet,
    )
    assert done.returncode == 0, done.stderr
    assert overlay.is_file()

    root = load_table().index_root
    pin = [
        "--set",
        "torch.version=2.16.0",
        "--set",
        "cuda=13.2",
        "--set",
        f"torch.index={root}/cu132",
    ]

    # without the overlay: unknown, a warning; --strict refuses it
    loose = cli("validate", "sm_90", *pin, extra_env=quiet)
    assert loose.returncode == 0, loose.stderr
    assert "(uncertain)" in loose.stdout
    assert "[torch-release] torch 2.16.0" in loose.stderr
    strict = cli("--strict", "validate", "sm_90", *pin, extra_env=quiet)
    assert strict.returncode == 2
    assert "[torch-release]" in strict.stderr
    assert "Traceback" not in strict.stderr

    # with it: known, no warning, --strict passes; show names the overlay file
    with_overlay = {**quiet, "ENVFORGE_KNOWLEDGE_PATH": str(overlay)}
    ok = cli("--strict", "validate", "sm_90", *pin, extra_env=with_overlay)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "ok    sm_90"
    assert "warning" not in ok.stderr
    shown = cli("show", "sm_90", *pin, "--json", extra_env=with_overlay)
    assert shown.returncode == 0, shown.stderr
    data = parse_json(shown)
    assert data["confidence"] == "known"
    assert any(f"[{overlay}]" in r["source"] for r in data["reasons"])
    table = cli("knowledge", "show", "--json", extra_env=with_overlay)
    assert table.returncode == 0, table.stderr
    merged = parse_json(table)
    assert merged["layers"] == ["compat.yaml", str(overlay)]
    assert [r["origin"] for r in merged["releases"] if r["series"] == "2.16"] == [str(overlay)]

    # the overlay file broken: exit 2, one line naming the file, line and key
    overlay.write_text(
        overlay.read_text(encoding="utf-8").replace("sm_source:", "sm_sauce:"), encoding="utf-8"
    )
    bad = cli("validate", "sm_90", extra_env=with_overlay)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1
    where = f"{overlay}: releases[0].variants[0].sm_sauce (line "
    assert lines[0].startswith(f"envforge: error: {where}")
    assert "did you mean 'sm_source'?" in lines[0]
