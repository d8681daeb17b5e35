"""``envforge init [DIR]``: write a project's envforge settings, only when asked, never over
existing ones.

pyproject.toml projects get a ``[tool.envforge]`` section appended (the rest of the file
is kept byte for byte); requirements.txt projects get an ``envforge.toml`` beside it. Both
say ``recipe = "auto"`` and hold one smoke check, :data:`COMPILE_CHECK`: every ``.py``
file of the project compiled in memory (a syntax error fails it; nothing imported, no
bytecode written). Certification imports the project's package itself, once
(``check:import``, :mod:`envforge.project.checks`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from envforge.core import fsutil
from envforge.core.yamlcheck import read_text
from envforge.errors import ProjectError
from envforge.project.model import ENVFORGE_FILE
from envforge.project.read import MAX_BYTES, PYPROJECT, REQUIREMENTS, load_project

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

_SKIP = {"tests", "test", "docs", "build", "dist", "examples", "scripts", "benchmarks"}


def import_name(root: Path, name: str) -> str | None:
    """The project's top-level import package: src layout first, then a flat package
    named like the project, then the only package or module at the top."""
    wanted = name.replace("-", "_").replace(".", "_")
    for base in (root / "src", root):
        if (base / wanted / "__init__.py").is_file() or (base / f"{wanted}.py").is_file():
            return wanted
    for base in (root / "src", root):
        found = sorted(
            init.parent.name
            for init in base.glob("*/__init__.py")
            if init.parent.name.isidentifier() and init.parent.name not in _SKIP
        )
        if len(found) == 1:
            return found[0]
    return None


#: The smoke check ``init`` writes: compile the project's ``.py`` files in memory (run in
#: the project's folder; folders starting with a dot and ``site-packages`` skipped), so
#: a syntax error in a script certification does not import fails it, and nothing is
#: written (``python -m compileall`` would leave ``__pycache__`` in the project).
COMPILE_CHECK = (
    "python -c \"import pathlib; [compile(p.read_bytes(), str(p), 'exec')"
    " for p in sorted(pathlib.Path('.').rglob('*.py'))"
    " if not any(s.startswith('.') or s == 'site-packages' for s in p.parts)]\""
)


def _section(check: str, header: str | None) -> str:
    lines = [] if header is None else [header]
    lines += ['recipe = "auto"', f"checks = [{json.dumps(check)}]"]
    return "\n".join(lines) + "\n"


def _check_appended(path: Path, before: str, after: str) -> None:
    """Refuse (nothing written) unless ``after`` parses as TOML and holds exactly what
    ``before`` held plus the new ``[tool.envforge]``: an inline ``tool = {...}`` table or a
    ``[tool.envforge]`` header written another way (``[ tool . envforge ]``) would make
    the appended section a second definition, and the file unreadable."""
    old = tomllib.loads(before)
    try:
        new = tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        new = None
    tool = new.get("tool") if new is not None else None
    if isinstance(tool, dict) and "envforge" in tool and "envforge" not in old.get("tool", {}):
        del tool["envforge"]
        if not tool and "tool" not in old:
            del new["tool"]  # type: ignore[union-attr]
        if new == old:
            return
    raise ProjectError(
        str(path),
        "tool",
        "cannot take a [tool.envforge] section appended at "
        "its end (an inline tool = {...} table, or the section is there written"
        " another way)",
        hint='add recipe = "auto" to [tool.envforge] by hand',
    )


def init_project(folder: Path) -> Path:
    """Write the settings for the project in ``folder``; return the file written.

    Raises :class:`ProjectError` when settings exist already (nothing is changed).
    """
    project = load_project(folder)
    check = COMPILE_CHECK
    if project.source.name == PYPROJECT:
        path = project.source
        text = read_text(path, error=ProjectError, max_bytes=MAX_BYTES)
        if project.settings_file is not None or "[tool.envforge]" in text:
            raise ProjectError(
                str(path),
                "tool.envforge",
                "exists already; init never overwrites",
                hint="edit the section by hand",
            )
        gap = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        result = text + gap + _section(check, "[tool.envforge]")
        _check_appended(path, text, result)
        fsutil.write_atomically(path, result, mode=path.stat().st_mode & 0o777)
        return path
    path = project.root / ENVFORGE_FILE
    if path.exists() or path.is_symlink():
        raise ProjectError(
            str(path), "", "exists already; init never overwrites", hint="edit it by hand"
        )
    header = f"# envforge settings for the {REQUIREMENTS} project in this folder"
    fsutil.write_atomically(path, _section(check, header))
    return path
