"""``--backend`` and the flags each backend declares, as click options (build, shell,
certify, doctor, fleet; never loaded by the light commands)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from envforge.backends import BACKENDS
from envforge.backends.base import Command, given, unique_options
from envforge.cli.common import _check_shm_size, effective_settings
from envforge.core.mirror import check_registry_prefix, parse_index_mirror
from envforge.core.settings import Settings, Value
from envforge.errors import InvalidInput

if TYPE_CHECKING:
    from envforge.project.model import Project

F = TypeVar("F", bound=Callable[..., Any])


def _check_backend(_ctx: object, _param: object, value: str | None) -> str | None:
    """A name in :data:`envforge.backends.BACKENDS`, read when a value is given (so
    ``--help`` of light commands loads no backend)."""
    if value is None:
        return None

    if value not in BACKENDS:
        raise click.BadParameter(f"{value!r} is not a backend (one of: {', '.join(BACKENDS)})")
    return value


def backend_option(help: str, default: str | None = None) -> Callable[[F], F]:
    return click.option(
        "--backend",
        default=default,
        callback=_check_backend,
        show_default=default is not None,
        metavar="NAME",
        help=f"{help} (docker, venv, or another installed backend)",
    )


def backend_flags(command: Command) -> Callable[[F], F]:
    """The flags the backends declare for ``command`` (each once), as click options."""
    kinds: dict[str, Any] = {
        "dir": click.Path(exists=True, file_okay=False, path_type=Path),
        "file": click.Path(exists=True, dir_okay=False, path_type=Path),
    }

    def decorate(func: F) -> F:
        for option in reversed(unique_options(BACKENDS, command)):
            kind: Any = click.Choice(option.choices) if option.choices else kinds.get(option.kind)
            func = click.option(
                option.flag,
                option.key,
                type=kind,
                is_flag=option.is_flag,
                multiple=option.multiple,
                metavar=option.metavar,
                default=None
                if not (option.is_flag or option.multiple)
                else (False if option.is_flag else ()),
                callback=_check_shm_size if option.kind == "size" else None,
                help=option.help,
            )(func)
        return func

    return decorate


def backend_extra(command: Command, values: dict[str, Any]) -> dict[str, Any]:
    """Of a command's keyword arguments, the values of the backend flags given."""
    return given(unique_options(BACKENDS, command), values)


def settled_backend(settings: Settings) -> str | None:
    """The ``backend`` setting (a flag was checked by click), checked here: a name not in
    :data:`~envforge.backends.BACKENDS` is exit 2 naming where it was set."""
    value = settings.get("backend")
    name = settings.text("backend")
    if name is not None and name not in BACKENDS:
        raise InvalidInput(
            f"{value.origin}: backend: {name!r} is not a backend",
            hint=f"one of: {', '.join(BACKENDS)}",
        )
    return name


def settled_mirrors(settings: Settings) -> tuple[str | None, str | None]:
    """The ``index_mirror`` and ``base_image_mirror`` settings (those of ``settings``'
    keys), checked: an item that is not a URL or pair, or a prefix that is no registry,
    is exit 2 naming where it was set. The index mirror stays text (parsed where used)."""
    keys = {value.key: value for value in settings.values}
    index = keys.get("index_mirror")
    if index is not None and isinstance(index.value, str):
        parse_index_mirror(index.value, setting=_setting(index))
    base = keys.get("base_image_mirror")
    prefix = None
    if base is not None and isinstance(base.value, str):
        prefix = check_registry_prefix(base.value, _setting(base))
    return (index.value if index is not None and isinstance(index.value, str) else None), prefix


def with_base_mirror(chosen: str, extra: Mapping[str, Any], prefix: str | None) -> dict[str, Any]:
    """``extra`` with the checked base-image mirror, for a backend that has the flag (a
    setting for another backend is neither read nor refused)."""
    if prefix is None or "base_image_mirror" not in {o.key for o in BACKENDS[chosen].cli_options()}:
        return dict(extra)
    return {**extra, "base_image_mirror": prefix}


def _setting(value: Value) -> str:
    """How a refusal names where the value was set."""
    if value.source == "environment":
        return value.origin[1:]
    if value.source == "flag":
        return value.origin
    return f"{value.origin}: {value.key}"


def settled_extra(
    chosen: str,
    command: Command,
    extra: Mapping[str, Any],
    project: Project | None,
    keys: Sequence[str],
) -> dict[str, Any]:
    """``extra`` plus the settings ``keys`` (:func:`~envforge.cli.common.effective_settings`)
    that ``chosen`` declares a flag for (a setting for another backend is neither read
    nor refused): the flag given, else the environment, the project, the user's file."""
    mine = {o.key for o in BACKENDS[chosen].cli_options() if command in o.commands}
    wanted = tuple(key for key in keys if key in mine)
    if not wanted:
        return dict(extra)
    settings = effective_settings({key: extra.get(key) for key in wanted}, project, wanted)
    found = {key: settings.get(key).value for key in wanted}
    return {**extra, **{key: value for key, value in found.items() if value is not None}}
