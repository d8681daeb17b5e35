"""The interpreter a venv is made from: the recipe's Python version, never another."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envforge.core import proc
from envforge.errors import Unavailable

#: Seconds an interpreter gets to say its version.
INTERPRETER_TIMEOUT = 15.0


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter that was run and said what it is."""

    path: str
    #: ``sys.executable`` of the interpreter (a shim resolved to the real binary).
    executable: str
    version: str  # "3.11.7"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


_PROBE_CODE = "import sys; print('%d.%d.%d' % sys.version_info[:3]); print(sys.executable)"


def query_interpreter(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> Interpreter | None:
    """Run ``argv -c …``; the interpreter's version and executable, or None if it fails."""
    try:
        done = proc.run([*argv, "-c", _PROBE_CODE], timeout=INTERPRETER_TIMEOUT, env=environ)
    except OSError:
        return None
    lines = done.stdout.strip().splitlines()
    if not done.ok or len(lines) < 2 or not re.fullmatch(r"\d+\.\d+\.\d+", lines[0].strip()):
        return None
    return Interpreter(
        path=argv[0], executable=lines[1].strip() or argv[0], version=lines[0].strip()
    )


def _path_candidates(version: str, path_var: str) -> list[str]:
    """Executables on PATH, in PATH order, for the names that could be Python ``version``."""
    names = [f"python{version}", f"python{version.replace('.', '')}", "python3", "python"]
    found: list[str] = []
    for folder in path_var.split(os.pathsep):
        if not folder:
            continue
        for name in names:
            candidate = os.path.join(folder, name)
            if (
                os.path.isfile(candidate)
                and os.access(candidate, os.X_OK)
                and candidate not in found
            ):
                found.append(candidate)
    # Most specific names first, PATH order within a name.
    return sorted(found, key=lambda c: names.index(os.path.basename(c)))


def _off_path_hints(version: str, home: Path) -> list[str]:
    """Interpreters of ``version`` that exist but are not on PATH (pyenv, uv-managed)."""
    patterns = [
        (home / ".pyenv" / "versions", f"{version}.*", f"bin/python{version}"),
        (
            home / ".local" / "share" / "uv" / "python",
            f"cpython-{version}.*",
            f"bin/python{version}",
        ),
    ]
    hits: list[str] = []
    for base, pattern, rel in patterns:
        try:
            for folder in sorted(base.glob(pattern)):
                exe = folder / rel
                if exe.is_file():
                    hits.append(str(exe))
        except OSError:
            continue
    return hits


def search(version: str, env: Mapping[str, str], seen: set[str]) -> Interpreter | None:
    """An interpreter of Python ``version`` on PATH (or through the ``py`` launcher), or
    None; the versions of the interpreters it ran go into ``seen``."""
    for candidate in _path_candidates(version, env.get("PATH", "")):
        found = query_interpreter([candidate], env)
        if found is not None:
            seen.add(found.version)
            if found.minor == version:
                return found
    launcher = shutil.which("py", path=env.get("PATH"))
    if launcher:
        found = query_interpreter([launcher, f"-{version}"], env)
        if found is not None and found.minor == version:
            return Interpreter(
                path=found.executable, executable=found.executable, version=found.version
            )
    return None


def find_interpreter(
    version: str,
    *,
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Interpreter:
    """An interpreter that is Python ``version`` ("3.10"); :class:`Unavailable` if none.

    ``explicit`` (``--python PATH``) must be that version too: it is never swapped for
    another. PATH comes from ``environ``.
    """
    env = dict(os.environ if environ is None else environ)
    if explicit is not None:
        exe = shutil.which(explicit, path=env.get("PATH")) if os.sep not in explicit else explicit
        found = query_interpreter([exe], env) if exe else None
        if found is None:
            raise Unavailable(
                f"--python {explicit}: cannot run it as a Python interpreter",
                hint=f"pass the path of a Python {version} interpreter",
            )
        if found.minor != version:
            raise Unavailable(
                f"--python {explicit} is Python {found.version}; the recipe needs Python {version}",
                hint=f"pass a Python {version} interpreter (envforge never uses another version)",
            )
        return found
    seen: set[str] = set()
    found = search(version, env, seen)
    if found is not None:
        return found
    off_path = _off_path_hints(version, home if home is not None else Path.home())
    hint = (
        f"install Python {version} and put python{version} on PATH, or pass --python PATH: "
        f'`uv python install {version}` then --python "$(uv python find {version})"; '
        f"or apt install python{version} (deadsnakes PPA on Ubuntu); or `pyenv install {version}`"
    )
    if off_path:
        hint = f"found {off_path[0]} (not on PATH): pass --python {off_path[0]}; or " + hint
    versions = sorted(set(seen))
    others = f" (PATH has Python {', '.join(versions)})" if versions else ""
    raise Unavailable(f"no python{version} interpreter found{others}", hint=hint)
