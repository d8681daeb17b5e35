"""``list``, ``show``, ``validate`` and ``render``: the recipe side of the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envforge.cli.common import echo_json, json_option, load_checked, set_option
from envforge.errors import EnvforgeError, InvalidInput
from envforge.fsutil import write_atomically
from envforge.knowledge import check, explain
from envforge.recipe.catalogue import Catalogue
from envforge.render import RenderOptions, plan_venv, render_dockerfile


def register(group: click.Group) -> None:
    for command in (list_cmd, show, validate, render):
        group.add_command(command)


@click.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the recipes in the catalogue (shipped and ENVFORGE_RECIPE_PATH).

    A recipe file that cannot be loaded is listed as BROKEN (its error on stderr; with
    --json in its "error" field); the others are listed all the same, exit 0.
    """
    rows: list[dict[str, Any]] = []
    for item in Catalogue.default().scan():
        recipe = item.recipe
        rows.append(
            {
                "name": item.name,
                "vendor": recipe.gpu.vendor if recipe else None,
                "arch": recipe.gpu.arch if recipe else None,
                "stack": recipe.stack_tag if recipe else None,
                "description": recipe.description if recipe else None,
                "path": str(item.path),
                "error": item.error,
            }
        )
    if as_json:
        echo_json(rows)
        return
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        if r["error"] is not None:
            click.echo(f"{r['name']:<{width}}  {'-':<8} {'BROKEN':<32} (see stderr; envforge "
                       f"validate {r['path']})")
            click.echo(f"envforge: {r['name']}: {r['error']}", err=True)
            continue
        arch = r["arch"] or "-"
        click.echo(f"{r['name']:<{width}}  {arch:<8} {r['stack']:<32} {r['description']}")


@click.command()
@click.argument("recipe_ref", metavar="RECIPE")
@set_option
@json_option
def show(recipe_ref: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Show a recipe's stack, why each pin and env var is there, and how sure we are."""
    recipe = load_checked(recipe_ref, overrides)
    reasons = explain(recipe)
    if as_json:
        data = recipe.to_dict()
        data["hash"] = recipe.hash
        data["stack_tag"] = recipe.stack_tag
        data["reasons"] = [
            {"pin": r.pin, "why": r.why, "source": r.source} for r in reasons
        ]
        echo_json(data)
        return
    out = click.echo
    out(f"{recipe.name}: {recipe.description}")
    products = ", ".join(recipe.gpu.products) or "-"
    out(f"  gpu        {recipe.gpu.vendor} {recipe.gpu.arch or ''} ({products})")
    out(f"  stack      {recipe.stack_tag}")
    out(f"  base image {recipe.base_image}")
    out(f"  torch      {recipe.torch.version} from {recipe.torch.index or 'the default index'}")
    out(f"  numpy      {recipe.numpy}")
    if recipe.packages:
        out(f"  packages   {' '.join(recipe.packages)}")
    out(f"  recipe     {recipe.origin} ({recipe.hash[:19]})")
    if reasons:
        out("\nWhy these pins:")
        for r in reasons:
            out(f"  {r.pin}: {r.why} [{r.source}]")
    if recipe.env:
        out("\nEnvironment:")
        for e in recipe.env:
            out(f"  {e.name}={e.value}  ({e.confidence})")
            out(f"      why: {e.why}")
            for link in e.evidence:
                out(f"      evidence: {link}")
    if recipe.known_issues:
        out("\nKnown issues:")
        for k in recipe.known_issues:
            out(f"  - {k.symptom}")
            out(f"      workaround: {k.workaround}")
            for link in k.evidence:
                out(f"      evidence: {link}")
    checks = len(recipe.certify.extra_checks)
    out(
        f"\nCertify: level {recipe.certify.level}, {recipe.certify.step_timeout:g}s per step"
        + (f", {checks} extra check(s)" if checks else "")
    )


@click.command()
@click.argument("refs", nargs=-1, metavar="[RECIPE|PATH]...")
@set_option
@json_option
def validate(refs: tuple[str, ...], overrides: tuple[str, ...], as_json: bool) -> None:
    """Check recipes against the schema and the compatibility table (default: all)."""
    catalogue = Catalogue.default()
    targets = list(refs) or [str(p) for p in catalogue.files().values()]
    results: list[dict[str, Any]] = []
    first_error: EnvforgeError | None = None
    for ref in targets:
        try:
            recipe = catalogue.load(ref, overrides)
        except EnvforgeError as exc:
            results.append({"recipe": ref, "ok": False, "problems": [exc.one_line()]})
            first_error = first_error or exc
            continue
        violations = check(recipe)
        results.append(
            {
                "recipe": recipe.name,
                "ok": not violations,
                "problems": [v.one_line(recipe.origin) for v in violations],
            }
        )
        if violations and first_error is None:
            first_error = violations[0].error(recipe.origin)
    if as_json:
        echo_json(results)
    else:
        for r in results:
            if r["ok"]:
                click.echo(f"ok    {r['recipe']}")
            for problem in r["problems"]:
                click.echo(f"FAIL  {problem}", err=True)
    if first_error is not None:
        bad = sum(1 for r in results if not r["ok"])
        raise InvalidInput(
            f"{bad} of {len(results)} recipe(s) refused; first: {first_error.one_line()}"
        )


@click.command()
@click.argument("recipe_ref", metavar="RECIPE", required=False)
@click.option("--all", "render_all", is_flag=True, help="Render every recipe in the catalogue.")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write DIR/<recipe>/Dockerfile (--format venv: DIR/<recipe>/venv/) instead of printing.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dockerfile", "venv"]),
    default="dockerfile",
    show_default=True,
    help="Dockerfile, or the venv plan (setup.sh, requirements, activation script).",
)
@click.option("--base-image", metavar="IMAGE", help="Use IMAGE instead of the recipe's base image.")
@click.option(
    "--with-wheelhouse",
    is_flag=True,
    help="For a build context with wheelhouse/ (torch from there, not from torch.index).",
)
@click.option(
    "--with-ca-bundle",
    is_flag=True,
    help="For a build context with ca-bundle.pem (pip trusts it while building).",
)
@set_option
def render(
    *,
    recipe_ref: str | None,
    render_all: bool,
    output: Path | None,
    fmt: str,
    base_image: str | None,
    with_wheelhouse: bool,
    with_ca_bundle: bool,
    overrides: tuple[str, ...],
) -> None:
    """Render a recipe's Dockerfile (or venv plan); --all -o DIR renders the catalogue."""
    if render_all == (recipe_ref is not None):
        raise InvalidInput("give either RECIPE or --all", hint="envforge render gfx1010")
    if render_all and output is None:
        raise InvalidInput("--all needs -o DIR", hint="envforge render --all -o Dockerfiles")
    options = RenderOptions(
        base_image=base_image, wheelhouse=with_wheelhouse, ca_bundle=with_ca_bundle
    )
    if recipe_ref is not None:
        recipe = load_checked(recipe_ref, overrides)
        if output is None:
            if fmt == "dockerfile":
                click.echo(render_dockerfile(recipe, options), nl=False)
            else:
                click.echo(plan_venv(recipe, options).setup_script, nl=False)
            return
        recipes = [recipe]
    else:
        catalogue = Catalogue.default()
        recipes = []
        for path in catalogue.files().values():
            recipe = catalogue.load(str(path), overrides)
            violations = check(recipe)
            if violations:
                raise violations[0].error(recipe.origin)
            recipes.append(recipe)
    assert output is not None
    # Render everything first: a recipe that cannot be rendered leaves nothing written.
    files: list[tuple[Path, str, bool]] = []
    for recipe in recipes:
        if fmt == "dockerfile":
            dockerfile = render_dockerfile(recipe, options)
            files.append((output / recipe.name / "Dockerfile", dockerfile, False))
            continue
        plan = plan_venv(recipe, options)
        folder = output / recipe.name / "venv"
        files += [
            (folder / "setup.sh", plan.setup_script, True),
            (folder / "requirements.txt", plan.requirements_txt, False),
            (folder / "constraints.txt", plan.constraints_txt, False),
            (folder / "activate.sh", plan.activate_script, False),
        ]
    for path, text, executable in files:
        write_atomically(path, text, mode=0o755 if executable else 0o644)
    what = "Dockerfile(s)" if fmt == "dockerfile" else "venv plan(s)"
    click.echo(f"wrote {len(recipes)} {what} under {output}", err=True)
