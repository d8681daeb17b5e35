"""Backends that build environments from recipes: Docker images and virtualenvs.

A backend is a *module* that implements :class:`Backend` with module-level functions
(as cibuildwheel's ``PlatformModule`` and pre-commit's ``Language`` do); :data:`BACKENDS`
names them. Each takes its own options dataclass (:class:`~envforge.backends.docker.DockerOptions`,
:class:`~envforge.backends.venv.VenvOptions`): how to build and run, never part of the
recipe hash.

``envforge.backends.docker`` is the only package that imports the ``docker`` SDK, and
only in its engine-bound modules (importing the package itself loads no SDK).

:func:`shell` is the one place that decides where ``envforge shell`` runs and whether it
falls back to another recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from envforge.backends import docker, venv
from envforge.recipe.model import Recipe

OptionsT_contra = TypeVar("OptionsT_contra", contravariant=True)
OptionsT = TypeVar("OptionsT")

#: Seconds per step of the quick probe ``--fallback`` runs before choosing.
FALLBACK_STEP_TIMEOUT = 30.0


class Result(Protocol):
    """What ``build`` and ``certify`` return."""

    # whether the environment is certified for the recipe now
    @property
    def certified(self) -> bool: ...

    # the data ``--json`` prints
    def to_dict(self) -> dict[str, Any]: ...


class Backend(Protocol[OptionsT_contra]):
    """A backend module. As per PEP 544, ``self`` is ignored when a module implements it."""

    # where the recipe's environment lives on this backend, for messages
    def describe(self, recipe: Recipe) -> str: ...

    # whether this backend can run the recipe now; (False, why not) otherwise
    def serves(self, recipe: Recipe, options: OptionsT_contra) -> tuple[bool, str]: ...

    # make the recipe's environment and certify it (raises when the build fails)
    def build(self, recipe: Recipe, options: OptionsT_contra) -> Result: ...

    # probe the recipe's existing environment again and record the verdict
    def certify(self, recipe: Recipe, options: OptionsT_contra) -> Result: ...

    # a quick probe now: None when the environment is usable, else why not
    def check(
        self, recipe: Recipe, options: OptionsT_contra, *, step_timeout: float
    ) -> str | None: ...

    # run argv (empty: an interactive shell) in the recipe's certified environment
    def run(self, recipe: Recipe, argv: Sequence[str], options: OptionsT_contra) -> int: ...


BACKENDS: Final[dict[str, Backend[Any]]] = {"docker": docker, "venv": venv}


def pick(recipe: Recipe, requested: str | None, *, say: Callable[[str], None]) -> str:
    """The backend to run ``recipe`` on: ``requested`` when given; else docker when it
    serves the recipe now (an engine with its certified image), else venv (said)."""
    if requested is not None:
        return requested
    ok, why = docker.serves(recipe, docker.DockerOptions())
    if ok:
        return "docker"
    say(f"using the venv backend ({why})")
    return "venv"


def shell(
    backend: Backend[OptionsT],
    recipe: Recipe,
    argv: Sequence[str],
    options: OptionsT,
    *,
    fallback: Recipe | None = None,
    say: Callable[[str], None],
) -> int:
    """Run ``argv`` in ``recipe``'s environment on ``backend``; the command's exit code.

    With ``fallback`` and a GPU recipe: quick-probe the GPU recipe's environment first (a
    certificate from yesterday says nothing about a GPU that hangs today); when that fails
    (no image or interpreter, no device, hang, crash), say why and run in ``fallback``.
    """
    chosen = recipe
    if fallback is not None and recipe.gpu.vendor != "none" and fallback.name != recipe.name:
        problem = backend.check(recipe, options, step_timeout=FALLBACK_STEP_TIMEOUT)
        if problem is not None:
            say(f"{recipe.name} cannot be used here: {problem}")
            say(f"falling back to {fallback.name}")
            chosen = fallback
    return backend.run(chosen, argv, options)
