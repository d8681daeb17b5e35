"""Routing: the torch family comes from the stack's index (or the wheelhouse), never from
the default index, with uv and with pip (real installers, two real indexes on 127.0.0.1).

Both indexes serve a ``torchvision 0.28.0+cpu``; the default index's copy is a decoy (its
module says ``default``). The rendered venv setup script (uv and pip) and ``envforge lock``
must take the stack index's build, and the default index must never be asked for it.
The wheels are tiny stand-ins made here (pure Python); no real torch is installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from envforge import lock
from envforge.errors import Unavailable
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe, Torch
from envforge.render import RenderOptions, plan_venv
from envforge.stack import stack_of
from tests.helpers.httpserver import serving_folder
from tests.helpers.wheels import pure_wheel as _wheel

ROOT = Path(__file__).resolve().parents[2]


def _index(root: Path, wheels: Path) -> None:
    """A PEP 503 index of ``wheels`` under ``root/<project>/``."""
    for whl in sorted(wheels.glob("*.whl")):
        project = root / whl.name.split("-", 1)[0]
        project.mkdir(parents=True, exist_ok=True)
        shutil.copy(whl, project / whl.name)
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        page = project / "index.html"
        old = page.read_text() if page.is_file() else ""
        page.write_text(old + f'<a href="{whl.name}#sha256={digest}">{whl.name}</a>\n')


@dataclasses.dataclass
class Served:
    url: str
    seen: list[str]


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[tuple[Served, Served, Path]]:
    stack_wheels, default_wheels = tmp_path / "stack-wheels", tmp_path / "default-wheels"
    stack_wheels.mkdir()
    default_wheels.mkdir()
    _wheel(stack_wheels, "torch", "2.13.0+cpu", "stack", ())
    _wheel(stack_wheels, "torchvision", "0.28.0+cpu", "stack", ("torch==2.13.0", "numpy"))
    _wheel(stack_wheels, "numpy", "2.1.0", "stack", ())
    _wheel(default_wheels, "torchvision", "0.28.0+cpu", "default", ("torch==2.13.0", "numpy"))
    _wheel(default_wheels, "torchvision", "0.28.0", "default", ("torch==2.13.0", "numpy"))
    _wheel(default_wheels, "numpy", "2.1.0", "default", ())
    with ExitStack() as stack:
        servers = []
        for name, wheels in (("stack", stack_wheels), ("default", default_wheels)):
            root = tmp_path / name
            _index(root / "index", wheels)
            server = stack.enter_context(serving_folder(root))
            servers.append(Served(f"{server.url}/index", server.requests))
        yield servers[0], servers[1], stack_wheels


def _recipe(stack_url: str) -> Recipe:
    recipe = Catalogue(folders=(ROOT / "recipes",)).load("cpu")
    # a stack index that is not a PyTorch one: the local tag is written in the version
    return dataclasses.replace(
        recipe, torch=Torch("2.13.0+cpu", stack_url), packages=("torchvision",)
    )


def _env(default: Served, tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_INDEX_URL": default.url,
        "UV_INDEX_URL": default.url,
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PIP_NO_CACHE_DIR": "1",
        "PIP_CONFIG_FILE": "/dev/null",
    }


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_setup_script_takes_the_family_from_the_stack_index(
    tmp_path: Path, indexes: tuple[Served, Served, Path], installer: str
) -> None:
    stack_index, default, _ = indexes
    python = shutil.which("python3.11")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if python is None or (installer == "uv" and uv is None):
        pytest.skip("needs python3.11 (and uv) on PATH")
    plan = plan_venv(_recipe(stack_index.url), RenderOptions())
    assert plan.requirements[2] == "torchvision==0.28.0+cpu"
    (tmp_path / "setup.sh").write_text(plan.setup_script)
    argv = ["bash", str(tmp_path / "setup.sh")]
    argv += ["--pip"] if installer == "pip" else ["--uv", str(uv)]
    venv = tmp_path / "venv"
    done = subprocess.run(
        [*argv, python, str(venv)],
        env=_env(default, tmp_path),
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    out = (
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import torchvision; print(torchvision.ORIGIN)"],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    assert out == "stack"
    assert not [p for p in default.seen if "/torchvision/" in p]
    assert [p for p in stack_index.seen if "/torchvision/" in p]


def test_lock_takes_the_family_from_the_stack_index(
    tmp_path: Path, indexes: tuple[Served, Served, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_index, default, _ = indexes
    for key, value in _env(default, tmp_path).items():
        if key != "PATH":
            monkeypatch.setenv(key, value)
    recipe = _recipe(stack_index.url)
    out = tmp_path / "cpu.lock.txt"
    lock.write_lock(recipe, output=out)
    text = out.read_text(encoding="utf-8")
    assert "torchvision==0.28.0+cpu" in text
    stack_digest = hashlib.sha256(
        next(Path(tmp_path / "stack" / "index" / "torchvision").glob("*.whl")).read_bytes()
    ).hexdigest()
    assert f"--hash=sha256:{stack_digest}" in text
    assert not [p for p in default.seen if "/torchvision/" in p]


def test_wheelhouse_without_the_companion_is_exit_4_naming_it(
    tmp_path: Path, indexes: tuple[Served, Served, Path]
) -> None:
    stack_index, _, wheels = indexes
    stack = stack_of(_recipe(stack_index.url))
    lock.check_wheelhouse(stack, wheels)  # all there
    only_torch = tmp_path / "only-torch"
    only_torch.mkdir()
    shutil.copy(next(wheels.glob("torch-*.whl")), only_torch)
    with pytest.raises(Unavailable) as info:
        lock.check_wheelhouse(stack, only_torch)
    assert info.value.exit_code == 4
    assert "torchvision==0.28.0+cpu" in info.value.one_line()
