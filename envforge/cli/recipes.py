"""``list``, ``show``, ``validate`` and ``render``: the recipe side of the CLI."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.cli.common import echo_json, json_option, load_checked, set_option
from envforge.errors import EnvforgeError, InvalidInput
from envforge.recipe.catalogue import Catalogue

if TYPE_CHECKING:
    from envforge.recipe.model import Recipe
    from envforge.render import RenderOptions


@click.command("list")
@json_option
def list_cmd(as_json: bool) -> None:
    """List the recipes in the catalogue (shipped and ENVFORGE_RECIPE_PATH)."""
    catalogue = Catalogue.default()
    rows: list[dict[str, Any]] = []
    for name, path in catalogue.files().items():
        recipe = catalogue.load(str(path))
        rows.append(
            {
                "name": name,
                "vendor": recipe.gpu.vendor,
                "arch": recipe.gpu.arch,
                "stack": recipe.stack_tag,
                "description": recipe.description,
                "path": str(path),
            }
        )
    if as_json:
        echo_json(rows)
        return
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        arch = r["arch"] or "-"
        click.echo(f"{r['name']:<{width}}  {arch:<8} {r['stack']:<32} {r['description']}")


@click.command()
@click.argument("recipe_ref", metavar="RECIPE")
@set_option
@json_option
def show(recipe_ref: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Show a recipe's stack, why each pin and env var is there, and how sure we are."""
    from envforge.knowledge import explain  # noqa: PLC0415 - the table only when needed

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
    from envforge.knowledge import check  # noqa: PLC0415 - the table only when needed

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
    type=click.Path(path_type=Path),  # a file in the way: fsutil's one-line error, exit 2
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
@click.option(
    "--builder",
    type=click.Choice(["classic", "buildkit"]),
    default="classic",
    show_default=True,
    help="Dockerfile for the classic builder, or for BuildKit (cache and bind mounts).",
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
    builder: str,
    overrides: tuple[str, ...],
) -> None:
    """Render a recipe's Dockerfile (or venv plan); --all -o DIR renders the catalogue."""
    from envforge.fsutil import write_files  # noqa: PLC0415 - only when rendering
    from envforge.knowledge import check  # noqa: PLC0415 - the table only when needed
    from envforge.render import (  # noqa: PLC0415 - jinja2 only when rendering
        RenderOptions,
        plan_venv,
        render_dockerfile,
    )

    if render_all == (recipe_ref is not None):
        raise InvalidInput("give either RECIPE or --all", hint="envforge render gfx1010")
    if render_all and output is None:
        raise InvalidInput("--all needs -o DIR", hint="envforge render --all -o Dockerfiles")
    options = RenderOptions(
        base_image=base_image,
        wheelhouse=with_wheelhouse,
        ca_bundle=with_ca_bundle,
        builder="buildkit" if builder == "buildkit" else "classic",
    )
    if recipe_ref is not None:
        recipe = load_checked(recipe_ref, overrides)
        if output is None:
            if fmt == "dockerfile":
                _emit(render_dockerfile(recipe, _with_lock(recipe, options)))
            else:
                _emit(plan_venv(recipe, options).setup_script)
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
    if output is None:  # not reached: --all without -o is refused above
        raise InvalidInput("render needs -o DIR here", hint="envforge render --all -o Dockerfiles")
    # Render everything first: a recipe that cannot be rendered leaves nothing written.
    files: list[tuple[Path, str, bool]] = []
    for recipe in recipes:
        if fmt == "dockerfile":
            dockerfile = render_dockerfile(recipe, _with_lock(recipe, options))
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
    # Every file or none: a refused write leaves no temporary file and no partial tree.
    write_files(
        [(path, text, 0o755 if executable else 0o644) for path, text, executable in files],
        setting="-o",
    )
    what = "Dockerfile(s)" if fmt == "dockerfile" else "venv plan(s)"
    click.echo(f"wrote {len(recipes)} {what} under {output}", err=True)


def _emit(text: str) -> None:
    """Write ``text`` to stdout as exactly the bytes ``-o`` writes (UTF-8, unaltered).

    Not ``click.echo``: it strips ANSI escapes when stdout is not a terminal and encodes
    with the stream's encoding (``PYTHONIOENCODING``, the locale).
    """
    sys.stdout.flush()
    out = sys.stdout.buffer
    out.write(text.encode("utf-8"))
    out.flush()


def _with_lock(recipe: Recipe, options: RenderOptions) -> RenderOptions:
    """The Dockerfile installs the recipe's lock when one matches it, as builds do."""
    from envforge import lock  # noqa: PLC0415 - only when rendering

    path = lock.lock_path(recipe)
    return replace(options, lock=lock.split_lock(path)) if path is not None else options
