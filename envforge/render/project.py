"""A project's layers on top of a recipe's image: every rendering decision made here.

A project image is the recipe's Dockerfile (torch and its companions, then NumPy and
the recipe's packages, each in its own layer, installed from the project's lock) with
two additions the templates print (``templates/docker/_project_stage.j2`` and
``_project_final.j2``):

* a ``project`` stage ``FROM build`` that installs the lock's lines the recipe does not
  need (the project's own requirements and what only they need), hashes required and no
  resolution, and collects the files they add;
* in the final stage, after the recipe's layers: the project's ``system_packages``
  (apt), then those files, then labels naming the project.

A change to the project's requirements changes only the project stage's lines: torch's
layer and the recipe's layer come from the build cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from envforge.render.context import (
    CONTEXT_WHEELHOUSE,
    STAGING_DIR,
    VENV_DIR,
    RenderOptions,
    added_files_lines,
    either_installer,
    installer_commands,
    printf_lines,
    rest_index_args,
    script_lines,
)
from envforge.render.labels import Label
from envforge.render.quoting import check_one_line, docker_quote, shell_quote
from envforge.stack import Stack

#: The project stage collects the files the project's packages add here (the final
#: stage's project layer).
PROJECT_DIR = "/opt/envforge-project"


@dataclass(frozen=True)
class ProjectLayer:
    """What the Docker backend decided to put on top of the recipe's image."""

    #: The project's name and its environment key (:meth:`Project.key`).
    name: str
    key: str
    #: Lock lines (``name==VERSION --hash=...``) of the packages only the project needs.
    lines: tuple[str, ...]
    #: The project lock's file name and :meth:`Project.requirements_digest`.
    lock_name: str
    requirements_digest: str
    #: Debian/Ubuntu package names, installed before the project's Python packages.
    system_packages: tuple[str, ...] = ()
    #: :func:`envforge.project.checks.checks_digest`: what the image was certified with.
    checks_digest: str | None = None


@dataclass(frozen=True)
class ProjectContext:
    """What the project partials print (all quoted here)."""

    name: str
    lock_name: str
    project_dir: str
    #: The project stage's install script (None: the project needs no package the
    #: recipe's layers lack, so there is no project stage).
    step: str | None
    #: Shell words for apt, or "".
    system_apt: str
    labels: tuple[Label, ...]


#: Labels of a project image; :func:`envforge.backends.docker.projects` reads them back.
PROJECT_LABEL = "io.envforge.project"
PROJECT_KEY_LABEL = "io.envforge.project-key"
PROJECT_DIGEST_LABEL = "io.envforge.project-requirements"
PROJECT_CHECKS_LABEL = "io.envforge.project-checks"


def project_context(layer: ProjectLayer, options: RenderOptions, stack: Stack) -> ProjectContext:
    """The project partials' context for ``layer`` built with ``options`` on ``stack``."""
    for what, value in (("project name", layer.name), ("project lock", layer.lock_name)):
        check_one_line(what, value, source="project")
    # the lock's lines are checked with the lock (envforge.lock.check_lock: one line each,
    # name==version and hashes); render_dockerfile checks the rendered lines' lengths
    labels = (
        (PROJECT_LABEL, layer.name),
        (PROJECT_KEY_LABEL, layer.key),
        (PROJECT_DIGEST_LABEL, layer.requirements_digest),
        *(((PROJECT_CHECKS_LABEL, layer.checks_digest),) if layer.checks_digest else ()),
    )
    return ProjectContext(
        name=layer.name,
        lock_name=layer.lock_name,
        project_dir=PROJECT_DIR,
        step=project_step(layer.lines, options, stack) if layer.lines else None,
        system_apt=" ".join(shell_quote(p) for p in layer.system_packages),
        labels=tuple(Label(key, docker_quote(value)) for key, value in labels),
    )


def project_step(lines: tuple[str, ...], options: RenderOptions, stack: Stack) -> str:
    """The project stage's script: install ``lines`` exactly (uv when the build stage has
    it, else pip), then copy the files they added to :data:`PROJECT_DIR`. Removing a file
    of the recipe's layers fails the build (the lock is one resolution, so it cannot
    unless the lock was edited by hand)."""
    staging = STAGING_DIR
    if options.wheelhouse:
        sources = f"--find-links {staging}/{CONTEXT_WHEELHOUSE}"
    else:
        sources = " ".join(rest_index_args(stack, options))
    lock_file = f"{staging}/project.lock.txt"
    uv_pip, pip = installer_commands(options)
    uv_cmd = f"{uv_pip} --require-hashes --no-deps {sources} -r {lock_file}".replace("  ", " ")
    pip_cmd = (f"{pip} --no-compile --require-hashes --no-deps {sources} -r {lock_file}").replace(
        "  ", " "
    )
    listings = (f"{staging}/project-before.txt", f"{staging}/project-after.txt")
    script = [
        "set -eu",
        f"mkdir -p {staging} {PROJECT_DIR}",
        printf_lines(lines, lock_file),
        f"find {VENV_DIR} ! -type d | LC_ALL=C sort > {listings[0]}",
        *either_installer(options, uv_cmd, pip_cmd),
        *added_files_lines(
            listings,
            PROJECT_DIR,
            strict_compile=False,
            remove=(lock_file,),
            removed="installing the project lock removed files of the recipe layers"
            " (regenerate the lock: envforge lock RECIPE --project DIR)",
        ),
    ]
    return script_lines(script)
