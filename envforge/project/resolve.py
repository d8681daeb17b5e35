"""A project on a stack: its requirements resolved around the stack's pins, locked.

The stack's pins win (:func:`envforge.project.fit.check_fits` runs first); everything
else is resolved by uv with the stack's lines as requirements (torch, the companions and
the NumPy bound pinned), the project's ``-c`` lines as constraints, and written with hashes:
one lock per recipe, which the next build of the project installs exactly. ``envforge lock
--project`` writes it into the project (``<project>/envforge-<recipe>.lock.txt``, asked
for); a build that finds no current lock writes it there only when the project already
holds one, else under ``$ENVFORGE_HOME/projects/<project key>/`` (nothing unasked in the
project's folder). Both backends read the project's lock from these two places.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from envforge import lock
from envforge.core.paths import state_dir
from envforge.errors import ConstraintViolation
from envforge.knowledge import load_table
from envforge.knowledge.companions import CompanionTable, load_companions
from envforge.knowledge.extensions import extension_checks
from envforge.knowledge.table import CompatTable
from envforge.project.fit import check_fits, marker_environment
from envforge.project.model import Project
from envforge.recipe.model import Recipe
from envforge.stack import PackageCheck, Stack, stack_of


def lock_file(project: Project, recipe: Recipe) -> Path:
    """The project's own lock for ``recipe`` (``envforge lock --project``): in the project,
    one per recipe."""
    return project.root / f"envforge-{recipe.name}{lock.LOCK_SUFFIX}"


def home_lock_file(project: Project, recipe: Recipe) -> Path:
    """Where a build keeps the lock it resolved unasked: under ``$ENVFORGE_HOME``, keyed by
    the project (its name and folder), never in the project's folder."""
    return state_dir() / "projects" / project.key() / lock_file(project, recipe).name


def lock_target(project: Project, recipe: Recipe) -> Path:
    """Where a build writes the lock it had to resolve: the project's own file when the
    user put one there (``envforge lock --project``), else :func:`home_lock_file`."""
    asked = lock_file(project, recipe)
    return asked if asked.is_file() or asked.is_symlink() else home_lock_file(project, recipe)


def found_lock(project: Project, recipe: Recipe) -> Path | None:
    """The project's lock file for ``recipe`` that exists, current or not: the project's
    own first, then the one a build kept; None without either."""
    for path in (lock_file(project, recipe), home_lock_file(project, recipe)):
        if path.is_file():
            return path
    return None


def project_stack(project: Project, recipe: Recipe, stack: Stack | None = None) -> Stack:
    """The recipe's stack with the project's requirements on top, after checking that the
    stack's pins satisfy them (exit 2 naming both sides when they do not). The project's
    torch family (torchvision, torchaudio, triton, ...) is resolved by the stack as the
    recipe's own ``packages`` are: pinned to the pairing release and installed from the
    stack's index or the wheelhouse (:func:`envforge.stack.route_project`)."""
    base = stack_of(recipe) if stack is None else stack
    check_fits(project, base, label=recipe.name, python=recipe.python)
    return route_project(
        recipe,
        base,
        project.requirements,
        origin=str(project.source),
        environment=marker_environment(recipe.python),
    )


def lock_command(project: Project, recipe: Recipe) -> str:
    return f"envforge lock {recipe.name} --project {project.root}"


def write_project_lock(
    project: Project,
    recipe: Recipe,
    *,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    output: Path | None = None,
) -> lock.LockResult:
    """Resolve and write the project's lock for ``recipe``."""
    stack = project_stack(project, recipe)
    return lock.write_lock(
        recipe,
        wheelhouse=wheelhouse,
        ca_bundle=ca_bundle,
        output=output or lock_file(project, recipe),
        stack=stack,
        constraints=project.constraints,
        command=lock_command(project, recipe),
    )


def current_lock(project: Project, recipe: Recipe, stack: Stack) -> Path | None:
    """The project's lock for ``recipe`` when it matches what the project asks for now
    (``stack`` already holds the project's requirements), the project's own first, then
    the one a build kept; else None (stale or absent)."""
    digest = lock.inputs_digest(recipe, stack, project.constraints)
    for path in (lock_file(project, recipe), home_lock_file(project, recipe)):
        if path.is_file() and lock.lock_digest(path) == digest:
            lock.check_lock(path, recipe.name, lock.direct_references(stack))
            return path
    return None


def route_project(
    recipe: Recipe,
    stack: Stack,
    lines: Sequence[str],
    *,
    origin: str,
    environment: Mapping[str, str],
    companions: CompanionTable | None = None,
    table: CompatTable | None = None,
) -> Stack:
    """``stack`` with a project's requirement ``lines`` on top, its torch family resolved
    as a recipe's ``packages`` are: a companion (torchvision, torchaudio, triton, ...)
    named bare or by a range becomes the pairing release with the variant's local tag, a
    pin must be that release; each joins :attr:`Stack.companions`, so it is installed from
    the stack's index or the wheelhouse, never the default index. A compiled extension
    the table knows is checked against torch. A contradiction raises
    :class:`ConstraintViolation` (exit 2) naming ``origin`` and the version that pairs.
    Lines whose markers do not hold for ``environment`` stay as written."""
    check = PackageCheck(
        recipe,
        stack,
        load_companions() if companions is None else companions,
        load_table() if table is None else table,
        origin=origin,
    )
    pins = {pin.name: pin for pin in stack.companions}
    rest: list[str] = []
    for line in lines:
        pin = check.project_line(line, environment)
        if pin is None:
            rest.append(line)
        else:  # a companion the recipe pins already: check_fits compared the two
            pins.setdefault(pin.name, pin)
    refusals, _issues = extension_checks(
        replace(recipe, packages=tuple(rest), package_indexes=()), stack.torch_version
    )
    if refusals:
        first = refusals[0]
        message = "project requirement" + first.message[len(first.key) :]
        raise ConstraintViolation(
            origin, first.rule, message, evidence=first.evidence, hint=first.hint
        )
    return replace(stack, companions=tuple(pins.values()), project=tuple(rest))
