"""``--format devcontainer``: a ``.devcontainer/`` that runs like ``envforge shell``,
from the certified image or from the rendered Dockerfile (``--devcontainer-from``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envforge.container.devices import device_flags
from envforge.recipe.model import Recipe
from envforge.render.devcontainer import Devcontainer, generic_flags, render_devcontainer
from envforge.render.dockerfile import render_dockerfile
from envforge.render.formats.base import File, Request


def check(recipe_ref: str | None, render_all: bool, request: Request) -> None:
    """Any recipe, or the catalogue."""


def platform_bound() -> bool:
    return True


def _devcontainer(recipe: Recipe, request: Request) -> Devcontainer:
    """The recipe's .devcontainer/ files, with this host's device flags for its vendor
    (the vendor's generic flags when this host has no such GPU)."""
    flags = device_flags(recipe.gpu.vendor)
    if flags.vendor != recipe.gpu.vendor:
        flags = generic_flags(recipe.gpu.vendor)
    if request.devcontainer_from == "dockerfile":
        return render_devcontainer(
            recipe,
            flags,
            source="dockerfile",
            dockerfile=render_dockerfile(recipe, request.options),
        )
    return render_devcontainer(recipe, flags, source="image")


def printed(recipe: Recipe, request: Request) -> str:
    return dict(_devcontainer(recipe, request).files)["devcontainer.json"]


def files(recipe: Recipe, request: Request) -> tuple[File, ...]:
    return tuple(
        (f".devcontainer/{name}", text, False)
        for name, text in _devcontainer(recipe, request).files
    )


def closing(count: int, output: Path, written: Sequence[Path]) -> str:
    return f"wrote {count} devcontainer(s) under {output}"
