"""Compiled-extension entries for real (issue 18 §6).

``packages: [name @ URL#sha256=...]``: a real wheel from the package index (six) served by
an HTTP server on 127.0.0.1, installed into a venv that envforge builds and certifies (cpu
recipe, torch from the wheelhouse); the same URL serving other bytes fails the install,
with uv (the venv backend, the setup script) and with pip (the setup script's fallback),
and nothing is certified.

``packages: [{name: REQ, index: URL}]``: the package comes from that index only (a real
idna on a PEP 503 page in the venv build; with both installers of the setup script, a
decoy of the same version on the default index is never asked for).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import PackageIndex, Torch
from envforge.render import RenderOptions, plan_venv
from tests.acceptance.test_companion_routing import _index
from tests.helpers.httpserver import serving_folder
from tests.helpers.wheels import pure_wheel as _wheel

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
SIX = "six-1.17.0-py2.py3-none-any.whl"

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, list[str]]]:
    """(base URL, sha256 of the real six wheel, the paths asked for): ``/good/SIX`` is the
    real wheel, ``/bad/SIX`` the same file with one more member (other bytes, same name);
    ``/simple/idna/`` a PEP 503 page of the real idna 3.10 wheel."""
    root = tmp_path_factory.mktemp("wheel-server")
    for folder in ("good", "simple/idna"):
        (root / folder).mkdir(parents=True)
    for req, folder in (("six==1.17.0", "good"), ("idna==3.10", "simple/idna")):
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", req, "-d", str(root / folder)],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        if got.returncode != 0:
            pytest.skip(f"cannot download {req} from the package index: {got.stderr[-300:]}")
    _index_page(root / "simple" / "idna")
    (root / "bad").mkdir()
    shutil.copy(root / "good" / SIX, root / "bad" / SIX)
    with zipfile.ZipFile(root / "bad" / SIX, "a") as zf:
        zf.writestr("six_tampered.py", "TAMPERED = True\n")
    digest = hashlib.sha256((root / "good" / SIX).read_bytes()).hexdigest()
    with serving_folder(root) as server:
        yield server.url, digest, server.requests


def _index_page(folder: Path) -> None:
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(folder.glob("*.whl")))
    (folder / "index.html").write_text(links, encoding="utf-8")


def _entry(served: tuple[str, str, list[str]], folder: str) -> str:
    base, digest, _seen = served
    return f"six @ {base}/{folder}/{SIX}#sha256={digest}"


# --------------------------------------------------------------------------- venv backend


@pytest.mark.skipif(
    not any(WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl")) if WHEELS.is_dir() else True,
    reason=f"no torch 2.13.0+cpu cp311 wheel in {WHEELS} (PIP_FIND_LINKS)",
)
@pytest.mark.skipif(shutil.which("python3.11") is None, reason="no python3.11 on PATH")
def test_venv_build_installs_the_hashed_wheel_and_refuses_other_bytes(
    tmp_path: Path, served: tuple[str, str, list[str]]
) -> None:
    text = (ROOT / "recipes" / "cpu.yaml").read_text(encoding="utf-8")
    assert "\npackages:" not in text
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env |= {"ENVFORGE_HOME": str(tmp_path / "home"), "UV_HTTP_RETRIES": "0"}
    recipe = tmp_path / "cpu.yaml"

    def build(folder: str) -> subprocess.CompletedProcess[str]:
        recipe.write_text(
            text + f"packages:\n  - {_entry(served, folder)!r}\n"
            f"  - {{name: idna==3.10, index: '{served[0]}/simple/'}}\n",
            "utf-8",
        )
        return subprocess.run(
            [sys.executable, "-m", "envforge", "build", str(recipe), "--backend", "venv",
             "--wheelhouse", str(WHEELS)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900,
        )  # fmt: skip

    tampered = build("bad")
    assert tampered.returncode == 3, tampered.stderr
    assert "installing the requirements" in tampered.stderr
    assert not list((tmp_path / "home").glob("venvs/cpu/*/.envforge/certified.json"))

    good = build("good")
    assert good.returncode == 0, good.stderr[-3000:]
    venv = Path(good.stdout.strip().splitlines()[-1])
    assert (venv / ".envforge" / "certified.json").is_file()
    six = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import six, idna; print(six.__version__)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert six.stdout.strip() == "1.17.0"
    assert "/simple/idna/" in served[2]  # idna came from its own index


# --------------------------------------------------------------------------- setup script


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_setup_script_checks_the_hash_and_the_index_with_both_installers(
    tmp_path: Path, served: tuple[str, str, list[str]], installer: str
) -> None:
    """The rendered venv plan (uv and its pip fallback), with stand-in torch, numpy and
    idna wheels (no real torch): the real six wheel installs by its hashed URL and other
    bytes at the URL fail; idna comes from its own index, never from the default index
    (which serves a decoy of the same version)."""
    python = shutil.which("python3.11")
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if python is None or (installer == "uv" and uv is None):
        pytest.skip("needs python3.11 (and uv) on PATH")
    for name, wheels in (("default", ("torch", "numpy", "idna")), ("own", ("idna",))):
        (tmp_path / f"{name}-wheels").mkdir()
        for wheel in wheels:
            version = {"torch": "2.13.0+cpu", "numpy": "2.1.0", "idna": "3.10"}[wheel]
            _wheel(tmp_path / f"{name}-wheels", wheel, version, name, ())
        _index(tmp_path / name, tmp_path / f"{name}-wheels")
    with serving_folder(tmp_path / "default") as default, serving_folder(tmp_path / "own") as own:
        cpu = Catalogue(folders=(ROOT / "recipes",)).load("cpu")
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PIP_INDEX_URL": default.url,
            "UV_INDEX_URL": default.url,
            "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "PIP_NO_CACHE_DIR": "1",
            "PIP_CONFIG_FILE": "/dev/null",
        }
        for folder, ok in (("bad", False), ("good", True)):
            recipe = replace(
                cpu, torch=Torch("2.13.0+cpu", default.url),
                packages=(_entry(served, folder), "idna==3.10"),
                package_indexes=(PackageIndex("idna", own.url),),
            )  # fmt: skip
            script = tmp_path / f"setup-{folder}.sh"
            script.write_text(plan_venv(recipe, RenderOptions()).setup_script)
            argv = ["bash", str(script), *(["--pip"] if installer == "pip" else ["--uv", str(uv)])]
            venv = tmp_path / f"venv-{folder}"
            done = subprocess.run(
                [*argv, python, str(venv)], env=env, capture_output=True, text=True,
                check=False, timeout=300,
            )  # fmt: skip
            assert (done.returncode == 0) is ok, done.stderr[-2000:]
            imported = subprocess.run(
                [str(venv / "bin" / "python"), "-c", "import six, idna; print(idna.ORIGIN)"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert (imported.returncode == 0) is ok
        assert imported.stdout.strip() == "own"
        assert [p for p in own.requests if "/idna/" in p]
        assert not [p for p in default.requests if "/idna/" in p]
