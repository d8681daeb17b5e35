"""Issue 33 §4, node-local work: a task builds under the node's folder (``--workdir``, by
default the job's $TMPDIR, else /tmp) with an optional shared wheel cache; only its report
and ``task.json`` reach the plan folder; ``fleet clean`` removes what runs left and keeps
every report. The task's child is a stand-in for ``envforge build`` (this interpreter)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.fleet import clean, runs
from envforge.fleet.plan import Plan
from envforge.fleet.task import MARKER, run_task, work_folder
from envforge.fleet.write import write_plan
from tests.helpers import paths
from tests.unit.fleet.test_fleet import plan_of

ROOT = paths.ROOT

#: ``envforge build ... --report DIR``: fills its home, says what it saw in DIR/seen.json.
CHILD = """
import json, os, sys
report = sys.argv[sys.argv.index("--report") + 1]
home = os.environ["ENVFORGE_HOME"]
os.makedirs(os.path.join(home, "venvs"), exist_ok=True)
open(os.path.join(home, "venvs", "big"), "w").write("x" * 1000)
stale = os.path.exists(os.path.join(os.path.dirname(home), "stale"))
seen = {"home": home, "cache": os.environ.get("UV_CACHE_DIR"), "stale": stale}
json.dump(seen, open(os.path.join(report, "seen.json"), "w"))
"""


def _plan(**kw: object) -> Plan:
    return plan_of("cpu", backend="venv", nodes=2, envforge=(sys.executable, "-c", CHILD), **kw)


def _job(tmp: Path) -> dict[str, str]:
    return {"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "n1", "TMPDIR": str(tmp),
            "CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "3", "PATH": "/bin"}  # fmt: skip


def test_a_task_builds_in_the_job_tmpdir_and_leaves_only_its_report(tmp_path: Path) -> None:
    plan = _plan(workdir="$TMPDIR", cache_dir="/shared/uv-cache")
    folder, node = tmp_path / "plan", tmp_path / "node-tmp"
    node.mkdir()
    write_plan(plan, folder)
    _, run = runs.start(folder)
    work = work_folder(plan, plan.tasks[0], run, _job(node))
    assert work == node / f"envforge-{plan.id}-001-000"
    (work / "home").mkdir(parents=True)  # a requeued task's leftover, marked as ours
    (work / "stale").write_text("")
    (work / MARKER).write_text(json.dumps({"plan": plan.id}))

    assert run_task(plan, run, 0, _job(node)) == 0
    saw = json.loads((run / "reports" / "000" / "seen.json").read_text())
    assert saw == {"home": str(work / "home"), "cache": "/shared/uv-cache", "stale": False}
    assert not work.exists()  # removed when the task ended
    assert not (run / "homes").exists()  # nothing built in the shared folder
    record = json.loads((run / "reports" / "000" / "task.json").read_text())
    assert record["workdir"] == str(work)
    assert record["seen"]["job"] == "0"  # as the job sees it
    assert record["seen"]["node_indexes"] == "3"


def test_tmpdir_unset_is_tmp_and_a_plan_from_before_keeps_homes_in_the_run(
    tmp_path: Path,
) -> None:
    plan = _plan(workdir="$TMPDIR")
    assert work_folder(plan, plan.tasks[1], tmp_path, {}) == Path(
        f"/tmp/envforge-{plan.id}-000-001"
    )
    old = _plan()
    folder = tmp_path / "old"
    write_plan(old, folder)
    _, run = runs.start(folder)
    assert run_task(old, run, 1, {"PATH": "/usr/bin:/bin"}) == 0
    saw = json.loads((run / "reports" / "001" / "seen.json").read_text())
    assert saw["home"] == str(run / "homes" / "001")


# --------------------------------------------------------------------------- fleet clean


def _ran(run: Path, index: int, *, ended: bool) -> None:
    (run / "homes" / f"{index:03d}" / "venvs").mkdir(parents=True)
    report = run / "reports" / f"{index:03d}"
    report.mkdir(parents=True)
    (report / "probe.json").write_text("{}")
    if ended:
        (report / "task.json").write_text(json.dumps({"exit": 0}))
    (run / "logs" / f"1_{index}.out").write_text("log")


def _node_local(plan: Plan, base: Path, run: str, index: int, owner: str) -> Path:
    path = base / f"envforge-{plan.id}-{run}-{index:03d}"
    (path / "home").mkdir(parents=True)
    (path / MARKER).write_text(json.dumps({"plan": owner}))
    return path


@pytest.fixture
def used(tmp_path: Path) -> tuple[Plan, Path, Path]:
    """A plan folder with three runs: 1 and 2 ended, in 3 task 0 ended and 1 runs."""
    plan = _plan(workdir="$TMPDIR")
    folder, node = tmp_path / "plan", tmp_path / "node"
    write_plan(plan, folder)
    for number in (1, 2, 3):
        run = runs.start(folder)[1]
        runs.record(run, {"run": number, "jobs": [str(number)]})
        _ran(run, 0, ended=True)
        _ran(run, 1, ended=number < 3)
    return plan, folder, node


def test_clean_keeps_reports_and_what_may_still_run(
    used: tuple[Plan, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, folder, node = used
    monkeypatch.setenv("TMPDIR", str(node))
    gone = _node_local(plan, node, "003", 0, plan.id)
    running = _node_local(plan, node, "003", 1, plan.id)
    foreign = _node_local(plan, node, "002", 0, "0123456789")  # another plan's marker
    found = clean.leftovers(plan, folder, 1, {"TMPDIR": str(node)})
    paths = {item.path for item in found}
    run1, run3 = runs.run_folder(folder, 1), runs.run_folder(folder, 3)
    assert {run1 / "homes" / "000", run1 / "homes" / "001", run1 / "logs"} <= paths
    assert run3 / "homes" / "000" in paths
    assert gone in paths
    assert run3 / "homes" / "001" not in paths
    assert running not in paths
    assert foreign not in paths
    assert run3 / "logs" not in paths

    assert main(["fleet", "clean", str(folder), "--dry-run"]) == 0
    assert gone.exists()
    assert (run1 / "homes").exists()
    assert main(["fleet", "clean", str(folder), "--json"]) == 0
    assert not gone.exists()
    assert not (run1 / "homes").exists()
    assert not (run1 / "logs").exists()
    assert running.exists()
    assert foreign.exists()
    assert (run3 / "homes" / "001").exists()
    for number in (1, 2, 3):  # every report kept
        for index in (0, 1):
            report = runs.run_folder(folder, number) / "reports" / f"{index:03d}"
            assert (report / "probe.json").is_file()
        assert (runs.run_folder(folder, number) / runs.RUN_FILE).is_file()


def test_clean_keep_zero_treats_every_run_as_stale(used: tuple[Plan, Path, Path]) -> None:
    plan, folder, node = used
    found = {item.path for item in clean.leftovers(plan, folder, 0, {"TMPDIR": str(node)})}
    assert runs.run_folder(folder, 3) / "homes" / "001" in found
    assert runs.run_folder(folder, 3) / "logs" in found


#: A build that fills its home, says so, and hangs until stopped.
HANGS = """
import os, sys, time
report = sys.argv[sys.argv.index("--report") + 1]
os.makedirs(os.path.join(os.environ["ENVFORGE_HOME"], "venvs"), exist_ok=True)
open(os.path.join(report, "started"), "w").close()
time.sleep(120)
"""


def test_a_cancelled_task_stops_its_build_and_removes_its_node_folder(tmp_path: Path) -> None:
    plan = plan_of("cpu", backend="venv", envforge=(sys.executable, "-c", HANGS), workdir="$TMPDIR")
    folder, node = tmp_path / "plan", tmp_path / "node"
    node.mkdir()
    write_plan(plan, folder)
    run = runs.start(folder)[1]
    env = {**os.environ, **_job(node), "PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "envforge", "fleet", "task", str(folder), "0", "--run", "1"]
    task = subprocess.Popen(argv, env=env, cwd=ROOT)
    started = run / "reports" / "000" / "started"
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists()
    assert work_folder(plan, plan.tasks[0], run, env).is_dir()  # type: ignore[union-attr]
    task.send_signal(signal.SIGTERM)  # what scancel sends first
    assert task.wait(timeout=60) == 128 + signal.SIGTERM
    assert list(node.iterdir()) == []
    assert not (run / "reports" / "000" / "task.json").exists()
