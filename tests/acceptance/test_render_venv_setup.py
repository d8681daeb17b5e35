"""The rendered venv setup script really makes the cpu environment (real processes).

``setup.sh`` from ``envforge render cpu --format venv --with-wheelhouse`` installs torch
from a wheel directory (the rest, NumPy, from the default index, trusting ``PIP_CERT``),
with uv and with pip; ``activate.sh`` then applies the recipe's variables. What is tested
is the script, not torch: the directory holds a tiny stand-in ``torch-2.13.0+cpu`` wheel
(a real torch made the pip case take two minutes). Skipped when Python 3.11 is missing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import EnvVar
from envforge.render import RenderOptions, plan_venv
from tests.helpers.wheels import pure_wheel

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_setup_script_builds_the_cpu_venv(tmp_path: Path, installer: str) -> None:
    python = shutil.which("python3.11")
    if python is None:
        pytest.skip("needs python3.11 on PATH")
    wheels = str(tmp_path / "wheels")
    Path(wheels).mkdir()
    pure_wheel(Path(wheels), "torch", "2.13.0+cpu", "stand-in")
    recipe = Catalogue(folders=(ROOT / "recipes",)).load("cpu")
    recipe = dataclasses.replace(
        recipe, env=(EnvVar("ENVFORGE_T", "a 'b' $c", "test", (), "uncertain"),)
    )
    plan = plan_venv(recipe, RenderOptions(wheelhouse=True))
    (tmp_path / "setup.sh").write_text(plan.setup_script)
    (tmp_path / "activate.sh").write_text(plan.activate_script)
    argv = ["bash", str(tmp_path / "setup.sh"), "--wheelhouse", wheels]
    if os.environ.get("PIP_CERT"):
        argv += ["--ca-bundle", os.environ["PIP_CERT"]]
    if installer == "pip":
        argv.append("--pip")
    else:
        uv = shutil.which("uv")
        if uv is None:
            pytest.skip("uv is not on PATH")
        argv += ["--uv", uv]
    venv = tmp_path / "venv"
    # pip's own find-links (PIP_FIND_LINKS, pip.conf: the real torch wheel, preferred to a
    # py3-none-any one of the same version) give way to the wheel directory alone
    env = {**os.environ, "PIP_FIND_LINKS": wheels}
    done = subprocess.run([*argv, python, str(venv)], capture_output=True, check=False, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    check = (
        f'. "{venv}/bin/activate" && . "{tmp_path}/activate.sh" && python -c '
        "'import os, sys, torch, numpy; "
        "print(sys.executable, torch.__version__, torch.ORIGIN, numpy.__version__, "
        'os.environ["ENVFORGE_T"])\''
    )
    out = subprocess.run(["bash", "-c", check], capture_output=True, check=True).stdout.decode()
    exe, torch_version, origin, numpy_version, value = out.strip().split(" ", 4)
    assert exe == str(venv / "bin" / "python")
    assert (torch_version, origin) == ("2.13.0+cpu", "stand-in")  # the wheel directory's
    assert numpy_version.split(".")[0] in ("1", "2")
    assert value == "a 'b' $c"
