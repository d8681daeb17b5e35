"""One task of a plan, on its node: certify, keep the report, write ``task.json``.

The task runs envforge as a child (``build RECIPE --backend venv`` or ``build RECIPE`` /
``certify IMAGE`` for Docker) with ``--report`` into its report folder and, unless the
plan says otherwise, an ``ENVFORGE_HOME`` of its own under the plan's folder
(``homes/NNN``): concurrent tasks on a shared file system never write the same store.
The GPUs the scheduler granted are passed on as ``--gpu`` (:mod:`envforge.host.grant`);
a plan's signing key (``fleet plan --signing-key``) by reference, as ``ENVFORGE_SIGNING_KEY``
(:mod:`envforge.fleet.signing_ref`).
``task.json`` (written last, atomically) records the exit status, the node, the grant and
the seconds; its presence tells ``fleet status`` that the task ended.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from envforge.core import proc
from envforge.core.fsutil import make_dirs, write_atomically
from envforge.errors import InvalidInput
from envforge.fleet.outcome import TASK_FILE
from envforge.fleet.plan import Plan, Task
from envforge.fleet.signing_ref import key_path
from envforge.host.grant import FLEET_VARIABLE, granted
from envforge.publish.signing import ENV_SIGNING_KEY


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
    return argv


def environment(plan: Plan, task: Task, folder: Path, environ: Mapping[str, str]) -> dict[str, str]:
    env = dict(environ)
    env[FLEET_VARIABLE] = f"{plan.id}:{task.index}:{plan.nonce}"  # the report records it
    if plan.task_homes:
        env["ENVFORGE_HOME"] = str(folder / "homes" / f"{task.index:03d}")
    return env


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
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    env = environment(plan, task, folder, env_in)
    with signing_key(plan, env_in) as key:
        if key:  # by reference: the key stays where the node keeps it
            env[ENV_SIGNING_KEY] = key
        with proc.spawn(argv, env=env, stdout=None, stderr=None) as child:
            code = child.wait()
    record = {
        "task": task.index,
        "recipe": task.recipe,
        "arch": task.arch,
        "exit": code,
        "node": grant.node if grant else env_in.get("SLURMD_NODENAME", ""),
        "granted": grant.to_dict() if grant else {},
        "command": argv,
        "started": started.isoformat().replace("+00:00", "Z"),
        "seconds": round(time.monotonic() - clock, 3),
    }
    write_atomically(folder / task.folder / TASK_FILE, json.dumps(record, indent=2) + "\n")
    return code
