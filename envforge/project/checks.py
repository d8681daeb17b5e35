"""A project's part of certification: its own package imported, then its ``checks``.

Each becomes a probe step (:class:`~envforge.probe.spec.CheckFile`) that the isolated
worker runs under the step deadline like every other step:

* ``check:import NAME``: the project's top-level package (when the folder has one);
* a check ending in ``.py`` that names a file of the project: that file, run as a script;
* any other check is a command (``pytest -x -q tests/gpu``), split like a shell would,
  run in the project's folder with the environment's ``bin`` first on ``PATH``; it passes
  when it exits 0, and its last lines of output say why when it does not.
"""

from __future__ import annotations

import hashlib
import json
import shlex

from envforge.errors import ProjectError
from envforge.probe.spec import CHECK_PREFIX, CheckFile
from envforge.project.init import import_name
from envforge.project.model import Project

#: Lines of a failing command's output kept in the step's message.
TAIL_LINES = 8

_COMMAND = """\
# envforge: a project check (a command), run in the project's folder
import os
import subprocess
import sys

env = dict(os.environ)
env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
done = subprocess.run(
    {argv!r}, cwd={root!r}, env=env, stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
)
if done.returncode != 0:
    tail = done.stdout.decode("utf-8", "replace").strip().splitlines()[-{tail}:]
    raise RuntimeError(
        {text!r} + " exited %d" % done.returncode + "".join("\\n  " + line for line in tail)
    )
print({text!r} + ": exit 0")
"""

_IMPORT = """\
# envforge: the project's own package must import in the environment
import importlib

importlib.import_module({name!r})
"""


def project_checks(project: Project) -> tuple[CheckFile, ...]:
    """The import step (when the project has a package to import), then one step per
    check in the order ``[tool.envforge] checks`` gives them."""
    out: list[CheckFile] = []
    name = import_name(project.root, project.name) if project.installable else None
    if name is not None:
        out.append(
            CheckFile(
                step=f"{CHECK_PREFIX}import {name}", path="", source=_IMPORT.format(name=name)
            )
        )
    used = {c.step for c in out}
    for i, text in enumerate(project.checks):
        check = _check(project, text, i)
        step, n = check.step, 1
        while step in used:
            n += 1
            step = f"{check.step}#{n}"
        used.add(step)
        out.append(CheckFile(step=step, path=check.path, source=check.source))
    return tuple(out)


def _check(project: Project, text: str, index: int) -> CheckFile:
    source, key = str(project.settings_file or project.source), f"checks[{index}]"
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ProjectError(
            source, key, str(exc), hint="quote the command as a shell would"
        ) from None
    if not argv:
        raise ProjectError(
            source, key, "is empty", hint="a Python file or a command, e.g. pytest -q"
        )
    step = CHECK_PREFIX + text.strip()
    path = project.root / argv[0]
    if len(argv) == 1 and argv[0].endswith(".py"):
        if not path.is_file():
            raise ProjectError(
                source,
                key,
                f"{argv[0]} is not a file of the project",
                hint=f"create {path} or fix the check",
            )
        return CheckFile.read(path, step)
    code = _COMMAND.format(text=text.strip(), argv=argv, root=str(project.root), tail=TAIL_LINES)
    return CheckFile(step=step, path="", source=code)


def checks_digest(project: Project | None) -> str | None:
    """What a project's certificate binds of its checks: every step the project adds (its
    import, each check in order), each check file's content and each command's text. A
    change makes the certificate not hold: certification runs again (a venv is not
    reinstalled; an image gets a new label and is certified again). None without a
    project."""
    if project is None:
        return None
    steps = [[c.step, c.path, c.source] for c in project_checks(project)]
    blob = json.dumps(steps, separators=(",", ":")).encode("utf-8", "surrogateescape")
    return "sha256:" + hashlib.sha256(blob).hexdigest()
