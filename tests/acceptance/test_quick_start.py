"""The README's Quick start for real, in a fresh home (issue 29 §1): its first command, as
written, up to the build (the build is test_wheel_install's and the venv tests'), then
``envforge`` by name in the same shell. pip installs the checkout and its dependencies
(about 40 s); nothing of the caller's environment but PATH and the pip settings is kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.house.test_docs import quick_start_commands

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

#: The build at the end of the first command, left out here.
BUILD = " && envforge build cpu "


def _path_without_venvs() -> str:
    """PATH without this run's virtualenv: ``python3`` is the machine's, as on a fresh one."""
    active = Path(sys.prefix).resolve()
    keep = [
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p and not Path(p).resolve().is_relative_to(active)
    ]
    return os.pathsep.join(keep or ["/usr/local/bin", "/usr/bin", "/bin"])


def test_the_quick_start_installs_envforge_by_name(tmp_path: Path) -> None:
    first, _tests = quick_start_commands()
    assert BUILD in first
    install = first.split(BUILD, 1)[0]
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": _path_without_venvs(), "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    started = time.monotonic()
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'{install}\necho "FOUND $(command -v envforge)"\n'
            'envforge list --json > "$HOME/list.json"',
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = [line[6:] for line in done.stdout.splitlines() if line.startswith("FOUND ")]
    assert Path(found).resolve() == home / ".envforge" / "bin" / "envforge"
    assert '"name": "cpu"' in (home / "list.json").read_text()
    assert not (home / ".local" / "bin" / "python").exists()
    assert seconds < 180, f"the install took {seconds:.0f} s"
