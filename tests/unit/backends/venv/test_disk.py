"""envforge du / gc: sizes with hard-linked files counted once, verdicts, removal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from envforge.backends.venv import disk
from envforge.cli import cli
from envforge.cli import disk as disk_cli
from envforge.core.diskuse import folder_bytes, human
from envforge.recipe.catalogue import Catalogue

CPU_HASH = Catalogue.default().load("cpu").hash
SHORT = CPU_HASH.split(":", 1)[-1][:12]
MB = 1 << 20


def make_venv(
    root: Path,
    name: str,
    recipe_hash: str,
    *,
    project_root: Path | None = None,
    payload: int = MB,
    link_from: Path | None = None,
) -> Path:
    """A venv folder as the venv backend leaves one: pyvenv.cfg, markers, a 'torch' file
    (hard-linked from ``link_from`` when given)."""
    venv = root / "venvs" / "cpu" / name
    (venv / ".envforge").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    build = {
        "recipe": "cpu",
        "recipe_hash": recipe_hash,
        "project_root": str(project_root) if project_root else None,
    }
    (venv / ".envforge" / "build.json").write_text(json.dumps(build), encoding="utf-8")
    (venv / ".envforge" / "certified.json").write_text("{}", encoding="utf-8")
    lib = venv / "lib" / "torch.so"
    lib.parent.mkdir()
    if link_from is not None:
        os.link(link_from / "lib" / "torch.so", lib)
    else:
        lib.write_bytes(os.urandom(payload))
    return venv


def judged(home: Path, older_than: float | None = None) -> dict[str, disk.VenvDisk]:
    found, _ = disk.measure(disk.list_venvs(home / "venvs"))
    running = disk.running_under(v.path for v in found)
    out = disk.judge(found, {"cpu": CPU_HASH}, running, time.time(), older_than)
    return {v.path.name: v for v in out}


def test_hard_linked_files_count_once_in_the_total_and_in_no_own_share(tmp_path: Path) -> None:
    a = make_venv(tmp_path, f"torch-cpu-{SHORT}", CPU_HASH, payload=4 * MB)
    proj = tmp_path / "proj"
    proj.mkdir()
    b = make_venv(
        tmp_path, f"torch-cpu-{SHORT}-proj-0123abcd", CPU_HASH, project_root=proj, link_from=a
    )
    found, total = disk.measure(disk.list_venvs(tmp_path / "venvs"))
    sizes = {v.path: v for v in found}
    assert sizes[a].size >= 4 * MB
    assert sizes[b].size >= 4 * MB
    assert sizes[a].own < MB  # torch's file is shared by both
    assert sizes[b].own < MB
    assert total < sizes[a].size + sizes[b].size - 3 * MB  # and counted once
    assert total == folder_bytes(a) + folder_bytes(b) - folder_bytes(a / "lib" / "torch.so")


def test_verdicts_superseded_project_gone_unused_and_in_use(tmp_path: Path) -> None:
    old_hash = "sha256:" + "0" * 64
    make_venv(tmp_path, f"torch-cpu-{SHORT}", CPU_HASH)
    make_venv(tmp_path, "torch-cpu-000000000000", old_hash)  # the recipe changed since
    gone = tmp_path / "gone"
    make_venv(tmp_path, f"torch-cpu-{SHORT}-gone-89abcdef", CPU_HASH, project_root=gone)
    odd = make_venv(tmp_path, "torch-cpu-111111111111-x-01234567", "sha256:" + "1" * 64)
    verdicts = {name: v.verdict for name, v in judged(tmp_path).items()}
    assert verdicts == {
        f"torch-cpu-{SHORT}": "in use",
        "torch-cpu-000000000000": "superseded",
        f"torch-cpu-{SHORT}-gone-89abcdef": "project gone",
        "torch-cpu-111111111111-x-01234567": "in use",  # no build of its hash: kept...
    }
    old = time.time() - 40 * disk.DAY
    for marker in (odd / ".envforge").iterdir():
        os.utime(marker, (old, old))
    assert judged(tmp_path, older_than=30)[odd.name].verdict == "unused"  # ...unless old
    assert judged(tmp_path, older_than=60)[odd.name].verdict == "in use"


def test_a_venv_a_running_process_works_in_is_never_removed(tmp_path: Path) -> None:
    venv = make_venv(tmp_path, "torch-cpu-000000000000", "sha256:" + "0" * 64)
    make_venv(tmp_path, f"torch-cpu-{SHORT}", CPU_HASH)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=venv)
    try:
        time.sleep(0.2)
        v = judged(tmp_path)[venv.name]
        assert v.verdict == "running"
        assert f"pid {proc.pid}" in v.why
    finally:
        proc.kill()
        proc.wait()
    assert judged(tmp_path)[venv.name].verdict == "superseded"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ENVFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    return tmp_path / "home"


def test_gc_dry_run_removes_nothing_and_gc_removes_what_it_said(home: Path) -> None:
    keep = make_venv(home, f"torch-cpu-{SHORT}", CPU_HASH)
    old = make_venv(home, "torch-cpu-000000000000", "sha256:" + "0" * 64, payload=2 * MB)
    runner = CliRunner()
    dry = runner.invoke(cli, ["gc", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    said = json.loads(dry.output)
    assert [v["path"] for v in said["would_remove"]] == [str(old)]
    assert old.is_dir()
    done = runner.invoke(cli, ["gc"])
    assert done.exit_code == 0, done.output
    assert f"removed {old}" in done.output
    assert not old.exists()
    assert keep.is_dir()
    assert [p.name for p in keep.parent.iterdir()] == [keep.name]  # nothing left aside


def test_du_lists_venvs_caches_and_evidence_with_the_total(home: Path) -> None:
    make_venv(home, f"torch-cpu-{SHORT}", CPU_HASH, payload=3 * MB)
    (home.parent / "uv").mkdir()
    (home.parent / "uv" / "wheel").write_bytes(os.urandom(MB))
    result = CliRunner().invoke(cli, ["du", "--uv-cache", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["venvs"][0]["verdict"] == "in use"
    assert data["venvs_bytes"] >= 3 * MB
    uv = next(o for o in data["others"] if o["path"] == str(home.parent / "uv"))
    assert uv["bytes"] >= MB
    assert data["not_counted"] == []
    assert data["total_bytes"] == data["venvs_bytes"] + sum(o["bytes"] for o in data["others"])
    text = CliRunner().invoke(cli, ["du", "--uv-cache"])
    assert f"torch-cpu-{SHORT}: {human(data['venvs'][0]['bytes'])}" in text.output
    assert "not counted" not in text.output


def test_du_names_uvs_cache_but_counts_it_only_when_asked(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_venv(home, f"torch-cpu-{SHORT}", CPU_HASH, payload=MB)
    (home.parent / "uv").mkdir()
    (home.parent / "uv" / "wheel").write_bytes(os.urandom(MB))
    walked: list[Path] = []
    real = folder_bytes

    def counting(root: Path) -> int:
        walked.append(root)
        return real(root)

    monkeypatch.setattr(disk_cli, "folder_bytes", counting)
    result = CliRunner().invoke(cli, ["du", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert home.parent / "uv" not in walked  # not read at all
    assert str(home.parent / "uv") not in [o["path"] for o in data["others"]]
    (skipped,) = data["not_counted"]
    assert skipped["path"] == str(home.parent / "uv")
    assert "--uv-cache" in skipped["count_with"]
    assert data["total_bytes"] == data["venvs_bytes"] + sum(o["bytes"] for o in data["others"])
    text = CliRunner().invoke(cli, ["du"]).output.splitlines()
    assert f"in {home.parent / 'uv'}: not counted (envforge du --uv-cache counts it)" in text[-2]
    assert text[-1] == f"total: {human(data['total_bytes'])} (uv's cache not counted)"
    asked = json.loads(CliRunner().invoke(cli, ["du", "--uv-cache", "--json"]).output)
    assert asked["total_bytes"] >= data["total_bytes"] + MB


def test_a_removal_killed_midway_leaves_a_folder_the_next_gc_sweeps(home: Path) -> None:
    make_venv(home, f"torch-cpu-{SHORT}", CPU_HASH)
    aside = home / "venvs" / "cpu" / ".torch-cpu-000000000000.old-999999999.1-17"
    aside.mkdir(parents=True)
    done = CliRunner().invoke(cli, ["gc"])
    assert done.exit_code == 0, done.output
    assert f"swept {aside}" in done.output
    assert not aside.exists()


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (812 * MB, "812 MiB"), (3 * 1024 * MB + 300 * MB, "3.3 GiB")]
)
def test_sizes_read_as_people_write_them(n: int, text: str) -> None:
    assert human(n) == text
