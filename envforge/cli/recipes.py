"""``list``, ``show``, ``validate`` and ``render``: the recipe side of the CLI."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.cli.choices import RegistryChoice, render_formats
from envforge.cli.common import (
    OutputPath,
    auto_choice,
    echo_json,
    host_platform,
    json_option,
    load_for_host,
    load_project_option,
    platform_option,
    project_option,
    recipe_ref_for,
    require_signed_option,
    say,
    set_option,
    signed_policy,
    solver,
    strict_mode,
    strict_option,
    trust_option,
)
from envforge.core.fsutil import write_files
from envforge.errors import EnvforgeError, InvalidInput, printable
from envforge.knowledge import check, enforce, explain, split, unknowns
from envforge.knowledge.extensions import extension_checks
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.stack import Stack, requirement_name, stack_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from envforge.evidence.by_node import NodeGroup
    from envforge.evidence.signed import SignedPolicy
    from envforge.project.model import Project
    from envforge.recipe.model import Recipe
    from envforge.solve.beside import Beside


@click.command()
@click.argument("recipe_ref", metavar="[RECIPE|auto]", required=False)
@project_option
@set_option
@strict_option
@require_signed_option
@trust_option("Public key file of signers to trust (repeatable; default: $ENVFORGE_TRUSTED_KEYS).")
@click.option(
    "--by-node",
    "by_node",
    is_flag=True,
    help="Also list the recipe's runs by site and node, the most failures first.",
)
@json_option
def show(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str | None,
    project_dir: Path | None,
    extras: tuple[str, ...],
    overrides: tuple[str, ...],
    require_signed: bool,
    trust: tuple[Path, ...],
    as_json: bool,
    by_node: bool = False,
) -> None:
    """Show a recipe's stack, why each pin and env var is there, and how sure we are.

    "certified on" counts this host's evidence store; with --require-signed (or
    ENVFORGE_REQUIRE_SIGNED=1) only runs signed by a trusted key count, and with trusted
    keys alone the unsigned passing runs are said. --by-node: the runs (all outcomes) per
    site and node, so a failing node shows."""
    policy = signed_policy(require_signed, trust)
    signed = policy if policy.required or policy.trusted else None
    project = load_project_option(project_dir, extras)
    recipe, _choice = load_for_host(recipe_ref_for(recipe_ref, project), None, overrides)
    stack = stack_of(recipe)
    project_view = _project_view(project, recipe, stack) if project is not None else None
    reasons = explain(recipe)
    unknown = unknowns(recipe)
    where, nodes = _certified_on(
        recipe.name,
        gpu=recipe.gpu.vendor != "none",
        arch=recipe.gpu.arch,
        policy=signed,
        by_node=by_node,
    )
    beside: Beside | None = None
    if recipe.gpu.arch and recipe.gpu.vendor in ("amd", "nvidia"):  # cpu: nothing to solve
        from envforge.solve.beside import for_recipe  # noqa: PLC0415 - show of a GPU recipe

        beside = for_recipe(recipe)  # what `solve` picks for the arch, when it differs: why
    if as_json:
        data = recipe.to_dict()
        data["hash"] = recipe.hash
        data["stack_tag"] = recipe.stack_tag
        data["confidence"] = "uncertain" if unknown else "known"
        data["unknown"] = [v.one_line(recipe.origin) for v in unknown]
        data["certified_on"] = where
        if nodes is not None:
            data["by_node"] = [g.to_dict() for g in nodes]
        data["reasons"] = [{"pin": r.pin, "why": r.why, "source": r.source} for r in reasons]
        data["stack"] = stack.to_dict()
        data["solve"] = beside.to_dict() if beside is not None else None
        if project_view is not None:
            data["project"] = project_view
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
    if stack.companions:
        out(f"  companions {' '.join(c.requirement for c in stack.companions)}")
    if stack.packages:
        out(f"  packages   {' '.join(stack.packages)}")
    for line, url in stack.indexed_lines():
        out(f"  index      {line} only from {url}")
    out(f"  recipe     {recipe.origin} ({recipe.hash[:19]})")
    for line in beside.show_lines() if beside is not None else ():
        out(line)
    if unknown:
        what = "; ".join(f"[{v.rule}] {v.message}" for v in unknown)
        out(f"  confidence uncertain: the compatibility table has no row for it ({what})")
    if reasons:
        out("\nWhy these pins:")
        for r in reasons:
            out(f"  {r.pin}: {r.why} [{r.source}]")
        for c in stack.companions:
            out(f"  {c.requirement}: {c.reason} [{c.source}]")
    _show_env_and_issues(recipe)
    checks = len(recipe.certify.extra_checks)
    out(
        f"\nCertify: level {recipe.certify.level}, {recipe.certify.step_timeout:g}s per step"
        + (f", {checks} extra check(s)" if checks else "")
    )
    out(f"Evidence: {where}")
    _show_nodes(nodes)
    if project_view is not None:
        _show_project(project_view)


def _show_env_and_issues(recipe: Recipe) -> None:
    """``show``'s Environment and Known issues sections, each with its evidence."""
    out = click.echo
    if recipe.env:
        out("\nEnvironment:")
        for e in recipe.env:
            out(f"  {e.name}={e.value}  ({e.confidence})")
            out(f"      why: {e.why}")
            for link in e.evidence:
                out(f"      evidence: {link}")
    torch = recipe.torch.version.split("+", 1)[0]
    issues = (*recipe.known_issues, *extension_checks(recipe, torch)[1])
    if issues:
        out("\nKnown issues:")
        for k in issues:
            out(f"  - {k.symptom}")
            out(f"      workaround: {k.workaround}")
            for link in k.evidence:
                out(f"      evidence: {link}")


def _project_view(project: Project, recipe: Recipe, stack: Stack) -> dict[str, object]:
    """What ``show --project`` says of a project on ``recipe``'s stack (refuses, exit 2,
    a requirement the stack's pins do not satisfy)."""
    from envforge.project.resolve import (  # noqa: PLC0415 - only with --project
        current_lock,
        found_lock,
        lock_file,
        project_stack,
    )

    stack = project_stack(project, recipe, stack)
    current = current_lock(project, recipe, stack)
    path = current or found_lock(project, recipe) or lock_file(project, recipe)
    state = (
        "current"
        if current
        else ("stale (run envforge lock again)" if path.is_file() else "none yet")
    )
    family = {"torch": stack.torch, **{pin.name: pin.requirement for pin in stack.companions}}
    routed = {
        line: family[name]
        for line in project.requirements
        if (name := requirement_name(line)) is not None and name in family
    }
    return {
        "name": project.name,
        "root": str(project.root),
        "source": str(project.source),
        "requirements": list(project.requirements),
        "constraints": list(project.constraints),
        "from_stack": routed,
        "stack_index": stack.index,
        "extras": list(project.extras),
        "groups": list(project.groups),
        "checks": list(project.checks),
        "lock": str(path),
        "lock_state": state,
    }


def _show_project(view: Mapping[str, Any]) -> None:
    out = click.echo
    out(f"\nProject {view['name']} ({view['source']}): fits the stack's pins")
    source = view["stack_index"] or "the default index"
    for line in view["requirements"]:
        pinned = view["from_stack"].get(line)
        via = f" -> {pinned} (the stack's, from {source} or the wheelhouse)" if pinned else ""
        out(f"  requires   {printable(line)}{printable(via)}")
    for line in view["constraints"]:
        out(f"  constraint {printable(line)}")
    for line in view["checks"]:
        out(f"  check      {printable(line)}")
    out(f"  lock       {view['lock']}: {view['lock_state']}")


#: Nodes ``show --by-node`` lists, the worst first (``--json`` has all).
NODE_LINES = 40


def _show_nodes(nodes: tuple[NodeGroup, ...] | None) -> None:
    """``show --by-node``'s lines (the names escaped: a report's text)."""
    if nodes is None:
        return
    if not nodes:
        click.echo("  by node: no runs in this host's evidence store")
        return
    click.echo("  by node (most failures first):")
    for group in nodes[:NODE_LINES]:
        click.echo(f"    {group.line()}")
    rest = nodes[NODE_LINES:]
    if rest:
        bad = sum(1 for g in rest if g.bad)
        click.echo(
            f"    ... and {len(rest)} more node(s), {bad} with runs that did not pass "
            "(--json lists every one)"
        )


def _certified_on(
    name: str,
    *,
    gpu: bool,
    arch: str | None,
    policy: SignedPolicy | None = None,
    by_node: bool = False,
) -> tuple[str, tuple[NodeGroup, ...] | None]:
    """Where the recipe passed, from this host's evidence store (certificates, probe
    reports, venv certifications, imports); see
    :func:`envforge.evidence.certified_on.certified_on`. With a signed-evidence
    ``policy`` (trusted keys or --require-signed): signatures counted and said. And with
    ``by_node``, the runs by site and node (:mod:`envforge.evidence.by_node`), else None."""
    from envforge.evidence import local_store  # noqa: PLC0415 - only for show

    nodes = local_store.store_by_node(name, policy) if by_node else None
    if policy is None:
        return local_store.store_certified_on(name, gpu=gpu, arch=arch), nodes
    return local_store.signed_certified_on(name, policy, gpu=gpu, arch=arch), nodes


@click.command()
@click.argument("refs", nargs=-1, metavar="[RECIPE|PATH|auto]...")
@set_option
@strict_option
@platform_option
@json_option
def validate(
    refs: tuple[str, ...], overrides: tuple[str, ...], platform: str | None, as_json: bool
) -> None:
    """Check recipes against the schema and the compatibility table (default: all).

    What the table has no row for is accepted as uncertain with a warning (--strict:
    refused). --platform (default: this host's) picks the wheels' platform row."""
    strict = strict_mode()
    catalogue = Catalogue.default()
    targets = list(refs) or [str(p) for p in catalogue.files().values()]
    results: list[dict[str, Any]] = []
    first_error: EnvforgeError | None = None
    for ref in targets:
        try:
            recipe = _load_unchecked(catalogue, ref, overrides)
        except EnvforgeError as exc:
            results.append({"recipe": ref, "ok": False, "problems": [exc.one_line()]})
            first_error = first_error or exc
            continue
        violations, warned = split(
            check(recipe, platform=platform or host_platform()), strict=strict
        )
        if not violations:
            try:
                stack_of(recipe)
            except EnvforgeError as exc:
                results.append({"recipe": recipe.name, "ok": False, "problems": [exc.one_line()]})
                first_error = first_error or exc
                continue
        results.append(
            {
                "recipe": recipe.name,
                "ok": not violations,
                "confidence": "uncertain" if warned else "known",
                "problems": [v.one_line(recipe.origin) for v in violations],
                "warnings": [v.warning(recipe.origin) for v in warned],
            }
        )
        if violations and first_error is None:
            first_error = violations[0].error(recipe.origin)
    for r in results:
        for warning in r.get("warnings", ()):
            click.echo(f"envforge: warning: {warning}", err=True)
    if as_json:
        echo_json(results)
    else:
        for r in results:
            if r["ok"]:
                uncertain = "  (uncertain)" if r.get("confidence") == "uncertain" else ""
                click.echo(f"ok    {r['recipe']}{uncertain}")
            for problem in r["problems"]:
                click.echo(f"FAIL  {problem}", err=True)
    if first_error is not None:
        bad = sum(1 for r in results if not r["ok"])
        raise InvalidInput(
            f"{bad} of {len(results)} recipe(s) refused; first: {first_error.one_line()}"
        )


@click.command()
@click.argument("recipe_ref", metavar="RECIPE|auto", required=False)
@click.option("--all", "render_all", is_flag=True, help="Render every recipe in the catalogue.")
@click.option(
    "-o",
    "--output",
    type=OutputPath(),  # a file in the way: fsutil's one-line error, exit 2
    help="Write DIR/<recipe>/Dockerfile (--format venv: DIR/<recipe>/venv/; --format "
    "devcontainer: DIR/<recipe>/.devcontainer/) instead of printing.",
)
@click.option(
    "--format",
    "fmt",
    type=RegistryChoice(render_formats),
    default="dockerfile",
    show_default=True,
    help="Dockerfile, the venv plan (setup.sh, requirements, activation script), a "
    "devcontainer.json that runs like `envforge shell`, or an Apptainer definition "
    "(envforge.def) from the certified image (--image REF@sha256:...).",
)
@click.option(
    "--image",
    metavar="REF@sha256:DIGEST",
    help="--format apptainer: the certified image, by digest (envforge publish prints it).",
)
@click.option(
    "--devcontainer-from",
    "devcontainer_from",
    type=click.Choice(["image", "dockerfile"]),
    default="image",
    show_default=True,
    help="--format devcontainer: use the certified image, or build the rendered Dockerfile "
    "(written next to devcontainer.json).",
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
@platform_option
@set_option
@strict_option
def render(
    *,
    recipe_ref: str | None,
    render_all: bool,
    output: Path | None,
    fmt: str,
    devcontainer_from: str,
    base_image: str | None,
    with_wheelhouse: bool,
    with_ca_bundle: bool,
    builder: str,
    image: str | None,
    platform: str | None,
    overrides: tuple[str, ...],
) -> None:
    """Render a recipe's Dockerfile (or venv plan); --all -o DIR renders the catalogue.

    --platform linux/amd64|linux/arm64: the table's row for that platform must accept the
    recipe (default: this host's), and every FROM of the base image names it (the engine
    builds for it); without it the Dockerfile leaves the engine's own."""
    # jinja2 only when rendering
    from envforge.render.formats import FORMATS, RenderOptions, Request  # noqa: PLC0415

    chosen = FORMATS[fmt]
    options = RenderOptions(
        base_image=base_image,
        wheelhouse=with_wheelhouse,
        ca_bundle=with_ca_bundle,
        builder="buildkit" if builder == "buildkit" else "classic",
        platform=platform,
    )
    request = Request(options, devcontainer_from=devcontainer_from, image=image)
    chosen.check(recipe_ref, render_all, request)
    if render_all == (recipe_ref is not None):
        raise InvalidInput("give either RECIPE or --all", hint="envforge render gfx1010")
    if render_all and output is None:
        raise InvalidInput("--all needs -o DIR", hint="envforge render --all -o Dockerfiles")
    if recipe_ref is not None:
        bound = platform if chosen.platform_bound() else None
        recipe, _choice = load_for_host(recipe_ref, None, overrides, platform=bound)
        if output is None:
            _emit(chosen.printed(recipe, request))
            return
        recipes = [recipe]
    else:
        catalogue = Catalogue.default()
        recipes = []
        for path in catalogue.files().values():
            recipe = catalogue.load(str(path), overrides)
            enforce(recipe, strict=strict_mode(), platform=platform or host_platform())
            recipes.append(recipe)
    if output is None:  # not reached: --all without -o is refused above
        raise InvalidInput("render needs -o DIR here", hint="envforge render --all -o Dockerfiles")
    # Render everything first: a recipe that cannot be rendered leaves nothing written.
    files = [
        (output / recipe.name / name, text, executable)
        for recipe in recipes
        for name, text, executable in chosen.files(recipe, request)
    ]
    # Every file or none: a refused write leaves no temporary file and no partial tree.
    write_files(
        [(path, text, 0o755 if executable else 0o644) for path, text, executable in files],
        setting="-o",
    )
    closing = chosen.closing(len(recipes), output, [path for path, _, _ in files])
    click.echo(closing, err=True)


def _emit(text: str) -> None:
    """Write ``text`` to stdout as exactly the bytes ``-o`` writes (UTF-8, unaltered).

    Not ``click.echo``: it strips ANSI escapes when stdout is not a terminal and encodes
    with the stream's encoding (``PYTHONIOENCODING``, the locale).
    """
    sys.stdout.flush()
    out = sys.stdout.buffer
    out.write(text.encode("utf-8"))
    out.flush()


def _load_unchecked(catalogue: Catalogue, ref: str, overrides: tuple[str, ...]) -> Recipe:
    """A recipe for validate (checked there): ``auto`` → the one auto chooses; a GPU or
    an arch by name (``"RX 7900 XTX"``) → the one auto chooses for it."""
    if ref in catalogue.files() or os.sep in ref or ref.endswith((".yaml", ".yml")):
        return catalogue.load(ref, overrides)
    if ref != "auto":  # a GPU or an arch by name: the recipe auto chooses for it
        named: Recipe = solver.load_named(ref, overrides, catalogue, say=say)
        return named
    chosen: Recipe = solver.load_choice(auto_choice(), overrides, catalogue)
    return chosen
