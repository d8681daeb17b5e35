"""One task of a plan, on its node: certify, keep the report, write ``task.json``.

The task runs envforge as a child (``build RECIPE --backend venv`` or ``build RECIPE`` /
``certify IMAGE`` for Docker) with ``--report`` into its report folder and, unless the
plan says otherwise, an ``ENVFORGE_HOME`` of its own under the plan's folder
(``homes/NNN``): concurrent tasks on a shared file system never write the same store.
The GPUs the scheduler granted are passed on as ``--gpu`` (:mod:`envforge.host.grant`);
a plan's signing key (``fleet plan --signing-key``) by reference, as ``ENVFORGE_SIGNING_KEY``
(:mod:`envforge.fleet.signing_ref`); the plan's health and collective choices as the
task's flags (:meth:`envforge.fleet.plan.Plan.task_checks`). With node-local work
(``Plan.workdir``: ``fleet plan --workdir``, by default the job's ``$TMPDIR``, else
``/tmp``) the home is ``WORK/envforge-PLAN-RUN-TTT/home`` on the node instead, removed
when the task ends (a marker file names it for ``fleet clean`` when a killed task could
not); ``Plan.cache_dir`` is uv's wheel cache (``UV_CACHE_DIR``). Only the report, its
certificate, the log and ``task.json`` reach the shared plan folder.
``task.json`` (written last, atomically) records the exit status, the node, the grant and
the seconds; its presence tells ``fleet status`` that the task ended.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envforge.core import proc
from envforge.core.fsutil import make_dirs, write_atomically
from envforge.core.settings import SIGNING_KEY_ENV
from envforge.errors import InvalidInput
from envforge.fleet import runs
from envforge.fleet.outcome import TASK_FILE
from envforge.fleet.plan import JOB_TMPDIR, Plan, Task
from envforge.fleet.signing_ref import key_path
from envforge.host.grant import FLEET_VARIABLE, granted, seen


def command(plan: Plan, task: Task, folder: Path) -> list[str]:
    """The envforge command line the task runs."""
    report = str(folder / task.folder)
    argv = [*plan.envforge, "build", task.ref, "--backend", plan.backend, "--report", report]
    if plan.wheelhouse:
        argv += ["--wheelhouse", plan.wheelhouse]
    if plan.level:
        argv += ["--level", plan.level]
    if plan.ca_bundle:
        argv += ["--ca-bundle", plan.ca_bundle]
    for setting in plan.overrides:
        argv += ["--set", setting]
    checks = plan.task_checks(task)
    if checks is not None:  # every choice said: the node's defaults decide nothing
        argv += checks.argv()
    return argv


#: The file that marks a node-local task folder as envforge's (``fleet clean`` reads it).
MARKER = ".envforge-fleet-work.json"


def work_name(plan: Plan, task: Task, folder: Path) -> str:
    """``envforge-PLAN-RUN-TTT``: the task's node-local folder (RUN ``000`` outside runs)."""
    run = folder.name if folder.parent.name == runs.RUNS and folder.name.isdigit() else "000"
    return f"envforge-{plan.id}-{run}-{task.index:03d}"


def work_folder(plan: Plan, task: Task, folder: Path, environ: Mapping[str, str]) -> Path | None:
    """The task's node-local folder (None: the plan keeps homes in the run's folder)."""
    if not plan.workdir:
        return None
    base = plan.workdir
    if base == JOB_TMPDIR:
        tmp = environ.get("TMPDIR", "")
        base = tmp if tmp.startswith("/") else "/tmp"
    return Path(base) / work_name(plan, task, folder)


def environment(
    plan: Plan, task: Task, folder: Path, environ: Mapping[str, str], work: Path | None = None
) -> dict[str, str]:
    env = dict(environ)
    env[FLEET_VARIABLE] = f"{plan.id}:{task.index}:{plan.nonce}"  # the report records it
    if work is not None:
        env["ENVFORGE_HOME"] = str(work / "home")
    elif plan.task_homes:
        env["ENVFORGE_HOME"] = str(folder / "homes" / f"{task.index:03d}")
    if plan.cache_dir:
        env["UV_CACHE_DIR"] = plan.cache_dir
    return env


def _prepare(work: Path, plan: Plan, task: Task) -> None:
    """A fresh node-local folder: a requeued task's leftover (marked) is removed first."""
    if (work / MARKER).is_file():
        shutil.rmtree(work, ignore_errors=True)
    make_dirs(work)
    mark = {"plan": plan.id, "task": task.index, "created": _now()}
    write_atomically(work / MARKER, json.dumps(mark) + "\n")


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


_Handler = Callable[[int, Any], Any] | int | signal.Handlers


def _on_sigterm() -> _Handler | None:
    """Let SIGTERM (scancel, a time limit) unwind the task, so its child's group is
    stopped and its node-local folder removed; the handler to put back (None off the
    main thread, where none is set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.signal(signal.SIGTERM, _stopped)
    return signal.SIG_DFL if previous is None else previous


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


@contextmanager
def signing_key(plan: Plan, environ: Mapping[str, str]) -> Iterator[str]:
    """The path of the plan's signing key on this node ("" when the plan names none)."""
    if not plan.signing_key:
        yield ""
        return
    with key_path(plan.signing_key, environ) as path:
        yield path


def run_task(plan: Plan, folder: Path, index: int, environ: Mapping[str, str] | None = None) -> int:
    """Run task ``index`` of ``plan`` (in ``folder``); its exit status."""
    env_in = dict(os.environ if environ is None else environ)
    if not 0 <= index < len(plan.tasks):
        raise InvalidInput(
            f"task {index}: the plan has tasks 0-{len(plan.tasks) - 1}",
            hint="the sbatch script passes $SLURM_ARRAY_TASK_ID",
        )
    task = plan.tasks[index]
    grant = granted(env_in)  # the child takes it as its default --gpu and says so
    argv = command(plan, task, folder)
    make_dirs(folder / task.folder)
    work = work_folder(plan, task, folder, env_in)
    if work is not None:
        _prepare(work, plan, task)
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    previous = _on_sigterm()
    env = environment(plan, task, folder, env_in, work)
    try:
        with signing_key(plan, env_in) as key:
            if key:  # by reference: the key stays where the node keeps it
                env[SIGNING_KEY_ENV] = key
            with proc.spawn(argv, env=env, stdout=None, stderr=None) as child:
                code = child.wait()
    finally:  # also when Slurm cancels the job (SIGTERM, then KillWait, then SIGKILL)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    record = {
        "task": task.index,
        "recipe": task.recipe,
        "arch": task.arch,
        "exit": code,
        "node": grant.node if grant else env_in.get("SLURMD_NODENAME", ""),
        "granted": grant.to_dict() if grant else {},
        "seen": seen(env_in),
        "pinned": task.node,
        "workdir": str(work) if work is not None else "",
        "command": argv,
        "started": started.isoformat().replace("+00:00", "Z"),
        "seconds": round(time.monotonic() - clock, 3),
    }
    write_atomically(folder / task.folder / TASK_FILE, json.dumps(record, indent=2) + "\n")
    return code
