"""``envforge doctor``: this host checked for a recipe (and a project), each finding with
its fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from envforge.backends import BACKENDS, Options
from envforge.cli.backend_options import backend_option
from envforge.cli.common import (
    echo_json,
    json_option,
    load_for_host,
    load_project_option,
    project_option,
    recipe_ref_for,
    root_option,
    set_option,
)
from envforge.doctor import diagnose
from envforge.errors import EnvforgeError, InvalidInput, Unavailable
from envforge.host.detect import detect
from envforge.host.doctor import DoctorReport, Finding
from envforge.project.model import Project
from envforge.project.resolve import current_lock, lock_command, project_stack
from envforge.recipe.model import Recipe
from envforge.solve.choose import Choice


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
