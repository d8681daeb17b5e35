"""``envforge list``: the catalogue's recipes, one line each, from the listing cache.

Kept apart from the other recipe commands so that listing imports only what it prints:
the catalogue's file names and each file's cached row (:mod:`envforge.recipe.listing`),
no recipe loader, no compatibility table, no ``packaging``.
"""

from __future__ import annotations

import click

from envforge.cli.common import echo_json, json_option
from envforge.core.paths import state_dir
from envforge.errors import printable
from envforge.recipe import listing
from envforge.recipe.catalogue import Catalogue


@click.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the recipes in the catalogue (shipped and ENVFORGE_RECIPE_PATH).

    A recipe file that cannot be loaded is listed as BROKEN (its error on stderr; with
    --json in its "error" field); the others are listed all the same, exit 0.
    """
    files = Catalogue.default().files()
    rows = [row.to_dict() for row in listing.rows(files, state_dir() / "cache")]
    if as_json:
        echo_json(rows)
        return
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        name = printable(r["name"])  # a file name may hold anything
        if r["error"] is not None:
            click.echo(
                f"{name:<{width}}  {'-':<8} {'BROKEN':<32} (see stderr; envforge "
                f"validate {printable(r['path'])})"
            )
            click.echo(f"envforge: {name}: {r['error']}", err=True)
            continue
        arch = r["arch"] or "-"
        click.echo(f"{name:<{width}}  {arch:<8} {r['stack']:<32} {r['description']}")
