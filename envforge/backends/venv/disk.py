"""What the virtualenv backend's environments take on disk, and removing the unused ones.

Sizes are the blocks a file occupies (what ``du`` counts), each file once: a file that
hard links join to other envforge venvs (a project's rebuild shares the stack's files)
counts in every venv's ``size`` but in its ``own`` share only when no other venv has it,
and once in the total.

A venv is *in use* when it is the current build of a catalogue recipe (its recipe hash is
the recipe's hash now) for the recipe or for a project whose folder is there, or when a
running process has one of its files mapped or works inside it. What ``gc`` removes:

* ``superseded``: the recipe changed, and a venv of its current hash exists for the same
  recipe and project;
* ``project gone``: a project's venv whose project folder no longer exists;
* with ``--older-than DAYS`` also ``unused`` venvs (no catalogue recipe has their hash:
  built with ``--set`` or from a file, or the recipe was removed or changed with no new
  build) last built or certified more than DAYS ago.

A removal renames the venv aside (``.<name>.old-<owner>-…``) and then deletes it, so a
kill in between leaves a folder the next build or ``gc`` sweeps, never half a venv.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from envforge.backends.venv.layout import BUILD_MARKER, CERT_MARKER, MARKER_DIR, _read_json
from envforge.backends.venvfs import aside_prefix, sweep_leftovers
from envforge.core.diskuse import file_blocks

Verdict = Literal["in use", "running", "superseded", "project gone", "unused"]
#: The verdicts ``gc`` removes without ``--older-than``.
REMOVABLE: tuple[Verdict, ...] = ("superseded", "project gone")
DAY = 86400.0
#: ``<stack tag>-<12 hex of the recipe hash>[-<project name>-<8 hex of its folder>]``
_NAME = re.compile(r"^(?P<tag>.+?)-(?P<hash>[0-9a-f]{12})(?:-(?P<project>.+-[0-9a-f]{8}))?$")


@dataclass(frozen=True)
class VenvDisk:
    """One venv under ``venvs_dir()``: what it is, what it takes, whether it is used."""

    path: Path
    recipe: str
    project: str | None
    project_root: str | None
    recipe_hash: str | None
    certified: bool
    #: When it was last built or certified (seconds since the epoch).
    last_used: float
    size: int = 0
    own: int = 0
    verdict: Verdict = "in use"
    why: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "recipe": self.recipe,
            "project": self.project,
            "project_root": self.project_root,
            "certified": self.certified,
            "last_used": self.last_used,
            "bytes": self.size,
            "own_bytes": self.own,
            "verdict": self.verdict,
            "why": self.why,
        }


def _marker_time(venv: Path) -> float:
    times = []
    for name in (BUILD_MARKER, CERT_MARKER):
        try:
            times.append((venv / MARKER_DIR / name).stat().st_mtime)
        except OSError:
            continue
    if not times:
        try:
            times.append(venv.stat().st_mtime)
        except OSError:
            times.append(0.0)
    return max(times)


def read_venv(path: Path) -> VenvDisk | None:
    """The venv at ``path`` as its markers describe it; None for a folder that is no venv."""
    if not (path / "pyvenv.cfg").is_file() and not (path / MARKER_DIR).is_dir():
        return None
    built = _read_json(path / MARKER_DIR / BUILD_MARKER) or {}
    found = _NAME.match(path.name)
    project = found.group("project") if found else None
    root = built.get("project_root")
    return VenvDisk(
        path=path,
        recipe=str(built.get("recipe") or path.parent.name),
        project=project,
        project_root=str(root) if isinstance(root, str) and project else None,
        recipe_hash=str(built["recipe_hash"]) if built.get("recipe_hash") else None,
        certified=(path / MARKER_DIR / CERT_MARKER).is_file(),
        last_used=_marker_time(path),
    )


def list_venvs(root: Path) -> list[VenvDisk]:
    """Every venv in ``root/<recipe>/`` (folders aside, ``.<name>.tmp-…``, left out)."""
    out: list[VenvDisk] = []
    try:
        recipes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return out
    for folder in recipes:
        try:
            children = sorted(folder.iterdir())
        except OSError:
            continue
        for child in children:
            if child.name.startswith(".") or child.is_symlink() or not child.is_dir():
                continue
            venv = read_venv(child)
            if venv is not None:
                out.append(venv)
    return out


def measure(venvs: list[VenvDisk]) -> tuple[list[VenvDisk], int]:
    """The venvs with their ``size`` and ``own`` bytes, and the total with every file
    counted once."""
    files = [file_blocks(v.path) for v in venvs]
    holders: dict[tuple[int, int], int] = defaultdict(int)
    for found in files:
        for key in found:
            holders[key] += 1
    measured = [
        replace(
            v, size=sum(found.values()), own=sum(b for k, b in found.items() if holders[k] == 1)
        )
        for v, found in zip(venvs, files)
    ]
    every: dict[tuple[int, int], int] = {}
    for found in files:
        every.update(found)
    return measured, sum(every.values())


def running_under(roots: Iterable[Path], proc: Path = Path("/proc")) -> dict[Path, str]:
    """root → ``pid N (command)`` for the roots a running process works in or has a file
    of mapped (a training run's torch libraries, its interpreter's cwd)."""
    prefixes = {str(r).rstrip("/") + "/": r for r in roots}
    found: dict[Path, str] = {}
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        for where in _paths_of(proc / pid):
            root = next((r for pre, r in prefixes.items() if where.startswith(pre)), None)
            if root is not None and root not in found:
                found[root] = f"pid {pid} ({_comm(proc / pid)})"
    return found


def _paths_of(pid_dir: Path) -> list[str]:
    paths: list[str] = []
    with contextlib.suppress(OSError):
        paths.append(os.readlink(pid_dir / "cwd") + "/")
    try:
        with open(pid_dir / "maps", encoding="utf-8", errors="replace") as fh:
            paths.extend(line.split(None, 5)[5].strip() for line in fh if line.count(" ") >= 5)
    except (OSError, IndexError):
        pass
    return paths


def _comm(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"


def judge(
    venvs: list[VenvDisk],
    current: Mapping[str, str],
    running: Mapping[Path, str],
    now: float,
    older_than: float | None = None,
) -> list[VenvDisk]:
    """Each venv with its verdict; ``current``: recipe name → its hash in the catalogue now."""
    fresh = {
        (v.recipe, v.project)
        for v in venvs
        if v.recipe_hash and current.get(v.recipe) == v.recipe_hash
    }
    out = []
    for v in venvs:
        verdict, why = _verdict(
            v, current, running=running, fresh=fresh, now=now, older_than=older_than
        )
        out.append(replace(v, verdict=verdict, why=why))
    return out


def _verdict(
    v: VenvDisk,
    current: Mapping[str, str],
    *,
    running: Mapping[Path, str],
    fresh: set[tuple[str, str | None]],
    now: float,
    older_than: float | None,
) -> tuple[Verdict, str]:
    if v.path in running:
        return "running", f"in use by {running[v.path]}"
    if v.project_root is not None and not Path(v.project_root).is_dir():
        return "project gone", f"the project folder {v.project_root} is gone"
    now_hash = current.get(v.recipe)
    if now_hash is not None and now_hash == v.recipe_hash:
        return "in use", f"the current build of recipe {v.recipe}"
    if now_hash is not None and (v.recipe, v.project) in fresh:
        return "superseded", f"recipe {v.recipe} changed; its new build is there"
    why = (
        f"recipe {v.recipe} changed and has no new build here"
        if now_hash is not None
        else f"no catalogue recipe {v.recipe} (built from a file or with --set?)"
    )
    days = (now - v.last_used) / DAY
    if older_than is not None and days > older_than:
        return "unused", f"{why}; last built or certified {days:.0f} days ago"
    return "in use", f"{why}; kept (gc --older-than DAYS removes it)"


def removable(v: VenvDisk) -> bool:
    return v.verdict in (*REMOVABLE, "unused")


def remove(v: VenvDisk) -> None:
    """Rename the venv aside, then delete it (a kill in between leaves a swept leftover)."""
    aside = v.path.parent / f"{aside_prefix(v.path, 'old')}{int(time.time())}"
    os.rename(v.path, aside)
    shutil.rmtree(aside, ignore_errors=True)


def sweep(root: Path) -> list[Path]:
    """The leftovers of killed builds and removals under every recipe folder, removed."""
    removed: list[Path] = []
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return removed
    for folder in folders:
        removed.extend(sweep_leftovers(folder))
    return removed
