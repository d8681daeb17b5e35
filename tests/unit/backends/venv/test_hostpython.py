"""The venv backend runs a stack on a Python the host has (issue 19 §9): the recipe's own
when there, else the nearest its torch publishes wheels for, narrowed by the project's
requires-python; none usable is exit 4 naming the versions that would work."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envforge.backends.venv import hostpython
from envforge.errors import ExitCode, Unavailable
from envforge.knowledge import load_table
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe

from .test_venv_backend import broken_python, fake_python

#: torch 2.13.0+cpu's range in the table
CPU_RANGE = ("3.10", "3.11", "3.12", "3.13", "3.14")


@pytest.fixture
def cpu() -> Recipe:
    return Catalogue.default().load("cpu")


def host(tmp_path: Path, *versions: str) -> dict[str, str]:
    """An environment whose PATH holds only interpreters of ``versions``."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for version in versions:
        minor = ".".join(version.split(".")[:2])
        fake_python(folder, f"python{minor}", version)
    return {"PATH": str(folder)}


def test_the_table_range_is_what_a_venv_may_use(cpu: Recipe) -> None:
    assert cpu.python == "3.11"
    assert hostpython.admitted(cpu, load_table()) == CPU_RANGE


def test_a_release_the_table_does_not_know_keeps_the_recipe_python(cpu: Recipe) -> None:
    unknown = replace(cpu, torch=replace(cpu.torch, version="9.9.9+cpu"))
    assert hostpython.admitted(unknown, load_table()) == ("3.11",)


def test_the_recipe_python_wins_when_the_host_has_it(cpu: Recipe, tmp_path: Path) -> None:
    env = host(tmp_path, "3.12.3", "3.11.9")
    chosen, note = hostpython.on_host(cpu, environ=env)
    assert chosen is cpu
    assert note is None


def test_without_the_recipe_python_the_nearest_is_used_newer_on_a_tie(
    cpu: Recipe, tmp_path: Path
) -> None:
    env = host(tmp_path, "3.10.14", "3.12.3", "3.14.0")
    chosen, note = hostpython.on_host(cpu, environ=env)
    assert chosen.python == "3.12"
    assert chosen.stack_tag != cpu.stack_tag  # a venv of its own
    assert chosen.hash != cpu.hash
    assert note is not None
    assert "no python3.11" in note
    assert "Python 3.12" in note


def test_a_project_requires_python_narrows_the_choice(cpu: Recipe, tmp_path: Path) -> None:
    env = host(tmp_path, "3.11.9", "3.12.3", "3.13.1")
    chosen, note = hostpython.on_host(cpu, requires=">=3.13", environ=env)
    assert chosen.python == "3.13"
    assert note is not None
    assert "requires Python >=3.13" in note


def test_no_usable_interpreter_is_exit_4_naming_what_would_work(
    cpu: Recipe, tmp_path: Path
) -> None:
    env = host(tmp_path, "3.11.9")
    with pytest.raises(Unavailable) as caught:
        hostpython.on_host(cpu, requires=">=3.12", environ=env)
    assert caught.value.exit_code == ExitCode.UNAVAILABLE
    message = caught.value.one_line()
    assert "3.12, 3.13, 3.14" in message
    assert "this host has Python 3.11.9" in message
    assert "uv python install 3.12" in message


def test_a_requires_python_no_wheel_fits_says_so(cpu: Recipe, tmp_path: Path) -> None:
    env = host(tmp_path, "3.11.9")
    with pytest.raises(Unavailable) as caught:
        hostpython.on_host(cpu, requires="<3.9", environ=env)
    assert "no Python fits" in caught.value.one_line()
    assert "3.10-3.14" in caught.value.one_line()


def test_a_broken_shim_is_passed_over(cpu: Recipe, tmp_path: Path) -> None:
    env = host(tmp_path, "3.13.1")
    broken_python(tmp_path / "bin", "python3.11")
    chosen, _ = hostpython.on_host(cpu, environ=env)
    assert chosen.python == "3.13"


def test_an_explicit_interpreter_decides_within_the_range(cpu: Recipe, tmp_path: Path) -> None:
    exe = fake_python(tmp_path / "elsewhere", "python", "3.13.2")
    chosen, note = hostpython.on_host(cpu, explicit=str(exe), environ={"PATH": ""})
    assert chosen.python == "3.13"
    assert note is not None
    assert "--python is 3.13.2" in note
    same = fake_python(tmp_path / "same", "python", "3.11.4")
    assert hostpython.on_host(cpu, explicit=str(same), environ={"PATH": ""}) == (cpu, None)


def test_an_explicit_interpreter_outside_the_range_is_refused(cpu: Recipe, tmp_path: Path) -> None:
    exe = fake_python(tmp_path / "old", "python", "3.8.18")
    with pytest.raises(Unavailable) as caught:
        hostpython.on_host(cpu, explicit=str(exe), environ={"PATH": ""})
    assert "is Python 3.8.18" in caught.value.one_line()
    assert "3.10, 3.11, 3.12, 3.13, 3.14" in caught.value.one_line()


@pytest.mark.parametrize(
    ("wanted", "versions", "first"),
    [("3.11", ["3.10", "3.12"], "3.12"), ("3.11", ["3.9", "3.10"], "3.10"),
     ("3.12", ["3.14", "3.10"], "3.14")],
)  # fmt: skip
def test_preference_is_nearest_then_newer(wanted: str, versions: list[str], first: str) -> None:
    assert hostpython.preference(wanted, versions)[0] == first
