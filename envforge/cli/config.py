"""``envforge config``: the settings remembered (:mod:`envforge.core.settings`), each
with its effective value and where it came from; ``envforge config path``: the file."""

from __future__ import annotations

from pathlib import Path

import click

from envforge.cli.backend_options import settled_backend, settled_mirrors
from envforge.cli.common import echo_json, json_option, load_project_option
from envforge.core.settings import KEYS, Settings, Value, config_path, resolve


@click.group("config", invoke_without_command=True)
@click.option(
    "--project",
    "project_dir",
    metavar="DIR",
    type=click.Path(path_type=Path, file_okay=False),
    help="Include this project's [tool.envforge] settings (as build --project DIR does).",
)
@json_option
@click.pass_context
def config(ctx: click.Context, project_dir: Path | None, as_json: bool) -> None:
    """Show each setting's value and where it came from (flag, env, project, user file).

    Each setting comes from, first found: the command's flag, its environment variable
    (ENVFORGE_SIGNING_KEY, ENVFORGE_TRUSTED_KEYS, ENVFORGE_INDEX_MIRROR,
    ENVFORGE_BASE_IMAGE_MIRROR), the project's
    [tool.envforge] (with --project), the user's file (envforge config path), else none.
    A venv rebuild also reuses the wheelhouse, CA bundle and index mirror its last build
    used.
    """
    if ctx.invoked_subcommand is not None:
        return
    project = load_project_option(project_dir, ())
    settings = resolve(
        project=dict(project.settings) if project is not None else None,
        project_file=project.settings_file if project is not None else None,
    )
    _check(settings)
    if as_json:
        echo_json({"file": str(config_path()), "settings": [v.to_dict() for v in settings.values]})
        return
    width = max(len(key) for key in KEYS)
    for value in settings.values:
        click.echo(f"{value.key:<{width}}  {_shown(value)}  [{_where(value)}]")


@config.command("path")
def path_cmd() -> None:
    """Print the user's settings file's path (ENVFORGE_CONFIG, else the XDG config folder)."""
    click.echo(str(config_path()))


def _check(settings: Settings) -> None:
    """What only a use checks: the backend's name, the mirrors (exit 2, one line)."""
    settled_backend(settings)
    settled_mirrors(settings)


def _shown(value: Value) -> str:
    if value.value is None:
        return "-"
    if isinstance(value.value, bool):  # a switch, as TOML writes it
        return "true" if value.value else "false"
    if isinstance(value.value, tuple):
        return " ".join(str(p) for p in value.value)
    return str(value.value)


def _where(value: Value) -> str:
    if value.source in ("project", "user file"):
        return f"{value.source}: {value.origin}"
    if value.source == "environment":
        return f"environment: {value.origin}"
    return value.source
