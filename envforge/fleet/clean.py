"""``fleet clean``: remove what a plan's runs left, keeping every report.

What goes, for a task that ended (its ``task.json`` is there) or of a run older than the
newest ``keep`` (a killed task writes no ``task.json``):

- its home in the run's folder (``runs/NNN/homes/TTT``: plans without node-local work);
- its node-local folder (``WORK/envforge-PLAN-RUN-TTT``, :mod:`envforge.fleet.task`) where
  this machine reaches it: the path ``task.json`` names, else the plan's ``--workdir``, else
  ``$TMPDIR`` and ``/tmp``. Only a folder of that exact name holding the marker file of
  this plan is removed;
- of a run older than the newest ``keep``: everything but ``reports/`` and ``run.json``
  (its logs).

Reports (``reports/``) and certificates in them are never removed.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from envforge.core.jsonlimits import load_file
from envforge.fleet import runs
from envforge.fleet.outcome import TASK_FILE
from envforge.fleet.plan import JOB_TMPDIR, Plan, Task
from envforge.fleet.task import MARKER, work_name

#: What a run folder keeps whatever its age.
KEPT = ("reports", runs.RUN_FILE)


@dataclass(frozen=True)
class Leftover:
    """A folder ``fleet clean`` removes, and why."""

    path: Path
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"path": str(self.path), "why": self.why}


def _task_record(run: Path, task: Task) -> Mapping[str, object] | None:
    path = run / task.folder / TASK_FILE
    try:
        data = load_file(path)  # the node wrote it: regular, bounded
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else {}


def _ours(path: Path, plan: Plan) -> bool:
    """A node-local folder this plan's task made (its marker names the plan)."""
    marker = path / MARKER
    try:
        if path.is_symlink() or not marker.is_file():
            return False
        return bool(load_file(marker).get("plan") == plan.id)
    except (OSError, ValueError, AttributeError):
        return False


def _bases(plan: Plan, environ: Mapping[str, str]) -> list[str]:
    if plan.workdir and plan.workdir != JOB_TMPDIR:
        return [plan.workdir]
    tmp = environ.get("TMPDIR", "")
    return [b for b in dict.fromkeys((tmp, "/tmp")) if b.startswith("/")]


def _node_local(
    plan: Plan, task: Task, run: Path, record: Mapping[str, object] | None, bases: list[str]
) -> Iterator[Path]:
    name = work_name(plan, task, run)
    named = (record or {}).get("workdir")
    found = [Path(named)] if isinstance(named, str) and named.startswith("/") else []
    for path in [*found, *(Path(b) / name for b in bases)]:
        if path.name == name and _ours(path, plan):
            yield path


def leftovers(plan: Plan, folder: Path, keep: int, environ: Mapping[str, str]) -> list[Leftover]:
    """What ``fleet clean`` removes in ``folder`` (a plan's), newest ``keep`` runs kept
    whole but for the homes of their ended tasks."""
    numbers = runs.numbers(folder)
    recent = set(numbers[-keep:]) if keep > 0 else set()
    places = [(n, runs.run_folder(folder, n)) for n in numbers] or [(0, folder)]
    bases = _bases(plan, environ) if plan.workdir else []
    found: list[Leftover] = []
    for number, run in places:
        stale = number not in recent and number != 0
        for task in plan.tasks:
            record = _task_record(run, task)
            if record is None and not stale:
                continue  # may still run
            why = "ended" if record is not None else f"run {number} is older than the newest {keep}"
            home = run / "homes" / f"{task.index:03d}"
            if home.is_dir() and not home.is_symlink():
                found.append(Leftover(home, f"task {task.index:03d}'s home ({why})"))
            found += [
                Leftover(p, f"task {task.index:03d}'s node-local folder ({why})")
                for p in _node_local(plan, task, run, record, bases)
            ]
        if stale:
            found += [
                Leftover(p, f"run {number} is older than the newest {keep}")
                for p in sorted(run.iterdir())
                if p.name not in KEPT and p.name != "homes"
            ]
    return list({item.path: item for item in found}.values())


def remove(found: list[Leftover]) -> list[Leftover]:
    """Remove each leftover; those that could not be removed."""
    failed: list[Leftover] = []
    for item in found:
        try:
            if item.path.is_dir() and not item.path.is_symlink():
                shutil.rmtree(item.path)
            else:
                item.path.unlink()
        except OSError:
            failed.append(item)
    for item in found:  # an emptied homes/ goes too
        parent = item.path.parent
        if parent.name == "homes" and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
    return failed
