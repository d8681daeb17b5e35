"""A project's image on the Docker backend: the decisions (no engine, no SDK here).

``envforge build RECIPE --project DIR --backend docker`` builds the recipe's Dockerfile
from the project's lock (:func:`envforge.project.resolve.lock_file`, written first when
it is absent or stale), split three ways (:func:`split_project_lock`): torch and what it
needs, then NumPy and the recipe's packages, each in the layer the recipe's image has
them in, then the project's own requirements in a stage of their own
(:mod:`envforge.render.project`). The image is tagged :func:`project_ref`: the
project's name and a digest of its folder, never the recipe's tag or another project's.

Certification and ``shell`` mount the project folder: certification read-only at its own
path (its checks run there, as on the venv backend), ``shell`` read-write at the working
folder; :func:`import_path` makes the project importable in both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from envforge import lock
from envforge.container.caches import SHELL_WORKDIR
from envforge.container.refs import ImageInfo, certified_ref
from envforge.errors import CertificationFailed, InvalidInput
from envforge.lock import LockedInstall
from envforge.probe.spec import CheckFile
from envforge.project.checks import checks_digest, project_checks
from envforge.project.init import import_name
from envforge.project.model import Project
from envforge.project.resolve import (
    current_lock,
    lock_file,
    lock_target,
    project_stack,
    write_project_lock,
)
from envforge.recipe.model import Recipe
from envforge.render.project import (
    PROJECT_CHECKS_LABEL,
    PROJECT_DIGEST_LABEL,
    PROJECT_KEY_LABEL,
    ProjectLayer,
)
from envforge.stack import Stack, requirement_name

Say = Callable[[str], None]

_NOT_REPO = re.compile(r"[^a-z0-9]+")

#: Where Python writes bytecode during certification: the project folder is mounted
#: read-only, so ``python -m compileall .`` (the smoke check ``envforge init`` writes for
#: a project without a package) and pytest write theirs under /tmp instead.
PYCACHE_PREFIX = "/tmp/envforge-pycache"


@dataclass(frozen=True)
class ProjectProbe:
    """What certification adds for a project: its steps, its folder mounted read-only at
    its own path (command checks run there; nothing a check does changes the user's
    folder), and the variables that make it importable and keep bytecode in /tmp."""

    checks: tuple[CheckFile, ...]
    #: (host folder, container folder) pairs, mounted read-only.
    mounts: tuple[tuple[str, str], ...]
    env: Mapping[str, str]
    #: (module, reason): the project's ``skip_imports``, not imported, in the certificate.
    skip_imports: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ProjectBuild:
    """What the build of a project image needs: the lock split for the layers, the
    project's layer, the stack (with the project's requirements) certification checks."""

    lock_path: Path
    locked: LockedInstall
    layer: ProjectLayer
    stack: Stack
    probe: ProjectProbe


def project_ref(recipe: Recipe, project: Project) -> str:
    """``envforge/<project>-<8 hex of its folder>:<recipe>-<stack tag>``: the project's
    certified image, one per project folder and recipe."""
    slug = _NOT_REPO.sub("-", project.name.lower()).strip("-") or "project"
    digest = project.key().rsplit("-", 1)[1]
    return certified_ref(f"{slug}-{digest}", f"{recipe.name}-{recipe.stack_tag}")


def build_command(recipe: Recipe, project: Project) -> str:
    return f"envforge build {recipe.name} --project {project.root} --backend docker"


def prepare(
    recipe: Recipe,
    project: Project,
    *,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    platform: str | None,
    say: Say,
) -> ProjectBuild:
    """Check the project against the stack's pins (exit 2 naming both sides), make sure
    its lock for ``recipe`` is current (resolving and writing it when not), split it."""
    if not lock.serves_platform(platform):
        raise InvalidInput(
            f"--platform {platform}: a project lock is resolved for {lock.LOCK_PLATFORM}",
            hint=f"build the project for {lock.LOCK_PLATFORM} (drop --platform)",
        )
    probe = probe_for(project)  # a check that cannot run stops the build before it starts
    stack = project_stack(project, recipe)
    path = current_lock(project, recipe, stack)
    if path is None:
        say(f"no current lock for {project.name} on {recipe.name}: resolving it")
        target = lock_target(project, recipe)
        path = write_project_lock(
            project, recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=target
        ).path
        where = (
            ""
            if target == lock_file(project, recipe)
            else (
                f" (kept outside the project; `envforge lock {recipe.name} --project"
                f" {project.root}` writes it into the project)"
            )
        )
        say(f"wrote {path}{where}")
    # torch's layer takes the whole family, the project's torchvision too: from the
    # stack's index or the wheelhouse, as the recipe's own companions
    locked, lines = split_project_lock(path, replace(stack, project=()))
    layer = ProjectLayer(
        name=project.name,
        key=project.key(),
        lines=lines,
        lock_name=path.name,
        requirements_digest=project.requirements_digest(),
        system_packages=project.system_packages,
        checks_digest=checks_digest(project),
    )
    return ProjectBuild(path, locked, layer, stack, probe)


def split_project_lock(path: Path, recipe_stack: Stack) -> tuple[LockedInstall, tuple[str, ...]]:
    """The project lock split for three layers: torch and what it needs; NumPy, the
    recipe's packages and what only they need; the rest (the project's own), each line
    in the lock's order."""
    first = lock.split_lock(path, recipe_stack.family())
    roots = [n for n in (requirement_name(x) for x in recipe_stack.install_lines()) if n]
    recipe_part = lock.split_lock(path, (*recipe_stack.family(), *roots))
    torch_lines = set(first.torch)
    recipe_lines = tuple(line for line in recipe_part.torch if line not in torch_lines)
    return (LockedInstall(torch=first.torch, rest=recipe_lines, name=path.name), recipe_part.rest)


def import_path(project: Project, mount: str) -> str:
    """The folder to put on ``PYTHONPATH`` when the project is mounted at ``mount``: its
    ``src`` folder for a src layout, else the project folder itself."""
    name = import_name(project.root, project.name)
    base = PurePosixPath(mount)
    if name is not None and (project.root / "src" / name).exists():
        return str(base / "src")
    if name is not None and (project.root / "src" / f"{name}.py").is_file():
        return str(base / "src")
    return str(base)


def probe_for(project: Project) -> ProjectProbe:
    """Certification's part for ``project`` (see :class:`ProjectProbe`)."""
    root = str(project.root)
    # at its own path (command checks run there) and, as in a shell, at the working
    # folder, which PYTHONPATH names (a ':' in the folder's path would split PYTHONPATH)
    mounts = ((root, root),) if root == SHELL_WORKDIR else ((root, root), (root, SHELL_WORKDIR))
    return ProjectProbe(
        checks=project_checks(project),
        mounts=mounts,
        env={
            "PYTHONPATH": import_path(project, SHELL_WORKDIR),
            "PYTHONPYCACHEPREFIX": PYCACHE_PREFIX,
        },
        skip_imports=project.skip_imports,
    )


def image_problem(info: ImageInfo, ref: str, project: Project, recipe: Recipe) -> str | None:
    """Why the image ``info`` (named ``ref``) is not ``project``'s image now: another
    project's, or built before the project's requirements changed (None: it is)."""
    labels = info.labels
    if labels.get(PROJECT_KEY_LABEL) != project.key():
        return f"{ref} is not an image of the project {project.root}"
    if labels.get(PROJECT_DIGEST_LABEL) != project.requirements_digest():
        return (
            f"the requirements of {project.name} changed since {ref} was built"
            f" (run `{build_command(recipe, project)}`)"
        )
    if labels.get(PROJECT_CHECKS_LABEL) != checks_digest(project):
        return (
            f"the checks of {project.name} changed since {ref} was certified"
            f" (run `{build_command(recipe, project)}`)"
        )
    return None


def shell_for(
    info: ImageInfo, ref: str, project: Project, recipe: Recipe, *, asked: bool, say: Say
) -> tuple[dict[str, str], Path]:
    """The variables and the folder to mount for a shell in the project's image (the
    project importable from the working folder): an image of another project, or of the
    project's requirements before they changed, is refused (exit 1) unless ``asked``
    for by ``--image`` (then a warning)."""
    problem = image_problem(info, ref, project, recipe)
    if problem is not None and not asked:
        raise CertificationFailed(problem, hint=build_command(recipe, project))
    if problem is not None:
        say(f"warning: {problem}; running it as asked")
    return {**recipe.env_map, "PYTHONPATH": import_path(project, SHELL_WORKDIR)}, project.root
