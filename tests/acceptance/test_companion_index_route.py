"""A companion of another variant comes from that variant's index (issue 30): beside torch
2.15.0+cu132, torchaudio 2.11.0+cu130 is installed from ``.../whl/cu130``, because the
cu132 index has no torchaudio 2.11 (pytorch/pytorch#193651). Real installers (uv and pip)
and three real indexes on 127.0.0.1 (``/whl/cu132``, ``/whl/cu130`` and the default one);
the wheels are tiny stand-ins made here (pure Python), no real torch is installed.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe, Torch
from envforge.render import RenderOptions, plan_venv
from tests.helpers.httpserver import serving_folder
from tests.helpers.wheels import pure_wheel as _wheel

from .test_companion_routing import _index

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Served:
    url: str
    seen: list[str]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    """One server: ``/whl/cu132`` (torch, numpy and an old torchaudio, as the real cu132
    index), ``/whl/cu130`` (torchaudio 2.11.0+cu130) and ``/default`` (numpy, a decoy
    torchaudio 2.11.0)."""
    wheels = {name: tmp_path / f"{name}-wheels" for name in ("cu132", "cu130", "default")}
    for folder in wheels.values():
        folder.mkdir()
    _wheel(wheels["cu132"], "torch", "2.15.0+cu132", "cu132", ())
    _wheel(wheels["cu132"], "numpy", "2.1.0", "cu132", ())
    _wheel(wheels["cu132"], "torchaudio", "2.2.0+cu132", "cu132", ())
    _wheel(wheels["cu130"], "torchaudio", "2.11.0+cu130", "cu130", ())
    _wheel(wheels["default"], "numpy", "2.1.0", "default", ())
    _wheel(wheels["default"], "torchaudio", "2.11.0", "default", ())
    root = tmp_path / "root"
    _index(root / "whl" / "cu132", wheels["cu132"])
    _index(root / "whl" / "cu130", wheels["cu130"])
    _index(root / "default", wheels["default"])
    with serving_folder(root) as httpd:
        yield Served(httpd.url, httpd.requests)


def _recipe(url: str) -> Recipe:
    recipe = Catalogue(folders=(ROOT / "recipes",)).load("sm_89")
    return dataclasses.replace(
        recipe,
        torch=Torch("2.15.0", f"{url}/whl/cu132"),
        cuda="13.2",
        python="3.11",
        packages=("torchaudio",),
    )


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_torchaudio_comes_from_the_cu130_index_only(
    tmp_path: Path, server: Served, installer: str
) -> None:
    python = shutil.which("python3.11")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if python is None or (installer == "uv" and uv is None):
        pytest.skip("needs python3.11 (and uv) on PATH")
    plan = plan_venv(_recipe(server.url), RenderOptions(mirrors=()))
    (tmp_path / "setup.sh").write_text(plan.setup_script)
    argv = ["bash", str(tmp_path / "setup.sh")]
    argv += ["--pip"] if installer == "pip" else ["--uv", str(uv)]
    venv = tmp_path / "venv"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_INDEX_URL": f"{server.url}/default",
        "UV_INDEX_URL": f"{server.url}/default",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PIP_NO_CACHE_DIR": "1",
        "PIP_CONFIG_FILE": "/dev/null",
    }
    done = subprocess.run(
        [*argv, python, str(venv)], env=env, capture_output=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    out = (
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import torch, torchaudio; print(torch.ORIGIN, torchaudio.ORIGIN, "
                "torchaudio.__version__)",
            ],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split()
    )
    assert out == ["cu132", "cu130", "2.11.0+cu130"]
    asked = [p for p in server.seen if "/torchaudio/" in p]
    assert any(p.startswith("/whl/cu130/torchaudio/") for p in asked)
    assert not any(p.startswith(("/default/torchaudio/", "/whl/cu132/torchaudio/")) for p in asked)
