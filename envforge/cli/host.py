"""``detect``, ``doctor`` and ``lock``: the host side of the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envforge.cli.common import (
    OutputPath,
    backend_option,
    ca_bundle_option,
    echo_json,
    json_option,
    load_for_host,
    load_project_option,
    project_option,
    recipe_ref_for,
    root_option,
    set_option,
    wheelhouse_option,
)
from envforge.errors import EnvforgeError, InvalidInput, Unavailable

if TYPE_CHECKING:
    from envforge.host.detect import HostInfo
    from envforge.host.doctor import DoctorReport, Finding
    from envforge.project.model import Project
    from envforge.recipe.model import Recipe
    from envforge.solve.choose import ArchChoice, Choice


def _choice_or_error(host: HostInfo) -> tuple[Choice | None, str | None]:
    """What ``auto`` means on ``host`` (the resolver every command uses), or why none."""
    from envforge.solve.choose import choose  # noqa: PLC0415 - the table only when needed

    try:
        return choose(host), None
    except EnvforgeError as exc:
        return None, exc.one_line()


@click.command("detect")
@root_option
@json_option
def detect_cmd(root: Path, as_json: bool) -> None:
    """Report this host's GPUs (vendor, product, arch, driver, device nodes) and `auto`.

    Override variables for build machines without the GPU: ENVFORGE_GPU_ARCH (gfx1031,
    sm_90), ENVFORGE_GPU_VENDOR (amd, nvidia, none), ENVFORGE_GPU_COUNT,
    ENVFORGE_GPU_PRODUCT, ENVFORGE_DRIVER_VERSION.
    """
    from envforge.host.detect import detect  # noqa: PLC0415 - keeps --help light
    from envforge.solve.choose import choose_each  # noqa: PLC0415 - the table only when needed

    host = detect(root=root)
    choice, problem = _choice_or_error(host)
    per_arch: tuple[ArchChoice, ...] = choose_each(host) if len(host.archs) > 1 else ()
    if as_json:
        data = host.to_dict()
        data["auto"] = choice.to_dict() if choice else None
        data["auto_error"] = problem
        data["per_arch"] = [a.to_dict() for a in per_arch]
        echo_json(data)
        return
    out = click.echo
    if not host.gpus:
        out("no GPU detected")
    else:
        out(f"{host.count} GPU(s):")
        for g in host.gpus:
            out(
                f"  {g.index}  {g.vendor:<6} {g.product:<28} {g.arch or '?':<8} "
                f"driver {g.driver_version or '?'}  {' '.join(g.device_nodes)}  [{g.source}]"
                + ("  integrated" if g.integrated else "")
            )
        if host.count > 1:
            out("  (select with --gpu INDEX[,INDEX]|all on build, certify, shell and probe)")
    out(
        f"kernel {host.kernel or '?'} ({host.machine}, {host.platform});"
        f" sources: {', '.join(host.sources) or 'none'}"
    )
    for note in host.notes:
        out(f"note: {note}")
    if choice is not None:
        out(f"auto -> {choice.recipe}: {choice.reason}")
    else:
        out(f"auto -> no recipe: {problem}")
    if per_arch:
        out("one recipe per arch:")
        for a in per_arch:
            which = "GPU" + ("s " if len(a.gpus) > 1 else " ") + ",".join(map(str, a.gpus))
            kind = ", integrated" if a.integrated else ""
            if a.choice is not None:
                out(f"  {a.arch} ({which}{kind}) -> {a.choice.recipe}: {a.choice.reason}")
            else:
                out(f"  {a.arch} ({which}{kind}) -> no recipe: {a.problem}")


def _print_report(report: DoctorReport, choice: Choice | None) -> None:
    out = click.echo
    title = report.recipe or "this host"
    if choice is not None:
        title += f" (auto: {choice.reason})"
    out(f"doctor: {title}")
    width = max((len(f.check) for f in report.findings), default=6)
    for f in report.findings:
        mark = {"ok": "ok   ", "warn": "warn ", "block": "BLOCK"}[f.severity]
        out(f"  {mark} {f.check:<{width}}  {f.message}")
        if f.fix and f.severity != "ok":
            out(f"  {'':5} {'':<{width}}  fix: {f.fix}")


def _project_findings(project: Project, recipe: Recipe) -> list[Finding]:
    """The project on ``recipe``'s stack: do its requirements fit, is its lock current,
    is its environment certified on each backend that serves projects (with fixes)."""
    from envforge.backends import BACKENDS, Options  # noqa: PLC0415 - loads the backends
    from envforge.host.doctor import Finding  # noqa: PLC0415 - keeps --help light
    from envforge.project.resolve import (  # noqa: PLC0415 - projects only
        current_lock,
        lock_command,
        project_stack,
    )

    try:
        stack = project_stack(project, recipe)
    except EnvforgeError as exc:
        return [Finding("project", "block", exc.message, exc.hint)]
    where = f"--project {project.root}"
    found = [
        Finding(
            "project",
            "ok",
            f"{len(project.requirements)} requirement(s) of"
            f" {project.name} fit the {recipe.name} stack's pins",
        )
    ]
    if current_lock(project, recipe, stack) is None:
        found.append(
            Finding(
                "project-lock",
                "warn",
                "no current lock: a build resolves again",
                lock_command(project, recipe),
            )
        )
    else:
        found.append(Finding("project-lock", "ok", "the project's lock is current"))
    for name, backend in BACKENDS.items():  # each backend says whether it serves it now
        serves, why = backend.serves(recipe, Options(project=project))
        if serves and not why:
            found.append(
                Finding("project-env", "ok", f"{name}: the project's environment is certified")
            )
        elif serves:
            found.append(
                Finding(
                    "project-env",
                    "warn",
                    f"{name}: {why}",
                    f"envforge build {recipe.name} {where} --backend {name}",
                )
            )
    return found


@click.command("doctor")
@click.argument("recipe_ref", metavar="[RECIPE|auto]", required=False)
@backend_option("Check for this backend only (an unreachable engine blocks only for docker).")
@root_option
@set_option
@project_option
@json_option
def doctor_cmd(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str | None,
    backend: str | None,
    root: Path,
    overrides: tuple[str, ...],
    project_dir: Path | None,
    extras: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check this host for a recipe (default: auto); print each finding with its fix.

    With --project DIR: also whether the project's requirements fit the stack, whether
    its lock is current and whether its environment is certified (RECIPE defaults to the
    project's). Exit 0 when nothing blocks, 4 otherwise.
    """
    from envforge.doctor import diagnose  # noqa: PLC0415 - as above
    from envforge.host.detect import detect  # noqa: PLC0415 - keeps --help light
    from envforge.host.doctor import Finding  # noqa: PLC0415 - as above

    project = load_project_option(project_dir, extras)
    recipe_ref = recipe_ref_for(recipe_ref, project) if project else (recipe_ref or "auto")
    host = detect(root=root)
    recipe: Recipe | None
    no_recipe: Finding | None = None
    try:
        recipe, choice = load_for_host(recipe_ref, host, overrides)
    except InvalidInput as exc:
        if recipe_ref != "auto":
            raise
        # No recipe for this GPU: still check the host, and say so as a blocking finding.
        recipe, choice = None, None
        no_recipe = Finding("recipe", "block", exc.message, exc.hint)
    report = diagnose(
        recipe, host, root=root, backend=backend, chosen_for=choice.arch if choice else None
    )
    if no_recipe is not None:
        report = replace(report, findings=(no_recipe, *report.findings))
    if project is not None and recipe is not None:
        report = replace(report, findings=(*report.findings, *_project_findings(project, recipe)))
    if as_json:
        data = report.to_dict()
        data["auto"] = choice.to_dict() if choice else None
        echo_json(data)
    else:
        _print_report(report, choice)
    if report.blocking:
        first = report.blocking[0]
        raise Unavailable(
            f"{len(report.blocking)} problem(s) block {report.recipe or 'auto'} on this host;"
            f" first: {first.message}",
            hint=first.fix,
        )


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
    from envforge.lock import LockResult, write_lock  # noqa: PLC0415 - uv plumbing only for lock

    project = load_project_option(project_dir, extras)
    recipe, _choice = load_for_host(recipe_ref_for(recipe_ref, project), None, overrides)
    result: LockResult
    if project is not None:
        from envforge.project.resolve import write_project_lock  # noqa: PLC0415 - with --project

        result = write_project_lock(
            project, recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output
        )
    else:
        result = write_lock(recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output)
    click.echo(f"wrote {result.path} ({result.count} packages, hashes required)")
