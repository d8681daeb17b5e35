"""Slurm: the plan as sbatch job arrays; submit with ``sbatch``, watch with ``squeue``.

One array per (arch, GPUs per task) group: an array has one ``--gres`` and one
``--constraint``. Array task ids are the plan's task indexes (``--array=0,2,5``), so task
``i`` is ``JOB_i`` in the queue and ``reports/00i`` on disk. No accounting database is
needed: a task no longer in the queue is finished when its ``task.json`` is there, else
lost. No Python client either: ``sbatch``/``squeue`` are the interface every site has.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from envforge.core import proc
from envforge.core.fsutil import write_atomically
from envforge.core.jsonlimits import load_file
from envforge.errors import InvalidInput, Unavailable
from envforge.fleet import values
from envforge.fleet.plan import CPU, Plan
from envforge.render.templates import render_template

#: Seconds sbatch/squeue may take before the scheduler counts as unreachable.
TIMEOUT = 60.0
#: Queue states that mean "not finished yet".
WAITING = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "STAGE_OUT",
    "SIGNALING",
)
#: The file in the plan's folder that records the submitted jobs' ids.
SUBMITTED = "submitted.json"


def _ranges(indexes: Sequence[int]) -> str:
    """``0-3,7,9-10``: Slurm's array syntax for sorted task ids."""
    parts: list[str] = []
    start = prev = indexes[0]
    for i in [*indexes[1:], -2]:
        if i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ",".join(parts)


def script_name(arch: str, gpus: int) -> str:
    """``certify-ARCH-gpuN.sbatch``: from a checked arch only (no ``/``, no ``..``)."""
    why = values.arch_problem(arch)
    if why:
        raise values.refuse("arch", arch, why, "plan again (envforge fleet plan)")
    return f"certify-{arch}-gpu{int(gpus)}.sbatch"


def check_folder(folder: Path) -> None:
    """Refuse a plan folder a batch script cannot name (a line break, ``%``)."""
    why = values.folder_problem(str(folder))
    if why:
        raise values.refuse(
            "-o",
            str(folder),
            why,
            "plan into a folder whose path has no control characters and no %",
        )


def render(plan: Plan, folder: Path) -> dict[str, str]:
    """File name -> text of each sbatch script (``folder``: the plan's absolute folder).
    Every value was checked (:mod:`.values`); each is quoted where it lands: sbatch's
    quoting in ``#SBATCH`` lines, the shell's in the command line."""
    check_folder(folder)
    arg = values.sbatch_arg
    files: dict[str, str] = {}
    for (arch, gpus), tasks in plan.groups().items():
        files[script_name(arch, gpus)] = render_template(
            "fleet/certify.sbatch.j2",
            plan_id=plan.id,
            arch=arch,
            tasks=tasks,
            array=_ranges([t.index for t in tasks]),
            gpus=int(gpus),
            constraint="" if arch == CPU else arg(plan.site.feature(arch)),
            partition=arg(plan.site.partition) if plan.site.partition else "",
            account=arg(plan.site.account) if plan.site.account else "",
            time=arg(plan.site.time),
            folder=str(folder),
            folder_quoted=shlex.quote(str(folder)),
            output=arg(str(folder / "logs" / "%A_%a.out")),
            command=shlex.join(plan.envforge),
        )
    return files


def _call(argv: Sequence[str], environ: Mapping[str, str] | None) -> proc.Completed:
    try:
        done = proc.run(argv, timeout=TIMEOUT, env=environ)
    except FileNotFoundError:
        raise Unavailable(
            f"{argv[0]}: not found: this machine is no Slurm submit host",
            hint="run it on a login node (where sbatch and squeue are)",
        ) from None
    if done.timed_out:
        raise Unavailable(
            f"{shlex.join(argv)}: no answer within {TIMEOUT:.0f} s",
            hint="check the controller (scontrol ping)",
        )
    return done


def submit(scripts: Sequence[Path], environ: Mapping[str, str] | None = None) -> list[str]:
    """``sbatch --parsable`` each script; the job ids. :class:`Unavailable` (exit 4) when
    the scheduler cannot be reached or refuses a script (its message, one line)."""
    jobs: list[str] = []
    for script in scripts:
        done = _call(["sbatch", "--parsable", str(script)], environ)
        if not done.ok:
            reason = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
            raise Unavailable(
                f"sbatch {script.name}: {reason}",
                hint="check the partition, account and the arch features (sinfo -o '%N %f %G')",
            )
        jobs.append(done.stdout.strip().split(";", 1)[0])
    return jobs


@dataclass(frozen=True)
class QueueEntry:
    task: int
    state: str
    reason: str


def queue(jobs: Sequence[str], environ: Mapping[str, str] | None = None) -> dict[int, QueueEntry]:
    """The plan's tasks still in the queue (task index -> state), from ``squeue``.
    A job the controller no longer knows is simply absent."""
    if not jobs:
        return {}
    done = _call(["squeue", "-h", "-r", "-j", ",".join(jobs), "-o", "%i|%T|%r"], environ)
    if not done.ok and "Invalid job id" not in done.stderr:
        reason = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        raise Unavailable(f"squeue: {reason}", hint="check the controller (scontrol ping)")
    found: dict[int, QueueEntry] = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or "_" not in parts[0]:
            continue
        task = parts[0].rsplit("_", 1)[1]
        if task.isdigit():
            found[int(task)] = QueueEntry(int(task), parts[1], parts[2])
    return found


# --------------------------------------------------------------------------- the engine


def check_backend(backend: str, *, images: bool) -> None:
    """Any backend: a task runs ``envforge build`` on its node."""


def files(plan: Plan, folder: Path) -> dict[str, str]:
    """The sbatch scripts (:func:`render`)."""
    return render(plan, folder)


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """``sbatch`` the plan's scripts; the job ids, recorded in ``submitted.json``."""
    scripts = [folder / name for name in render(plan, folder)]
    missing = [p for p in scripts if not p.is_file()]
    if missing:
        raise InvalidInput(f"{missing[0]}: no such file", hint="plan again (fleet plan -o DIR)")
    jobs = submit(scripts, environ)
    record = {
        "engine": plan.engine,
        "plan": plan.id,
        "jobs": jobs,
        "submitted": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
    }
    write_atomically(folder / SUBMITTED, json.dumps(record, indent=2) + "\n")
    return jobs


def submitted_jobs(folder: Path) -> list[str]:
    """The job ids ``submitted.json`` records ([] before the plan was submitted)."""
    path = folder / SUBMITTED
    if not path.is_file():
        return []
    try:
        data = load_file(path)  # regular, bounded, depth-limited (envforge.core.jsonlimits)
        return [str(j) for j in data["jobs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(
            f"{path}: unreadable ({exc})", hint="remove it and submit again"
        ) from None


def queued(plan: Plan, folder: Path) -> dict[int, str]:
    """The submitted tasks still in the queue (``squeue``): index -> state."""
    jobs = submitted_jobs(folder)
    return {i: e.state for i, e in queue(jobs).items()} if jobs else {}
