"""``envforge init [DIR]``: envforge settings for a project (only when asked, never over
existing ones)."""

from __future__ import annotations

from pathlib import Path

import click

from envforge.cli.common import say
from envforge.project.init import init_project


@click.command("init")
@click.argument(
    "folder",
    required=False,
    default=".",
    metavar="[DIR]",
    type=click.Path(path_type=Path, file_okay=False),
)
def init_cmd(folder: Path) -> None:
    """Write [tool.envforge] (or envforge.toml) with recipe "auto" and a smoke check."""
    written = init_project(folder)
    say(f"wrote envforge settings to {written} (recipe: auto; one smoke check)")
