"""A certified venv runs only certified code (issue 27, classes 1 and 9), on one real cpu
venv: uncertified content put into it (a package folder shadowing a certified module,
forged bytecode of the same size and mtime, an edit that keeps the size and puts the
mtime back, a ``.pth`` file, an unlisted ``.so``) makes ``shell`` refuse with exit 1
naming the file, before the command runs; ``build`` then reinstalls and no tampered
byte is certified.

The venv is built once, with ENVFORGE_HOME relative to the working folder (it was exit
4) and a TMPDIR of the test's own (no ``uv-*`` file may stay there). Each case puts the
venv back as it was (the certified bytes, so the certificate holds again).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from .test_venv_cpu import ROOT, WHEELS, base_env, pytestmark  # noqa: F401 - marks apply

SP = "lib/python3.11/site-packages"
CPYTHON = "cpython-311"


def envforge(*args: str, env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tamper")


@pytest.fixture(scope="module")
def env(where: Path) -> dict[str, str]:
    env = base_env(Path("home"))  # relative: resolved against the working folder
    env["PYTHONPATH"] = str(ROOT)
    (where / "tmp").mkdir()
    env["TMPDIR"] = str(where / "tmp")
    return env


@pytest.fixture(scope="module")
def venv_path(where: Path, env: dict[str, str]) -> Path:
    done = envforge(
        "build",
        "cpu",
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        "--level",
        "quick",
        env=env,
        cwd=where,
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_absolute()
    assert path.is_relative_to(where / "home")
    return path


def test_the_build_leaves_nothing_in_tmpdir(where: Path, venv_path: Path) -> None:
    assert sorted(p.name for p in (where / "tmp").iterdir()) == []


def shell_refuses(where: Path, env: dict[str, str], venv_path: Path, named: str) -> None:
    marker = where / "ran"
    ran = envforge(
        "shell",
        "cpu",
        "--backend",
        "venv",
        "--",
        "python",
        "-c",
        f"open({str(marker)!r}, 'w')",
        env=env,
        cwd=where,
    )
    assert ran.returncode == 1, ran.stderr
    lines = [ln for ln in ran.stderr.splitlines() if ln.startswith("envforge: error:")]
    assert len(lines) == 1, ran.stderr
    assert f"{SP}/{named}" in lines[0]
    assert "envforge build cpu --backend venv" in lines[0]
    assert "Traceback" not in ran.stderr
    assert not marker.exists()  # refused before the command ran


def _shadow(sp: Path) -> tuple[str, Callable[[], None]]:
    (sp / "typing_extensions").mkdir()  # beside the certified typing_extensions.py
    (sp / "typing_extensions" / "__init__.py").write_text("raise SystemExit('not it')\n")
    return "typing_extensions/__init__.py", lambda: shutil.rmtree(sp / "typing_extensions")


def _same_size_same_mtime(path: Path, rel: str) -> Callable[[], None]:
    st, original = path.stat(), path.read_bytes()
    data = bytearray(original)
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)

    def undo() -> None:
        path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    return undo


def _forged_pyc(sp: Path) -> tuple[str, Callable[[], None]]:
    rel = f"__pycache__/typing_extensions.{CPYTHON}.pyc"  # written by the probe (torch imports it)
    return rel, _same_size_same_mtime(sp / rel, rel)


def _torch_edit(sp: Path) -> tuple[str, Callable[[], None]]:
    rel = "torch/version.py"
    return rel, _same_size_same_mtime(sp / rel, rel)


def _pth(sp: Path) -> tuple[str, Callable[[], None]]:
    (sp / "zz-startup.pth").write_text("import os\n")
    return "zz-startup.pth", (sp / "zz-startup.pth").unlink


def _so(sp: Path) -> tuple[str, Callable[[], None]]:
    name = f"torch/_evil.{CPYTHON}-x86_64-linux-gnu.so"
    shutil.copy(next((sp / "torch" / "lib").glob("*.so*")), sp / name)
    return name, (sp / name).unlink


@pytest.mark.parametrize(
    "tamper",
    [_shadow, _forged_pyc, _torch_edit, _pth, _so],
    ids=["shadow-folder", "forged-pyc", "same-size-edit", "pth", "so"],
)
def test_shell_refuses_uncertified_content_naming_it(
    where: Path,
    env: dict[str, str],
    venv_path: Path,
    tamper: Callable[[Path], tuple[str, Callable[[], None]]],
) -> None:
    named, undo = tamper(venv_path / SP)
    try:
        shell_refuses(where, env, venv_path, named)
    finally:
        undo()
    ok = envforge("shell", "cpu", "--backend", "venv", "--", "true", env=env, cwd=where)
    assert ok.returncode == 0, ok.stderr  # the certified bytes again: certified again


def test_a_rebuild_after_tampering_certifies_none_of_it(
    where: Path, env: dict[str, str], venv_path: Path
) -> None:
    sp = venv_path / SP
    original = (sp / "torch/version.py").read_bytes()
    _same_size_same_mtime(sp / "torch/version.py", "torch/version.py")
    _shadow(sp)
    done = envforge(
        "build",
        "cpu",
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        "--level",
        "quick",
        env=env,
        cwd=where,
    )
    assert done.returncode == 0, done.stderr
    assert "reinstalling (files changed since the install" in done.stderr
    assert "up to date" not in done.stderr + done.stdout
    assert (sp / "torch/version.py").read_bytes() == original
    assert not (sp / "typing_extensions").exists()
    ok = envforge(
        "shell",
        "cpu",
        "--backend",
        "venv",
        "--",
        "python",
        "-c",
        "import typing_extensions, torch",
        env=env,
        cwd=where,
    )
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in (where / "tmp").iterdir()) == []
