"""``--format dockerfile`` (the default): the recipe's Dockerfile, with its lock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from envforge.recipe.model import Recipe
from envforge.render.context import RenderOptions
from envforge.render.dockerfile import render_dockerfile
from envforge.render.formats.base import File, Request
from envforge.stack import Stack, stack_of


def check(recipe_ref: str | None, render_all: bool, request: Request) -> None:
    """Any recipe, or the catalogue."""


def platform_bound() -> bool:
    return True


def _with_lock(recipe: Recipe, options: RenderOptions, stack: Stack) -> RenderOptions:
    """The Dockerfile installs the recipe's lock when one matches it, as builds do."""
    from envforge import lock  # noqa: PLC0415 - only when rendering

    path = lock.lock_path(recipe, stack)
    if path is None:
        return options
    return replace(options, lock=lock.split_lock(path, stack.family()))


def printed(recipe: Recipe, request: Request) -> str:
    stack = stack_of(recipe)
    return render_dockerfile(recipe, _with_lock(recipe, request.options, stack), stack)


def files(recipe: Recipe, request: Request) -> tuple[File, ...]:
    return (("Dockerfile", printed(recipe, request), False),)


def closing(count: int, output: Path, written: Sequence[Path]) -> str:
    return f"wrote {count} Dockerfile(s) under {output}"
