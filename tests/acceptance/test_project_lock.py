"""Projects locked for real (issue 19 §2): uv resolves a requirements.txt project around the
cpu stack (torch from the wheel folder PIP_FIND_LINKS names, the rest from the package
index), the stack's pins win, and a conflict stops before anything is resolved."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))

pytestmark = pytest.mark.skipif(
    not any(WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl")) if WHEELS.is_dir() else True,
    reason=f"no torch 2.13.0+cpu cp311 wheel in {WHEELS} (PIP_FIND_LINKS)",
)


def envforge(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(home)
    return env


def test_requirements_project_locks_around_the_stack(tmp_path: Path) -> None:
    project = tmp_path / "trainer"
    project.mkdir()
    (project / "requirements.txt").write_text("torch>=2.4\nnumpy<3\n-r more.txt\n")
    (project / "more.txt").write_text("tqdm\n")
    env = base_env(tmp_path / "home")
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")  # uv gets one of its own: nothing stays here
    done = envforge("lock", "cpu", "--project", str(project), "--wheelhouse", str(WHEELS), env=env)
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
    lock = project / "envforge-cpu.lock.txt"
    text = lock.read_text()
    assert text.startswith("# envforge-lock: recipe=cpu inputs=sha256:")
    assert "torch==2.13.0+cpu \\\n    --hash=sha256:" in text
    assert "\ntqdm==" in text
    assert str(tmp_path) not in text.split("\n", 2)[2]  # only the header names the folder

    shown = envforge("show", "cpu", "--project", str(project), env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"lock       {lock}: current" in shown.stdout

    (project / "more.txt").write_text("tqdm\nsix\n")  # a requirements change: stale
    shown = envforge("show", "cpu", "--project", str(project), env=env)
    assert f"lock       {lock}: stale" in shown.stdout


def test_a_requirement_the_pins_refuse_stops_before_resolving(tmp_path: Path) -> None:
    project = tmp_path / "old"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "old"\nversion = "1"\ndependencies = ["torch<2.0"]\n'
        '[tool.envforge]\nrecipe = "cpu"\n'
    )
    env = base_env(tmp_path / "home")
    done = envforge("lock", "--project", str(project), "--wheelhouse", str(WHEELS), env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "project requires torch<2.0; the cpu stack pins torch 2.13.0+cpu" in lines[0]
    assert not list(project.glob("envforge-*.lock.txt"))
