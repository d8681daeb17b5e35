"""The Python the user has (issue 19 §9), for real: envforge on a host whose only Python
is this one (3.11), with a project that requires a newer one, stops before anything is
built: exit 4, one line naming the versions the stack's torch would run on and how to get
one. (Which interpreter is chosen among several is unit-tested in test_hostpython.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_project_needing_a_python_this_host_lacks_is_exit_4(tmp_path: Path) -> None:
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    newer = f"{sys.version_info[0]}.{sys.version_info[1] + 1}"
    only = tmp_path / "bin"
    only.mkdir()
    (only / f"python{here}").symlink_to(sys.executable)
    project = tmp_path / "trainer"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "trainer"\nversion = "0.1"\nrequires-python = ">={newer}"\n'
        'dependencies = ["tqdm"]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(tmp_path / "home")
    env["PATH"] = str(only)
    done = subprocess.run(
        [sys.executable, "-m", "envforge", "build", "cpu", "--backend", "venv",
         "--project", str(project), "--set", f"python={here}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("envforge: error:")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"requires-python >={newer}" in errors[0]
    assert f"runs on Python {newer}" in errors[0]
    assert f"this host has Python {here}." in errors[0]
    assert f"uv python install {newer}" in errors[0]
    assert not list((tmp_path / "home").glob("venvs/*/*"))  # nothing built
