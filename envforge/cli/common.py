"""Options and helpers shared by the CLI command modules (each option declared once)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from envforge.recipe.model import LEVELS, Level, Recipe

if TYPE_CHECKING:
    from envforge.choose import Choice
    from envforge.detect import HostInfo

F = TypeVar("F", bound=Callable[..., Any])


def note(text: str, *, tagged: bool = False) -> None:
    """A progress or status line on stderr (``tagged``: prefixed ``envforge:``)."""
    click.echo(f"envforge: {text}" if tagged else text, err=True)


def say(text: str) -> None:
    """``note(text, tagged=True)``, for callbacks that take one argument."""
    note(text, tagged=True)


# --------------------------------------------------------------------------- options


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


def wheelhouse_option(help: str) -> Callable[[F], F]:
    """``--wheelhouse DIR`` (must exist)."""
    return click.option(
        "--wheelhouse",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help=help,
    )


def ca_bundle_option(help: str) -> Callable[[F], F]:
    """``--ca-bundle FILE`` (must exist)."""
    return click.option(
        "--ca-bundle",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help=help,
    )


def _check_shm_size(_ctx: object, _param: object, value: str | None) -> str | None:
    if value is None:
        return None
    if not re.fullmatch(r"[1-9][0-9]*[bkmgBKMG]?", value):
        raise click.BadParameter(f"{value!r} is not a size (a number with b, k, m or g: 16g)")
    return value.lower()


def shm_size_option(func: F) -> F:
    """``--shm-size SIZE``: GPU containers get a private /dev/shm of SIZE, not host IPC."""
    return click.option(
        "--shm-size",
        metavar="SIZE",
        default=None,
        callback=_check_shm_size,
        help="GPU containers: a private /dev/shm of SIZE (e.g. 16g) instead of the host's "
        "IPC namespace (the default; Docker's 64 MB /dev/shm breaks DataLoader workers).",
    )(func)


def parse_level(value: str | None) -> Level | None:
    """A ``--level`` value as the :data:`Level` literal (click has checked the choice)."""
    for level in LEVELS:
        if value == level:
            return level
    return None


def level_option(help: str) -> Callable[[F], F]:
    """``--level quick|full``, passed on as a :data:`Level` (None: not given)."""
    return click.option(
        "--level",
        type=click.Choice(LEVELS),
        default=None,
        callback=lambda _ctx, _param, value: parse_level(value),
        help=help,
    )


def step_timeout_option(help: str, metavar: str | None = None) -> Callable[[F], F]:
    return click.option("--step-timeout", type=float, default=None, metavar=metavar, help=help)


def report_option(help: str, metavar: str | None = None) -> Callable[[F], F]:
    return click.option(
        "--report",
        "report_dir",
        type=click.Path(path_type=Path),  # checked by fsutil.check_folder_target: one line
        metavar=metavar,
        help=help,
    )


def backend_option(help: str, default: str | None = None) -> Callable[[F], F]:
    return click.option(
        "--backend",
        type=click.Choice(["docker", "venv"]),
        default=default,
        show_default=default is not None,
        help=help,
    )


def python_option(help: str) -> Callable[[F], F]:
    return click.option("--python", "python", metavar="PATH", default=None, help=help)


def root_option(func: F) -> F:
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("/"),
        show_default=True,
        help="Read sys/, proc/ and dev/ under ROOT (a fixture tree or a mounted host); "
        "tools such as rocminfo run only for /.",
    )(func)


# --------------------------------------------------------------------------- recipes


def load_checked(ref: str, overrides: Sequence[str] = ()) -> Recipe:
    """Load a recipe by name or path and refuse it if the compatibility table does."""
    from envforge.knowledge import enforce  # noqa: PLC0415 - the table only when needed
    from envforge.recipe.catalogue import Catalogue  # noqa: PLC0415 - yaml when loading

    recipe = Catalogue.default().load(ref, overrides)
    enforce(recipe)
    return recipe


def resolve_auto(recipe_ref: str) -> str:
    """``auto`` → the chosen recipe (its file when it came from a folder), said on stderr."""
    if recipe_ref != "auto":
        return recipe_ref
    from envforge.choose import choose  # noqa: PLC0415 - host detection only for auto
    from envforge.detect import detect  # noqa: PLC0415 - host detection only for auto

    choice = choose(detect())
    say(f"auto -> {choice.recipe}: {choice.reason}")
    return str(choice.path) if choice.path is not None else choice.recipe


def load_for_host(
    ref: str, host: HostInfo, overrides: tuple[str, ...] = ()
) -> tuple[Recipe, Choice | None]:
    """``auto`` → the chosen recipe; anything else → that recipe. Both checked."""
    if ref != "auto":
        return load_checked(ref, overrides), None
    from envforge.choose import choose  # noqa: PLC0415 - only for auto

    choice = choose(host)
    target = str(choice.path) if choice.path is not None else choice.recipe
    return load_checked(target, overrides), choice


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))
