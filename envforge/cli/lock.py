"""``envforge lock``: a recipe's (or a project's) full requirement set, with hashes."""

from __future__ import annotations

from pathlib import Path

import click

from envforge.cli.common import (
    OutputPath,
    ca_bundle_option,
    effective_settings,
    load_for_host,
    load_project_option,
    project_option,
    recipe_ref_for,
    set_option,
    wheelhouse_option,
)
from envforge.lock import LockResult, write_lock
from envforge.project.resolve import write_project_lock


@click.command("lock")
@click.argument("recipe_ref", metavar="[RECIPE|auto]", required=False)
@wheelhouse_option("A folder of wheels to resolve from as well (uv --find-links).")
@ca_bundle_option("PEM file of CA certificates for the package indexes.")
@click.option(
    "-o",
    "--output",
    type=OutputPath(),  # a folder there: fsutil's one-line error, exit 2
    help="Write the lock here instead of next to the recipe (<recipe>.lock.txt; shipped "
    "recipes: $ENVFORGE_HOME/locks; --project: DIR/envforge-<recipe>.lock.txt).",
)
@project_option
@set_option
def lock_cmd(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    output: Path | None,
    project_dir: Path | None,
    extras: tuple[str, ...],
    overrides: tuple[str, ...],
) -> None:
    """Resolve a recipe's full requirement set, with hashes, into <recipe>.lock.txt."""
    project = load_project_option(project_dir, extras)
    recipe, _choice = load_for_host(recipe_ref_for(recipe_ref, project), None, overrides)
    settings = effective_settings(
        {"wheelhouse": wheelhouse, "ca_bundle": ca_bundle}, project, ("wheelhouse", "ca_bundle")
    )
    wheelhouse, ca_bundle = settings.path("wheelhouse"), settings.path("ca_bundle")
    result: LockResult
    if project is not None:
        result = write_project_lock(
            project, recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output
        )
    else:
        result = write_lock(recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output)
    click.echo(f"wrote {result.path} ({result.count} packages, hashes required)")
