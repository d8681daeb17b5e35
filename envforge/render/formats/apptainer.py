"""``--format apptainer``: one recipe's ``envforge.def``, bootstrapped from its certified
image by digest (``--image REF@sha256:...``; :mod:`envforge.render.apptainer`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envforge.errors import InvalidInput
from envforge.recipe.model import Recipe
from envforge.render.apptainer import render_apptainer
from envforge.render.formats.base import File, Request


def check(recipe_ref: str | None, render_all: bool, request: Request) -> None:
    """One recipe (its certified image), and that image named."""
    if render_all or recipe_ref is None:
        raise InvalidInput(
            "--format apptainer renders one recipe (its certified image)",
            hint="envforge render RECIPE --format apptainer --image REF@sha256:...",
        )
    if request.image is None:
        raise InvalidInput(
            "--format apptainer needs --image REF@sha256:DIGEST",
            hint="the certified image's digest, as envforge publish prints it",
        )


def platform_bound() -> bool:
    """The image was built and certified already: the recipe is checked for this host."""
    return False


def printed(recipe: Recipe, request: Request) -> str:
    return render_apptainer(recipe, request.image or "")


def files(recipe: Recipe, request: Request) -> tuple[File, ...]:
    return (("envforge.def", printed(recipe, request), False),)


def closing(count: int, output: Path, written: Sequence[Path]) -> str:
    return f"wrote {written[0]}"
