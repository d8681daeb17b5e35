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
from envforge.errors import InvalidInput
from envforge.lock import LockResult, write_lock
from envforge.lock_variants import with_served_variant
from envforge.project.resolve import write_project_lock
from envforge.stack import Stack, stack_of


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
@click.option(
    "--variants",
    is_flag=True,
    help="Read the wheel variants (PEP 825) the torch index serves for this torch and "
    "record the label chosen for the recipe's GPU arch in the lock.",
)
@project_option
@set_option
def lock_cmd(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    output: Path | None,
    variants: bool,
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
    if variants and project is not None:
        raise InvalidInput(
            "--variants reads the variants of a recipe's torch index: not for a --project lock",
            hint="leave out --variants, or lock the recipe itself",
        )
    if project is not None:
        result = write_project_lock(
            project, recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output
        )
    else:
        stack = stack_of(recipe)
        if variants:
            stack = with_served_variant(recipe, stack)
            click.echo(_variant_line(stack))
        result = write_lock(
            recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output, stack=stack
        )
    click.echo(f"wrote {result.path} ({result.count} packages, hashes required)")


def _variant_line(stack: Stack) -> str:
    if stack.variant is None:
        return f"{stack.index} serves no wheel variants of torch {stack.torch_version}"
    v = stack.variant
    return f"wheel variant: torch {v.version} label {v.label} ({'; '.join(v.properties)})"
