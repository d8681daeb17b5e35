"""The distribution as a user gets it: a wheel built with ``pip wheel .`` (not an editable
install), installed with pip into a fresh virtualenv, run from a folder outside the checkout.

Nothing is mocked: pip builds the wheel and installs it and its dependencies from the
package index; the installed ``envforge`` command lists, renders and builds the ``cpu``
recipe as a venv (uv, the torch wheel from ``PIP_FIND_LINKS``, the full probe). The
distribution's name is ``envforge-stacks`` (``envforge`` on the package index is another
project); the command and the import package are ``envforge``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .helpers import unavailable

ROOT = Path(__file__).resolve().parents[2]
DIST = "envforge-stacks"

pytestmark = pytest.mark.slow


def run(
    args: list[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def shipped(folder: str) -> set[str]:
    """The files of a shipped folder of the checkout, relative to it."""
    top = ROOT / folder
    return {p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT], cwd=out)
    assert done.returncode == 0, done.stderr
    wheels = list(out.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == [DIST.replace("-", "_")]
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site-packages) with the wheel and its dependencies."""
    where = tmp_path_factory.mktemp("venv") / "v"
    done = run([sys.executable, "-m", "venv", where], cwd=where.parent)
    assert done.returncode == 0, done.stderr
    done = run([where / "bin" / "python", "-m", "pip", "install", "-q", wheel], cwd=where.parent)
    assert done.returncode == 0, done.stderr
    return where


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without envforge settings or the checkout on sys.path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ENVFORGE_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["ENVFORGE_HOME"] = str(tmp_path / "home")
    env["UV_HTTP_RETRIES"] = "0"
    return env


def test_the_wheel_carries_the_templates_the_recipes_and_the_table(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    for folder in ("templates", "recipes"):
        files = shipped(folder)
        assert files, folder
        assert {f"envforge/_shipped/{folder}/{f}" for f in files} <= names
    assert "envforge/data/compat.yaml" in names
    assert {"envforge/probe/worker/boot.py", "envforge/probe/worker/driver.py"} <= names
    assert not [n for n in names if n.startswith(("tests/", "Dockerfiles/"))]


def test_installed_from_the_wheel_not_from_the_checkout(
    venv: Path, tmp_path: Path, user_env: dict[str, str]
) -> None:
    code = (
        "import json, envforge; from importlib.metadata import distribution;"
        "from envforge.core import resources as r; d = distribution('envforge-stacks');"
        "print(json.dumps({'module': envforge.__file__, 'templates': str(r.templates_dir()),"
        " 'recipes': str(r.recipes_dir()), 'table': str(r.data_file('compat.yaml')),"
        " 'version': d.version, 'ours': envforge.__version__,"
        " 'direct_url': d.read_text('direct_url.json')}))"
    )
    done = run([venv / "bin" / "python", "-c", code], cwd=tmp_path, env=user_env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    site = venv.resolve()
    for key in ("module", "templates", "recipes", "table"):
        assert Path(found[key]).resolve().is_relative_to(site), (key, found[key])
    assert found["version"] == found["ours"]
    assert "editable" not in (found["direct_url"] or "")


def test_the_installed_command_lists_and_renders(
    venv: Path, tmp_path: Path, user_env: dict[str, str]
) -> None:
    envforge = venv / "bin" / "envforge"
    listed = run([envforge, "list", "--json"], cwd=tmp_path, env=user_env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = {row["name"] for row in json.loads(listed.stdout)}
    assert names == {Path(f).stem for f in shipped("recipes") if f.endswith(".yaml")}
    rendered = run([envforge, "render", "cpu"], cwd=tmp_path, env=user_env, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == (ROOT / "Dockerfiles" / "cpu" / "Dockerfile").read_text("utf-8")


def test_the_installed_command_builds_and_certifies_the_cpu_venv(
    venv: Path, tmp_path: Path, user_env: dict[str, str]
) -> None:
    wheels = os.environ.get("PIP_FIND_LINKS", "")
    if not wheels or not list(Path(wheels).glob("torch-2.13.0*.whl")):
        unavailable("PIP_FIND_LINKS does not name a folder with the torch 2.13.0 wheel")
    done = run(
        [venv / "bin" / "envforge", "build", "cpu", "--backend", "venv", "--wheelhouse", wheels],
        cwd=tmp_path,
        env=user_env,
    )
    assert done.returncode == 0, done.stderr
    built = Path(done.stdout.strip().splitlines()[-1])
    assert built.parent == Path(user_env["ENVFORGE_HOME"]) / "venvs" / "cpu"
    assert (built / "bin" / "python").exists()
    assert (built / ".envforge" / "certified.json").is_file()
