"""Options and helpers shared by the CLI command modules."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from envforge.knowledge import enforce
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe

F = TypeVar("F", bound=Callable[..., Any])


def set_option(func: F) -> F:
    """``--set key.path=value`` (repeatable): override any recipe key, value as YAML."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY.PATH=VALUE",
        help="Override a recipe key (repeatable; the value is parsed as YAML).",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print data as JSON.")(func)


def load_checked(ref: str, overrides: Sequence[str] = ()) -> Recipe:
    """Load a recipe by name or path and refuse it if the compatibility table does."""
    recipe = Catalogue.default().load(ref, overrides)
    enforce(recipe)
    return recipe


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))
