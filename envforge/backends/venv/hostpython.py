"""The Python a venv runs on: the recipe's, or another this host has that the stack allows.

A recipe's ``python`` is what its image uses. A venv is made from an interpreter of the
host, so on the venv backend the stack runs on any CPython its torch release publishes
wheels for (the table's range for the release and variant), narrowed by the project's
``requires-python``. The recipe's own version wins when the host has it and the project
allows it; otherwise the allowed version nearest to it (the newer on a tie) that the host
has. The venv is then the recipe with that ``python`` (its own hash and folder), and the
user is told why. No usable interpreter is :class:`~envforge.errors.Unavailable` (exit 4)
naming the versions that would work and how to get one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from envforge.backends.venv.interpreter import (
    Interpreter,
    _off_path_hints,
    query_interpreter,
    search,
)
from envforge.errors import Unavailable
from envforge.knowledge import load_table, variant_of
from envforge.knowledge.table import CompatTable
from envforge.recipe.model import Recipe


@dataclass(frozen=True)
class PythonChoice:
    """The minor version a venv uses, and why when it is not the recipe's."""

    python: str
    note: str | None = None


def minor_number(version: str) -> int:
    return int(version.split(".")[1])


def admitted(recipe: Recipe, table: CompatTable) -> tuple[str, ...]:
    """The CPython minors the recipe's torch publishes wheels for (the recipe's own when
    the table has no row for its release and variant)."""
    variant = variant_of(recipe, table)
    if variant is None:
        return (recipe.python,)
    low, high = variant.python_range(recipe.torch.version)
    major = low.split(".")[0]
    found = tuple(f"{major}.{m}" for m in range(minor_number(low), minor_number(high) + 1))
    return found if recipe.python in found else (recipe.python, *found)


def allowed_by(requires: str | None, versions: Sequence[str]) -> tuple[str, ...]:
    """``versions`` that a project's ``requires-python`` admits (all of them without one)."""
    if not requires:
        return tuple(versions)
    try:
        spec = SpecifierSet(requires)
    except InvalidSpecifier:
        return tuple(versions)
    return tuple(v for v in versions if spec.contains(f"{v}.0", prereleases=True))


def preference(wanted: str, versions: Sequence[str]) -> list[str]:
    """``versions`` nearest to ``wanted`` first, the newer on a tie."""
    w = minor_number(wanted)
    return sorted(versions, key=lambda v: (abs(minor_number(v) - w), -minor_number(v)))


def choose(
    wanted: str,
    versions: Sequence[str],
    *,
    requires: str | None = None,
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    what: str = "the stack",
) -> PythonChoice:
    """The Python minor a venv of ``what`` uses on this host (see the module's text)."""
    env = dict(os.environ if environ is None else environ)
    usable = allowed_by(requires, versions)
    project = f" and the project's requires-python {requires}" if requires else ""
    if explicit is not None:
        return _explicit(wanted, usable, explicit, env, f"{what}{project}")
    seen: set[str] = set()
    for version in preference(wanted, usable):
        if search(version, env, seen) is None:
            continue
        if version == wanted:
            return PythonChoice(version)
        why = (
            f"the project requires Python {requires}"
            if wanted not in usable
            else f"this host has no python{wanted}"
        )
        return PythonChoice(
            version,
            f"the recipe's Python is {wanted}; {why}: the venv uses Python {version} "
            f"({what} publishes wheels for CPython {_span(versions)})",
        )
    for version in versions:  # what this host has, for the message
        if version not in usable:
            search(version, env, seen)
    raise _none_usable(
        wanted, usable, seen=seen, what=f"{what}{project}", versions=versions, home=home
    )


def _explicit(
    wanted: str, usable: Sequence[str], explicit: str, env: Mapping[str, str], what: str
) -> PythonChoice:
    """``--python PATH``: its version decides, when the stack allows it."""
    exe = shutil.which(explicit, path=env.get("PATH")) if os.sep not in explicit else explicit
    found: Interpreter | None = query_interpreter([exe], env) if exe else None
    if found is None:
        raise Unavailable(
            f"--python {explicit}: cannot run it as a Python interpreter",
            hint=f"pass the path of a Python interpreter: {_list(usable)}",
        )
    if found.minor not in usable:
        raise Unavailable(
            f"--python {explicit} is Python {found.version}; {what} runs on Python "
            f"{_list(usable) or 'none'}",
            hint=f"pass an interpreter of Python {_list(usable)}",
        )
    if found.minor == wanted:
        return PythonChoice(wanted)
    return PythonChoice(
        found.minor,
        f"the recipe's Python is {wanted}; --python is {found.version}: the "
        f"venv uses Python {found.minor}",
    )


def _none_usable(
    wanted: str,
    usable: Sequence[str],
    *,
    seen: set[str],
    what: str,
    versions: Sequence[str],
    home: Path | None,
) -> Unavailable:
    has = f"; this host has Python {', '.join(sorted(seen))}" if seen else ""
    if not usable:
        return Unavailable(
            f"no Python fits {what}: torch publishes wheels for CPython {_span(versions)}{has}",
            hint="widen the project's requires-python, or choose a recipe whose torch "
            "has wheels for a Python it allows (envforge solve ARCH)",
        )
    first = preference(wanted, usable)[0]
    hint = (
        f"install one of Python {_list(usable)} and put it on PATH, or pass --python PATH: "
        f'`uv python install {first}` then --python "$(uv python find {first})"; or apt '
        f"install python{first} (deadsnakes PPA on Ubuntu); or `pyenv install {first}`"
    )
    for version in preference(wanted, usable):
        off_path = _off_path_hints(version, home if home is not None else Path.home())
        if off_path:
            hint = f"found {off_path[0]} (not on PATH): pass --python {off_path[0]}; or {hint}"
            break
    return Unavailable(
        f"no usable Python interpreter for {what}: it runs on Python {_list(usable)}{has}",
        hint=hint,
    )


def _span(versions: Sequence[str]) -> str:
    ordered = sorted(versions, key=minor_number)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"


def _list(versions: Sequence[str]) -> str:
    return ", ".join(sorted(versions, key=minor_number))


def on_host(
    recipe: Recipe,
    *,
    requires: str | None = None,
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
    table: CompatTable | None = None,
) -> tuple[Recipe, str | None]:
    """``recipe`` with the Python its venv uses on this host, and the note saying why
    when that is not the recipe's own."""
    versions = admitted(recipe, load_table() if table is None else table)
    what = f"torch {recipe.torch.version} ({recipe.accelerator})"
    choice = choose(
        recipe.python, versions, requires=requires, explicit=explicit, environ=environ,
        what=what,
    )  # fmt: skip
    if choice.python == recipe.python:
        return recipe, None
    return replace(recipe, python=choice.python), choice.note
