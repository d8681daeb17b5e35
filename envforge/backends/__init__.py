"""Backends that build environments from recipes: Docker images and virtualenvs.

A backend is a *module* that implements :class:`Backend` with module-level functions
(as cibuildwheel's ``PlatformModule`` and pre-commit's ``Language`` do); :data:`BACKENDS`
names them, and every command reaches a backend only through it: ``BACKENDS[name]``.
A backend is imported once, by its module path, when it is first looked up there, so
that importing this package (or :mod:`.base`) loads no backend.
Each is handed the one :class:`~envforge.backends.base.Options` value of the command and
declares the flags only it has (``cli_options``); doctor asks each for its own findings.

``envforge.backends.docker`` is the only package that imports the ``docker`` SDK, and
only in its engine-bound modules (importing the package itself loads no SDK).

:func:`pick` decides which backend runs a recipe when none is named, and :func:`shell`
whether ``envforge shell`` falls back to another recipe.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, cast

from envforge.backends.base import BackendOption, Command, HostCheck, Options, Result
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    from envforge.host.detect import HostInfo
    from envforge.host.doctor import Finding

#: Seconds per step of the quick probe ``--fallback`` runs before choosing.
FALLBACK_STEP_TIMEOUT = 30.0


class Backend(Protocol):
    """A backend module. As per PEP 544, ``self`` is ignored when a module implements it."""

    # the flags only some backends have, declared by this one (per command)
    def cli_options(self) -> tuple[BackendOption, ...]: ...

    # whether the environment is an image a registry or scheduler can carry (fleet plans)
    def runs_images(self) -> bool: ...

    # where the recipe's environment lives on this backend, for messages
    def describe(self, recipe: Recipe) -> str: ...

    # whether this backend can run the recipe now; (False, why not) otherwise
    def serves(self, recipe: Recipe, options: Options) -> tuple[bool, str]: ...

    # make the recipe's environment and certify it (raises when the build fails)
    def build(self, recipe: Recipe, options: Options) -> Result: ...

    # probe the recipe's existing environment again and record the verdict
    def certify(self, recipe: Recipe, options: Options) -> Result: ...

    # a quick probe now: None when the environment is usable, else why not
    def check(self, recipe: Recipe, options: Options, *, step_timeout: float) -> str | None: ...

    # run argv (empty: an interactive shell) in the recipe's certified environment
    def run(self, recipe: Recipe, argv: Sequence[str], options: Options) -> int: ...

    # doctor: what this backend needs of this host, found there (recipe None: the host only)
    def findings(
        self, recipe: Recipe | None, host: HostInfo, check: HostCheck
    ) -> list[Finding]: ...

    # doctor: about how many bytes a build of a recipe for ``vendor`` takes, and where
    def disk_need(self, vendor: str) -> tuple[int, Path]: ...


class _HasFlags(Protocol):
    def cli_options(self) -> tuple[BackendOption, ...]: ...


class _Backends(MutableMapping[str, Backend]):
    """Backend names to backend modules, each named by its module path and imported when
    it is first looked up (Python's module cache keeps it); a module may be registered
    directly too (tests register a fake). A backend's flags may live in a light module
    of their own (``flags``): :meth:`cli_options` reads them without importing the
    backend, so a command line is parsed without the backends it does not use."""

    def __init__(self, paths: Mapping[str, str], flags: Mapping[str, str] | None = None) -> None:
        self._entries: dict[str, str | Backend] = dict(paths)
        self._flags: dict[str, str] = dict(flags or {})

    def cli_options(self, name: str) -> tuple[BackendOption, ...]:
        """The flags backend ``name`` declares, from its flags module where it has one."""
        entry = self._entries[name]
        flags = self._flags.get(name)
        if isinstance(entry, str) and flags is not None:
            return cast("_HasFlags", importlib.import_module(flags)).cli_options()
        return self[name].cli_options()

    def __getitem__(self, name: str) -> Backend:
        entry = self._entries[name]
        if isinstance(entry, str):
            return cast("Backend", importlib.import_module(entry))
        return entry

    def __setitem__(self, name: str, backend: Backend) -> None:
        self._entries[name] = backend
        self._flags.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._flags.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


#: The backends, in the order :func:`pick` prefers them (the first is the default).
BACKENDS: Final[MutableMapping[str, Backend]] = _Backends(
    {"docker": "envforge.backends.docker", "venv": "envforge.backends.venv"},
    flags={"docker": "envforge.backends.flags.docker", "venv": "envforge.backends.flags.venv"},
)


def default_backend() -> str:
    """The backend a command uses when none is named and none is implied."""
    return next(iter(BACKENDS))


def pick(
    recipe: Recipe,
    requested: str | None,
    *,
    say: Callable[[str], None],
    options: Options | None = None,
) -> str:
    """The backend to run ``recipe`` on: ``requested`` when given; else the first of
    :data:`BACKENDS` that serves the recipe (with ``options``: e.g. a project) now (docker:
    an engine with its certified image), saying why the ones before it do not; else the
    last."""
    if requested is not None:
        return requested
    names = list(BACKENDS)
    why = ""
    for name in names:
        ok, why_not = BACKENDS[name].serves(recipe, options or Options())
        if ok:
            if why:
                say(f"using the {name} backend ({why})")
            return name
        why = why or why_not
    say(f"using the {names[-1]} backend ({why})")
    return names[-1]


def shell(
    backend: Backend,
    recipe: Recipe,
    argv: Sequence[str],
    options: Options,
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


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendOption",
    "Command",
    "HostCheck",
    "Options",
    "Result",
    "default_backend",
    "pick",
    "shell",
]
