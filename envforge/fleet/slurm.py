"""Slurm: the plan as sbatch job arrays; submit with ``sbatch``, watch with ``sacct``,
``scontrol`` or ``squeue`` (:mod:`.slurm_state`).

One array per (arch, GPUs per task) group: an array has one ``--gres`` and one
``--constraint``. Array task ids are the plan's task indexes (``--array=0,2,5``), so task
``i`` is ``JOB_i`` in the queue and ``runs/NNN/reports/00i`` on disk. Each submit is a new
run (:mod:`.runs`): sbatch gets the run's log folder (``--output``) and its number (the
script's argument, passed on as ``fleet task --run``). No accounting database is needed:
without one, a task the controller forgot is finished when its ``task.json`` is there,
else lost. No Python client either: the commands are the interface every site has.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from envforge.core import proc
from envforge.errors import InvalidInput, Unavailable
from envforge.fleet import runs, slurm_state, values
from envforge.fleet.plan import CPU, Plan, Task
from envforge.render.templates import render_template

#: Seconds sbatch/squeue may take before the scheduler counts as unreachable.
TIMEOUT = 60.0


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


def script_name(arch: str, gpus: int, node: str = "") -> str:
    """``certify-ARCH-gpuN.sbatch`` (``certify-ARCH-gpuN-NODE.sbatch`` for tasks pinned to
    a node): from a checked arch and node name only (no ``/``)."""
    why = values.arch_problem(arch)
    if why:
        raise values.refuse("arch", arch, why, "plan again (envforge fleet plan)")
    why = values.node_problem(node) if node else None
    if why:
        raise values.refuse("node", node, why, "plan again (envforge fleet plan)")
    return f"certify-{arch}-gpu{int(gpus)}{'-' + node if node else ''}.sbatch"


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


def _option_line(option: str) -> str:
    """``--name=value`` as an ``#SBATCH`` argument: the value quoted as sbatch reads it."""
    name, sep, value = option.partition("=")
    return f"{name}={values.sbatch_arg(value)}" if sep else name


def render(plan: Plan, folder: Path) -> dict[str, str]:
    """File name -> text of each sbatch script (``folder``: the plan's absolute folder).
    Every value was checked (:mod:`.values`); each is quoted where it lands: sbatch's
    quoting in ``#SBATCH`` lines, the shell's in the command line."""
    check_folder(folder)
    arg = values.sbatch_arg
    files: dict[str, str] = {}
    for (arch, gpus, node), tasks in plan.groups().items():
        files[script_name(arch, gpus, node)] = render_template(
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
            qos=arg(plan.site.qos) if plan.site.qos else "",
            reservation=arg(plan.site.reservation) if plan.site.reservation else "",
            mem=arg(values.slurm_mem(plan.site.mem)) if plan.site.mem else "",
            cpus=int(plan.site.cpus_per_task),
            extra=[_option_line(o) for o in plan.site.sbatch_args],
            nodelist=node,
            exclusive=plan.exclusive,
            preamble=plan.site.preamble.rstrip("\n"),
            folder=str(folder),
            folder_quoted=shlex.quote(str(folder)),
            output=arg(str(folder / "logs" / "%A_%a.out")),
            command=shlex.join(plan.envforge),
            checks=_checks(plan, tasks),
        )
    return files


def _checks(plan: Plan, tasks: Sequence[Task]) -> str:
    """The probe flags the group's tasks pass on (``fleet task`` reads them from
    plan.json), for the script's comment: one set per recipe kind, ``|`` between."""
    found = [plan.task_checks(t) for t in tasks]
    return " | ".join(dict.fromkeys(" ".join(c.argv()) for c in found if c is not None))


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


def _refused(script: Path, done: proc.Completed, accepted: Sequence[str]) -> Unavailable:
    reason = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
    kept = f" (this run keeps job {', '.join(accepted)}, already accepted)" if accepted else ""
    return Unavailable(
        f"sbatch {script.name}: {reason}{kept}",
        hint="check the partition, account and the arch features (sinfo -o '%N %f %G')",
    )


def submit(
    scripts: Sequence[Path],
    run: Path,
    number: int,
    environ: Mapping[str, str] | None = None,
    *,
    accepted: Callable[[list[str]], None] | None = None,
) -> list[str]:
    """``sbatch --parsable`` each script into run ``number`` (its folder ``run``: the
    logs there, the run number the script's argument); the job ids. ``accepted`` is told
    the ids after each accepted job, before the next call. :class:`Unavailable` (exit 4)
    when the scheduler cannot be reached or refuses a script (its message, one line)."""
    jobs: list[str] = []
    output = str(run / "logs" / "%A_%a.out")
    for script in scripts:
        argv = ["sbatch", "--parsable", f"--output={output}", str(script), str(number)]
        done = _call(argv, environ)
        if not done.ok:
            raise _refused(script, done, jobs)
        jobs.append(done.stdout.strip().split(";", 1)[0])
        if accepted is not None:
            accepted(list(jobs))
    return jobs


def _runner(environ: Mapping[str, str] | None) -> slurm_state.Runner:
    """Calls for :func:`slurm_state.job_states`: sacct's failure is an answer (no
    accounting); a job the controller forgot is one; anything else is exit 4."""

    def run(argv: Sequence[str]) -> tuple[int, str, str] | None:
        try:
            done = _call(argv, environ)
        except Unavailable:
            if argv[0] == "sacct":
                return None
            if argv[0] == "scontrol" and shutil.which("scontrol") is None:
                return None
            raise
        forgotten = "Invalid job id" in done.stderr
        if not done.ok and argv[0] != "sacct" and not forgotten:
            reason = " ".join(done.stderr.split()) or f"exit {done.returncode}"
            raise Unavailable(f"{argv[0]}: {reason}", hint="check the controller (scontrol ping)")
        return done.returncode, done.stdout, done.stderr

    return run


def states(
    jobs: Sequence[str], environ: Mapping[str, str] | None = None
) -> dict[int, slurm_state.JobState]:
    """What Slurm says of each array task of ``jobs`` (:func:`slurm_state.job_states`)."""
    return slurm_state.job_states(jobs, _runner(environ))


# --------------------------------------------------------------------------- the engine


def check_backend(backend: str, *, images: bool) -> None:
    """Any backend: a task runs ``envforge build`` on its node."""


def files(plan: Plan, folder: Path) -> dict[str, str]:
    """The sbatch scripts (:func:`render`)."""
    return render(plan, folder)


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Start a new run (:mod:`.runs`) and ``sbatch`` the plan's scripts into it; the job
    ids, each recorded in the run's ``run.json`` as soon as sbatch accepted it."""
    scripts = [folder / name for name in render(plan, folder)]
    missing = [p for p in scripts if not p.is_file()]
    if missing:
        raise InvalidInput(f"{missing[0]}: no such file", hint="plan again (fleet plan -o DIR)")
    number, run = runs.start(folder)
    base = {
        "engine": plan.engine,
        "plan": plan.id,
        "run": number,
        "scripts": [p.name for p in scripts],
        "submitted": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
    }
    runs.record(run, {**base, "jobs": []})
    return submit(
        scripts,
        run,
        number,
        environ,
        accepted=lambda jobs: runs.record(run, {**base, "jobs": jobs}),
    )


def queued(plan: Plan, folder: Path) -> dict[int, slurm_state.JobState]:
    """What Slurm says of the run's tasks (``folder``: the run's): index -> its state."""
    jobs = runs.jobs(folder)
    return states(jobs) if jobs else {}
