"""Venv backend pieces that need no uv and no network: interpreters, locations, markers."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from envforge.backends import venv
from envforge.backends.venv import (
    MARKER_DIR,
    Interpreter,
    VenvOptions,
    find_interpreter,
    fingerprint,
    install_key,
    run_in_venv,
    venv_environ,
    venv_location,
)
from envforge.backends.venvfs import content_digests
from envforge.errors import Unavailable
from envforge.recipe.model import EnvVar
from tests.helpers.recipes import make_recipe

#: The shipped cpu recipe's pins.
CPU = make_recipe(
    base_image="debian:bookworm-slim",
    torch="2.13.0+cpu",
    index="https://download.pytorch.org/whl/cpu",
    numpy=">=1.26,<3",
)


def fake_python(folder: Path, name: str, version: str) -> Path:
    """An executable that answers the interpreter query like Python ``version`` would."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(f'#!/bin/sh\necho "{version}"\necho "{exe}"\n')
    exe.chmod(0o755)
    return exe


def broken_python(folder: Path, name: str) -> Path:
    """Like a pyenv shim for a version that is not selected: exits 127."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(f"#!/bin/sh\necho 'pyenv: {name}: command not found' >&2\nexit 127\n")
    exe.chmod(0o755)
    return exe


# --------------------------------------------------------------------------- interpreters


def test_finds_the_versioned_name_first(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    fake_python(a, "python3", "3.10.14")
    want = fake_python(b, "python3.10", "3.10.13")
    found = find_interpreter("3.10", environ={"PATH": f"{a}:{b}"}, home=tmp_path)
    assert found == Interpreter(path=str(want), executable=str(want), version="3.10.13")


def test_generic_names_when_they_are_the_right_version(tmp_path: Path) -> None:
    exe = fake_python(tmp_path / "bin", "python3", "3.10.14")
    found = find_interpreter("3.10", environ={"PATH": str(tmp_path / "bin")}, home=tmp_path)
    assert found.path == str(exe)
    assert found.minor == "3.10"


def test_never_another_version(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin", "python3", "3.11.7")
    fake_python(tmp_path / "bin", "python", "3.12.1")
    broken_python(tmp_path / "bin", "python3.10")  # a shim that cannot run
    with pytest.raises(Unavailable) as err:
        find_interpreter("3.10", environ={"PATH": str(tmp_path / "bin")}, home=tmp_path)
    text = err.value.one_line()
    assert "no python3.10 interpreter found" in text
    assert "PATH has Python 3.11.7, 3.12.1" in text
    assert "uv python install 3.10" in text
    assert err.value.exit_code == 4


def test_names_an_interpreter_that_is_off_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    off = fake_python(home / ".pyenv/versions/3.10.13/bin", "python3.10", "3.10.13")
    with pytest.raises(Unavailable) as err:
        find_interpreter("3.10", environ={"PATH": str(tmp_path / "empty")}, home=home)
    assert f"pass --python {off}" in err.value.one_line()


def test_explicit_python_must_be_the_version(tmp_path: Path) -> None:
    exe = fake_python(tmp_path, "mypython", "3.11.7")
    with pytest.raises(Unavailable) as err:
        find_interpreter("3.10", explicit=str(exe), environ={"PATH": ""}, home=tmp_path)
    assert "is Python 3.11.7; the recipe needs Python 3.10" in err.value.one_line()
    assert find_interpreter("3.11", explicit=str(exe), environ={"PATH": ""}).version == "3.11.7"


def test_explicit_python_that_does_not_run(tmp_path: Path) -> None:
    exe = broken_python(tmp_path, "python3.10")
    with pytest.raises(Unavailable, match="cannot run it"):
        find_interpreter("3.10", explicit=str(exe), environ={"PATH": ""}, home=tmp_path)


def test_py_launcher(tmp_path: Path) -> None:
    launcher = tmp_path / "bin" / "py"
    launcher.parent.mkdir(parents=True)
    real = tmp_path / "opt" / "python3.10"
    launcher.write_text(f'#!/bin/sh\n[ "$1" = "-3.10" ] || exit 1\necho 3.10.9\necho "{real}"\n')
    launcher.chmod(0o755)
    found = find_interpreter("3.10", environ={"PATH": str(tmp_path / "bin")}, home=tmp_path)
    assert (found.executable, found.version) == (str(real), "3.10.9")


def test_real_interpreter_is_found() -> None:
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = find_interpreter(here, explicit=sys.executable)
    assert found.minor == here


# --------------------------------------------------------------------------- locations, markers


def test_location_is_recipe_stack_and_short_hash(tmp_path: Path) -> None:
    recipe = CPU
    path = venv_location(recipe, {"ENVFORGE_HOME": str(tmp_path)})
    short = recipe.hash.split(":")[1][:12]
    assert path == tmp_path / "venvs" / "cpu" / f"torch2.13.0-cpu-py3.11-{short}"


def fake_venv(root: Path) -> Path:
    sp = root / "lib" / "python3.11" / "site-packages"
    for dist in ("torch-2.13.0+cpu", "numpy-2.4.6"):
        info = sp / f"{dist}.dist-info"
        info.mkdir(parents=True)
        (info / "RECORD").write_text(f"{dist}/__init__.py,sha256=abc,10\n")
    (root / "bin").mkdir()
    os.symlink(sys.executable, root / "bin" / "python")
    return root


def test_fingerprint_follows_the_installed_set_not_the_path(tmp_path: Path) -> None:
    one = fake_venv(tmp_path / "one")
    first = fingerprint(one)
    shutil.copytree(one, tmp_path / "two", symlinks=True)
    assert fingerprint(tmp_path / "two") == first
    record = next((one / "lib/python3.11/site-packages").glob("numpy-*.dist-info")) / "RECORD"
    record.write_text("numpy/__init__.py,sha256=changed,10\n")
    assert fingerprint(one) != first


def test_environ_puts_the_venv_first(tmp_path: Path) -> None:
    env_var = EnvVar("MIOPEN_DEBUG_CONV_IMPLICIT_GEMM", "0", "why", (), "verified")
    env = venv_environ(
        tmp_path, make_recipe(CPU, env=(env_var,)), {"PATH": "/usr/bin", "PYTHONHOME": "/x"}
    )
    assert env["PATH"] == f"{tmp_path / 'bin'}:/usr/bin"
    assert env["VIRTUAL_ENV"] == str(tmp_path)
    assert env["MIOPEN_DEBUG_CONV_IMPLICIT_GEMM"] == "0"
    assert "PYTHONHOME" not in env


def test_up_to_date_does_no_work(tmp_path: Path) -> None:
    home = {"ENVFORGE_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")}
    recipe = make_recipe(CPU, python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    options = VenvOptions(python=sys.executable, environ=home, use_lock=False)
    interp = find_interpreter(recipe.python, explicit=sys.executable, environ=home)
    target = fake_venv(venv_location(recipe, home))
    markers = target / MARKER_DIR
    markers.mkdir()
    fp = fingerprint(target)
    content = content_digests(target)  # the certificate is bound to the files' content
    key = install_key(recipe, interp, options, None)
    built = {"install_key": key, "fingerprint": fp, "content": content, "content_format": 2}
    (markers / "build.json").write_text(json.dumps(built))
    cert = {
        "recipe_hash": recipe.hash,
        "fingerprint": fp,
        "level": "full",
        "content": content,
        "content_format": 2,
    }
    (markers / "certified.json").write_text(json.dumps(cert))
    result = venv.build(recipe, options)
    assert result.status == "up-to-date"
    assert result.report is None
    assert venv.state(recipe, home).certified
    # Another installed set (a package added by hand) is not up to date any more.
    (target / "lib/python3.11/site-packages/extra-1.0.dist-info").mkdir()
    assert not venv.state(recipe, home).certified


def test_install_key_moves_with_sources_and_interpreter(tmp_path: Path) -> None:
    recipe = CPU
    interp = Interpreter("/usr/bin/python3.11", "/usr/bin/python3.11", "3.11.2")
    base = install_key(recipe, interp, VenvOptions(), None)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    assert install_key(recipe, interp, VenvOptions(wheelhouse=wheels), None) != base
    newer = Interpreter("/usr/bin/python3.11", "/usr/bin/python3.11", "3.11.9")
    assert install_key(recipe, newer, VenvOptions(), None) != base
    assert install_key(recipe, interp, VenvOptions(ca_bundle=tmp_path / "ca.pem"), None) == base


# --------------------------------------------------------------------------- running commands


def test_run_passes_the_exit_code_through(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    recipe = CPU
    assert run_in_venv(tmp_path, recipe, ["sh", "-c", "exit 7"]) == 7
    assert run_in_venv(tmp_path, recipe, ["sh", "-c", "kill -TERM $$"]) == 128 + 15
    assert run_in_venv(tmp_path, recipe, ["no-such-command-anywhere"]) == 127


def test_run_sees_the_venv_environment(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "whereami"
    tool.write_text('#!/bin/sh\necho "$VIRTUAL_ENV:$HSA_OVERRIDE_GFX_VERSION"\n')
    tool.chmod(0o755)
    env_var = EnvVar("HSA_OVERRIDE_GFX_VERSION", "10.3.0", "why", (), "community")
    assert run_in_venv(tmp_path, make_recipe(CPU, env=(env_var,)), ["whereami"]) == 0
    assert capfd.readouterr().out.strip() == f"{tmp_path}:10.3.0"
