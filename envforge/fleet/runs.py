"""Runs of a plan: each ``fleet submit`` starts one, in a folder of its own.

``DIR/runs/NNN/`` (numbered from 1) holds the run's ``run.json`` (the job ids the
scheduler accepted, written after each accepted job, before the next call), ``logs/``,
``reports/TTT/`` (each task's report and ``task.json``) and ``homes/TTT/`` (each task's
``ENVFORGE_HOME``: a new run builds and probes afresh, never "up to date" from the last).
``fleet status`` and ``fleet collect`` read the newest run unless told ``--run N``. A plan
folder without ``runs/`` (planned by an older envforge, or an engine whose submit prints
a command instead of running it) is its own and only run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envforge.core.fsutil import write_atomically
from envforge.core.jsonlimits import load_file
from envforge.errors import InvalidInput

RUNS = "runs"
RUN_FILE = "run.json"
#: The record of a plan folder submitted by an envforge from before runs.
LEGACY_FILE = "submitted.json"
#: The most runs one plan folder holds.
MAX_RUNS = 9999


def run_folder(folder: Path, number: int) -> Path:
    return folder / RUNS / f"{number:03d}"


def numbers(folder: Path) -> list[int]:
    """The plan folder's runs, oldest first."""
    root = folder / RUNS
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir())


def start(folder: Path) -> tuple[int, Path]:
    """A new run: its number and folder (created; never one that exists)."""
    (folder / RUNS).mkdir(parents=True, exist_ok=True)
    number = (numbers(folder) or [0])[-1] + 1
    while number <= MAX_RUNS:
        path = run_folder(folder, number)
        try:
            path.mkdir()
        except FileExistsError:  # a submit beside this one took it
            number += 1
            continue
        (path / "logs").mkdir()
        return number, path
    raise InvalidInput(
        f"{folder}: already {MAX_RUNS} runs", hint="plan again into a new folder (-o DIR)"
    )


def chosen(folder: Path, run: int | None) -> tuple[int, Path]:
    """The run ``fleet status``/``collect`` read: ``run``, else the newest; (0, the plan
    folder) when it has no runs."""
    found = numbers(folder)
    if run is None:
        return (found[-1], run_folder(folder, found[-1])) if found else (0, folder)
    if run not in found:
        have = f"runs {', '.join(map(str, found))}" if found else "no runs"
        raise InvalidInput(
            f"--run {run}: {folder} has {have}",
            hint="leave --run out for the newest, or envforge fleet submit DIR",
        )
    return run, run_folder(folder, run)


def record(path: Path, data: dict[str, Any]) -> None:
    """Write the run's record (``run.json``) atomically."""
    data = {**data, "updated": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
    write_atomically(path / RUN_FILE, json.dumps(data, indent=2) + "\n")


def jobs(path: Path) -> list[str]:
    """The job ids a run (or a legacy plan folder) records; [] before any was accepted."""
    for name in (RUN_FILE, LEGACY_FILE):
        file = path / name
        if not file.is_file():
            continue
        try:
            data = load_file(file)  # regular, bounded, depth-limited
            return [str(j) for j in data["jobs"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(
                f"{file}: unreadable ({exc})", hint="submit again (a new run)"
            ) from None
    return []
