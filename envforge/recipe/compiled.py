"""A catalogue recipe as commands get it: read and checked from YAML once, then read from
its compiled form.

``show``, ``validate`` and ``solve`` load one recipe each; composing its YAML and running
the recipe checks (PEP 508 parsing of ``packages:`` with ``packaging.requirements``, the
companion table) costs more than the rest of ``show``. :func:`load_recipe` keeps the
checked :class:`~envforge.recipe.model.Recipe` in
``$ENVFORGE_CACHE_DIR/compiled/recipe-<digest of the file's absolute path>.json``
through :mod:`envforge.core.datacache` (the table's cache: plain JSON, a header with the
key and the payload's SHA-256, written atomically, best effort). The key is envforge's
and Python's versions, packaging's version (its PEP 508 grammar decides what a pin is),
the size and modification time of the loader's modules, and the path and SHA-256 of the
recipe file and of ``companions.yaml`` (which decides what a bare companion name is). A
stale, corrupt, foreign or unreadable cache file is never trusted: the YAML is read and
checked again, and a refused recipe is never cached.

Only files in a catalogue folder are kept (one cache file each, so the folder cannot grow
with every path a user names), never with ``--set`` overrides, and never a recipe with
``certify.extra_checks`` (its value depends on other files being there).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import packaging

from envforge.core import datacache
from envforge.core.resources import data_file
from envforge.recipe import model
from envforge.recipe.model import Recipe

#: The modules whose code decides what a recipe file loads to (or that it is refused).
LOADER_MODULES = (
    "recipe/load.py",
    "recipe/checks.py",
    "recipe/model.py",
    "recipe/compiled.py",
    "core/yamlcheck.py",
    "core/patterns.py",
    "core/datacache.py",
    "knowledge/companions.py",
    "errors.py",
)
#: The dataclasses a compiled recipe holds.
CLASSES = (
    Recipe,
    model.Gpu,
    model.Torch,
    model.PackageIndex,
    model.EnvVar,
    model.KnownIssue,
    model.CertifySettings,
)

#: What else decides whether a recipe loads: packaging's PEP 508 grammar.
EXTRA = (f"packaging {packaging.__version__}",)


def cache_name(path: Path) -> str:
    """The cache file's name for a recipe file: one per absolute path."""
    where = os.path.abspath(path).encode("utf-8", "surrogateescape")
    return "recipe-" + hashlib.sha256(where).hexdigest()[:24]


def load_recipe(path: Path, overrides: Sequence[str] = (), *, compiled: bool = True) -> Recipe:
    """The recipe in ``path``: with no ``overrides`` and ``compiled``, from its compiled
    form when that is fresh; else :func:`envforge.recipe.load.load_recipe_file`, whose
    errors propagate."""
    if overrides or not compiled:
        found: Recipe = loader().load_recipe_file(path, overrides)
        return found
    return datacache.load(
        cache_name(path),
        [path, data_file("companions.yaml")],
        lambda: _parse(path),
        Recipe,
        CLASSES,
        code=LOADER_MODULES,
        extra=EXTRA,
        keep=lambda recipe: not recipe.certify.extra_checks,
    )


def parse_recipe(data: dict[str, Any], source: str, overrides: Sequence[str] = ()) -> Recipe:
    """Recipe data made in code (a solved stack, ``solve --with``) read as a recipe file
    is (:func:`envforge.recipe.load.parse_recipe`), ``--set`` overrides applied first."""
    load = loader()
    if overrides:
        data = load.apply_overrides(data, overrides)
        source += f" (with --set {' '.join(overrides)})"
    parsed: Recipe = load.parse_recipe(data, source)
    return parsed


def recipe_yaml(data: dict[str, Any]) -> str:
    """:func:`envforge.recipe.load.recipe_yaml` (PyYAML's dumper, with the loader)."""
    text: str = loader().recipe_yaml(data)
    return text


def _parse(path: Path) -> Recipe:
    """Read and check the YAML (a cache miss)."""
    parsed: Recipe = loader().load_recipe_file(path)
    return parsed


def loader() -> ModuleType:
    """:mod:`envforge.recipe.load`, imported when a recipe is read from YAML (a cache
    miss, ``--set``, recipe data made by ``solve --with``): with it PyYAML's composer,
    the recipe checks, ``packaging.requirements`` and the companion table."""
    from envforge.recipe import load  # noqa: PLC0415 - see above

    return load
