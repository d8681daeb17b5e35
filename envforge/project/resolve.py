"""A project on a stack: its requirements resolved around the stack's pins, locked.

The stack's pins win (:func:`envforge.project.fit.check_fits` runs first); everything
else is resolved by uv with the stack's lines as requirements (torch, the companions and
the NumPy bound pinned), the project's ``-c`` lines as constraints, and written with hashes
to ``<project>/envforge-<recipe>.lock.txt``: one lock per recipe, which the next build of
the project installs exactly.
"""

from __future__ import annotations

from pathlib import Path

from envforge import lock
from envforge.project.fit import check_fits
from envforge.project.model import Project
from envforge.recipe.model import Recipe
from envforge.stack import Stack, stack_of


def lock_file(project: Project, recipe: Recipe) -> Path:
    """Where the project's lock for ``recipe`` lives: in the project, one per recipe."""
    return project.root / f"envforge-{recipe.name}{lock.LOCK_SUFFIX}"


def project_stack(project: Project, recipe: Recipe, stack: Stack | None = None) -> Stack:
    """The recipe's stack with the project's requirements on top, after checking that the
    stack's pins satisfy them (exit 2 naming both sides when they do not)."""
    base = stack_of(recipe) if stack is None else stack
    check_fits(project, base, label=recipe.name, python=recipe.python)
    return base.with_project(project.requirements)


def lock_command(project: Project, recipe: Recipe) -> str:
    return f"envforge lock {recipe.name} --project {project.root}"


def write_project_lock(
    project: Project, recipe: Recipe, *, wheelhouse: Path | None = None,
    ca_bundle: Path | None = None, output: Path | None = None,
) -> lock.LockResult:
    """Resolve and write the project's lock for ``recipe``."""
    stack = project_stack(project, recipe)
    return lock.write_lock(
        recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
        output=output or lock_file(project, recipe), stack=stack,
        constraints=project.constraints, command=lock_command(project, recipe),
    )


def current_lock(project: Project, recipe: Recipe, stack: Stack) -> Path | None:
    """The project's lock for ``recipe`` when it matches what the project asks for now
    (``stack`` already holds the project's requirements); else None (stale or absent)."""
    path = lock_file(project, recipe)
    if not path.is_file():
        return None
    if lock.lock_digest(path) != lock.inputs_digest(recipe, stack, project.constraints):
        return None
    lock.check_lock(path, recipe.name, lock.direct_references(stack))
    return path
