"""``--format venv``: the venv plan (setup.sh, requirements, constraints, activation)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envforge.recipe.model import Recipe
from envforge.render.formats.base import File, Request
from envforge.render.venv import plan_venv


def check(recipe_ref: str | None, render_all: bool, request: Request) -> None:
    """Any recipe, or the catalogue."""


def platform_bound() -> bool:
    return True


def printed(recipe: Recipe, request: Request) -> str:
    return plan_venv(recipe, request.options).setup_script


def files(recipe: Recipe, request: Request) -> tuple[File, ...]:
    plan = plan_venv(recipe, request.options)
    return (
        ("venv/setup.sh", plan.setup_script, True),
        ("venv/requirements.txt", plan.requirements_txt, False),
        ("venv/constraints.txt", plan.constraints_txt, False),
        ("venv/activate.sh", plan.activate_script, False),
    )


def closing(count: int, output: Path, written: Sequence[Path]) -> str:
    return f"wrote {count} venv plan(s) under {output}"
