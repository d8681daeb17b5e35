"""What every ``envforge render --format`` implements, and what it is handed.

A format is a *module* implementing :class:`Format` with module-level functions (as a
backend is, :mod:`envforge.backends`); :data:`envforge.render.formats.FORMATS` names them,
and ``render`` reaches a format only through it. Adding a format means adding a module
(and its templates) and one line in the registry, not editing the command.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from envforge.recipe.model import Recipe
    from envforge.render.context import RenderOptions

#: A file ``render -o DIR`` writes: (path under ``DIR/<recipe>/``, text, executable).
File = tuple[str, str, bool]


@dataclass(frozen=True)
class Request:
    """The command's flags a format may read: the render options, ``--devcontainer-from``
    (``image`` or ``dockerfile``) and ``--image`` (a certified image by digest)."""

    options: RenderOptions
    devcontainer_from: str = "image"
    image: str | None = None


class Format(Protocol):
    """A format module. As per PEP 544, ``self`` is ignored when a module implements it."""

    # refuse what the format cannot render, before any recipe is loaded
    def check(self, recipe_ref: str | None, render_all: bool, request: Request) -> None: ...

    # whether the recipe is checked for --platform (False: for this host)
    def platform_bound(self) -> bool: ...

    # the text printed when no -o is given
    def printed(self, recipe: Recipe, request: Request) -> str: ...

    # the files -o DIR writes for the recipe, under DIR/<recipe>/
    def files(self, recipe: Recipe, request: Request) -> tuple[File, ...]: ...

    # the closing line on stderr after -o DIR wrote ``written`` for ``count`` recipes
    def closing(self, count: int, output: Path, written: Sequence[Path]) -> str: ...
