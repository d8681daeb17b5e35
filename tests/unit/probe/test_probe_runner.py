"""The runner against real child processes that play the worker's part (no torch needed).

Each test runs a small stand-in worker through LocalPythonTarget, so deadlines, process
groups, exit statuses and stderr handling are the real ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envforge.core.proc import start_time
from envforge.errors import Unavailable
from envforge.probe.report import ReportHost, StepResult
from envforge.probe.runner import (
    LocalPythonTarget,
    WorkerHandle,
    container_exit_status,
    folder_prefix,
    run_probe,
    stale_folder,
    sweep_stale_folders,
)
from envforge.probe.spec import QUICK_STEPS, ProbeSpec

HOST = ReportHost(kernel="Linux test", machine="x86_64")

PRELUDE = """
import json, os, signal, sys, time
spec = json.load(open(sys.argv[1]))
def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\\n"); sys.stdout.flush()
"""


@dataclass(frozen=True)
class ScriptTarget:
    """LocalPythonTarget running a stand-in script instead of the real worker."""

    script: str
    local: LocalPythonTarget = field(default_factory=LocalPythonTarget)

    @property
    def description(self) -> str:
        return "stand-in worker"

    def start(
        self, worker_source: str, spec_json: str, env: Mapping[str, str]
    ) -> AbstractContextManager[WorkerHandle]:
        del worker_source
        return self.local.start(PRELUDE + self.script, spec_json, env)


@dataclass
class Recorder:
    events: list[tuple[str, str]] = field(default_factory=list)

    def step_started(self, step: str, deadline: float) -> None:
        del deadline
        self.events.append(("start", step))

    def step_finished(self, result: StepResult) -> None:
        self.events.append((result.status, result.name))


def _run(script: str, **spec_kw: object) -> tuple[dict[str, StepResult], Recorder]:
    spec = ProbeSpec(level="quick", **spec_kw)  # type: ignore[arg-type]
    rec = Recorder()
    report = run_probe(spec, ScriptTarget(script), listener=rec, host=HOST)
    assert [s.name for s in report.steps] == list(spec.steps)
    return {s.name: s for s in report.steps}, rec


ALL_PASS = """
emit(event="hello", pid=os.getpid())
print("noise that is not an event")
for name in spec["steps"]:
    emit(event="start", step=name, deadline=spec["step_timeout"])
    emit(event="end", step=name, status="pass", seconds=0.01, detail="ok " + name)
emit(event="done")
"""


def test_every_step_passes_and_stray_stdout_lines_are_ignored() -> None:
    steps, rec = _run(ALL_PASS)
    assert [s.status for s in steps.values()] == ["pass"] * len(QUICK_STEPS)
    assert steps["matmul"].detail == "ok matmul"
    assert rec.events[:2] == [("start", "env-snapshot"), ("pass", "env-snapshot")]


def _die_in_matmul(how: str) -> str:
    return f"""
emit(event="hello", pid=os.getpid())
for name in spec["steps"]:
    emit(event="start", step=name, deadline=5)
    if name == "matmul":
        sys.stderr.write("HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION\\n"); sys.stderr.flush()
        {how}
    emit(event="end", step=name, status="pass", seconds=0.01, detail="")
emit(event="done")
"""


@pytest.mark.parametrize(
    ("how", "starts"),
    [
        ("os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
        ("os.abort()", "SIGABRT"),
        ("os._exit(3)", "worker exited with code 3"),
        ("os._exit(134)", "SIGABRT (exit code 134)"),  # a wrapper's 128+N
    ],
)
def test_a_dying_worker_is_a_crash_with_its_signal_and_stderr(how: str, starts: str) -> None:
    steps, rec = _run(_die_in_matmul(how))
    assert steps["small-tensor"].status == "pass"
    assert steps["matmul"].status == "crash"
    assert steps["matmul"].detail.startswith(starts)
    assert "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION" in steps["matmul"].detail
    assert steps["transfer-back"].status == "skip"
    assert "matmul" in steps["transfer-back"].detail
    assert ("skip", "transfer-back") in rec.events


def test_a_worker_that_never_starts_is_a_hang_of_the_first_step() -> None:
    began = time.monotonic()
    steps, _ = _run("time.sleep(60)\n", startup_timeout=1.0)
    assert time.monotonic() - began < 5
    assert steps["env-snapshot"].status == "hang"
    assert "did not start within 1s" in steps["env-snapshot"].detail
    assert {s.status for n, s in steps.items() if n != "env-snapshot"} == {"skip"}


def test_a_step_past_its_deadline_is_a_hang_and_the_group_is_killed(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    script = f"""
import subprocess
emit(event="hello", pid=os.getpid())
emit(event="start", step="env-snapshot", deadline=1.0)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # makes the runner escalate to KILL
open({str(marker)!r}, "w").write("%d %d" % (os.getpid(), child.pid))
time.sleep(600)
"""
    began = time.monotonic()
    steps, _ = _run(script, step_timeout=1.0)
    assert time.monotonic() - began < 6
    assert steps["env-snapshot"].status == "hang"
    assert "1s deadline" in steps["env-snapshot"].detail
    assert steps["device"].status == "skip"
    pids = [int(p) for p in marker.read_text().split()]
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (read from /proc, no psutil)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_worker_statuses_and_details_pass_through() -> None:
    script = """
emit(event="hello", pid=os.getpid())
for name in spec["steps"]:
    emit(event="start", step=name, deadline=5)
    status = {"device": "no-device", "memory": "oom", "matmul": "weird"}.get(name, "pass")
    emit(event="end", step=name, status=status, seconds=0.5, detail="d " + name)
emit(event="done")
"""
    steps, _ = _run(script)
    assert steps["device"].status == "no-device"
    assert steps["memory"].status == "oom"
    assert steps["matmul"].status == "fail"  # an unknown status is never a pass
    assert steps["env-snapshot"].seconds == 0.5


def test_a_worker_that_stops_early_leaves_the_rest_skipped() -> None:
    script = """
emit(event="hello", pid=os.getpid())
emit(event="start", step="env-snapshot", deadline=5)
emit(event="end", step="env-snapshot", status="pass", seconds=0.1, detail="")
emit(event="done")
"""
    steps, _ = _run(script)
    assert steps["env-snapshot"].status == "pass"
    assert {s.status for n, s in steps.items() if n != "env-snapshot"} == {"skip"}


def test_lots_of_stderr_never_blocks_the_worker() -> None:
    script = (
        """
sys.stderr.write(("x" * 1000 + "\\n") * 2000); sys.stderr.flush()
"""
        + ALL_PASS
    )
    steps, _ = _run(script, step_timeout=10.0)
    assert [s.status for s in steps.values()] == ["pass"] * len(QUICK_STEPS)


def test_a_missing_interpreter_is_unavailable() -> None:
    with pytest.raises(Unavailable, match="not found"):
        run_probe(ProbeSpec(level="quick"), LocalPythonTarget(python="/nonexistent/python"))


def test_the_recipe_env_reaches_the_worker() -> None:
    script = """
emit(event="hello", pid=os.getpid())
for name in spec["steps"]:
    emit(event="start", step=name, deadline=5)
    ok = os.environ.get("MIOPEN_DEBUG_CONV_IMPLICIT_GEMM") == "1"
    emit(event="end", step=name, status="pass" if ok else "fail", seconds=0.0, detail="")
emit(event="done")
"""
    steps, _ = _run(script, env=(("MIOPEN_DEBUG_CONV_IMPLICIT_GEMM", "1"),))
    assert [s.status for s in steps.values()] == ["pass"] * len(QUICK_STEPS)


@pytest.mark.parametrize(
    ("code", "want"),
    [
        (139, (139, "SIGSEGV")),
        (134, (134, "SIGABRT")),
        (137, (137, "SIGKILL")),
        (1, (1, None)),
        (0, (0, None)),
        (None, (None, None)),
    ],
)
def test_container_exit_codes_map_to_signals(
    code: int | None, want: tuple[int | None, str | None]
) -> None:
    assert container_exit_status(code) == want


def test_temporary_worker_files_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temporary folder of this test's own: another probe running at the same moment
    # (another test run on the machine) must not make it fail.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _run(ALL_PASS)
    assert list(tmp_path.glob("envforge-probe-*")) == []


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


def _daemon(marker: Path) -> str:
    """Stand-in lines that start a sleeper in a session of its own, holding stdout open."""
    return f"""
import subprocess
d = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                     start_new_session=True)
open({str(marker)!r}, "w").write(str(d.pid))
"""


def test_a_daemon_holding_the_pipe_does_not_hold_the_probe(tmp_path: Path) -> None:
    # The worker exits; its daemon keeps stdout open. End of stream never comes: the
    # runner ends on the worker's exit, and kills the daemon by the run's marker.
    marker = tmp_path / "pid"
    began = time.monotonic()
    steps, _ = _run(_daemon(marker) + ALL_PASS)
    took = time.monotonic() - began
    assert all(s.status == "pass" for s in steps.values())
    assert took < 10, took  # the old runner never returned
    assert _wait_gone(int(marker.read_text()))


def test_a_hang_kills_a_daemon_in_another_session(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    script = (
        _daemon(marker)
        + """
emit(event="hello", pid=os.getpid())
emit(event="start", step="env-snapshot", deadline=1.0)
time.sleep(600)
"""
    )
    steps, _ = _run(script, step_timeout=1.0)
    assert steps["env-snapshot"].status == "hang"
    assert _wait_gone(int(marker.read_text()))


def test_control_characters_in_a_detail_are_escaped() -> None:
    script = """
emit(event="hello", pid=os.getpid())
for name in spec["steps"]:
    emit(event="start", step=name, deadline=5)
    emit(event="end", step=name, status="fail", seconds=0.1, detail="e\\x1b[31m \\udc80")
emit(event="done")
"""
    steps, _ = _run(script)
    assert steps["matmul"].detail == "e\\x1b[31m \\udc80"


@pytest.mark.parametrize(
    ("name", "age", "alive", "stale"),
    [
        ("envforge-probe-123.456-abc", 0.0, False, True),  # its envforge is gone
        ("envforge-probe-123.456-abc", 0.0, True, False),  # still running
        ("envforge-probe-abc", 3 * 24 * 3600.0, True, True),  # unowned (old envforge), old
        ("envforge-probe-abc", 60.0, False, False),  # unowned and recent: maybe in use
        ("envforge-check-abc", 1e9, False, False),  # not ours to judge
    ],
)
def test_stale_folder(name: str, age: float, alive: bool, stale: bool) -> None:
    calls: list[tuple[int, int | None]] = []

    def running(pid: int, start: int | None) -> bool:
        calls.append((pid, start))
        return alive

    assert stale_folder(name, age, running) is stale
    if name.startswith("envforge-probe-123"):
        assert calls == [(123, 456)]


def test_sweep_removes_folders_of_dead_owners_only(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(gone.stdout)
    me = os.getpid()
    dead = tmp_path / (folder_prefix(dead_pid, 1) + "x")
    mine = tmp_path / (folder_prefix(me, start_time(me)) + "y")
    unowned = tmp_path / "envforge-probe-zzz"
    other = tmp_path / "something-else"
    for folder in (dead, mine, unowned, other):
        folder.mkdir()
        (folder / "spec.json").write_text("{}")
    removed = sweep_stale_folders(tmp_path)
    assert removed == [dead]
    assert not dead.exists()
    assert mine.exists()
    assert unowned.exists()
    assert other.exists()
