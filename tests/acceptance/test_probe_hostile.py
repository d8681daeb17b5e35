"""The probe against checks that misbehave, with real processes (issue 11, class 4).

What a check starts must not outlive the probe, whatever it does: a daemon in a session
of its own (``setsid``), a double fork that keeps the worker's event pipe, a hang or a
crash right after starting one. Design (see envforge/probe/worker/): a check that
returns is reported by its own verdict (``pass`` here) and its detail names what was
stopped; a check that hangs is a ``hang``, one that dies a ``crash``. In every case the
processes are killed by the time envforge returns, and a /proc scan finds none of them.

Each run marks its processes with a variable of its own (``ENVFORGE_TEST_MARK``) so that
the scan sees only this test's processes, never another engineer's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import ProbeSpec, read_checks

from .helpers import short_deadline

ROOT = Path(__file__).resolve().parents[2]
# skipped where torch is missing (tests/helpers/torch_gate.py)
needs_torch = pytest.mark.needs_torch
needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
#: Seconds past a deadline that envforge may take to stop everything and return.
SLACK = 3.0
MARK = "ENVFORGE_TEST_MARK"

SETSID_DAEMON = """
import subprocess
d = subprocess.Popen(["setsid", "sleep", "600"])
open(PIDS, "a").write("%d\\n" % d.pid)
"""
# A classic double fork; the grandchild is a copy of the worker, so it still holds the
# worker's private event pipe (a forked, not exec'd, process keeps every descriptor).
DOUBLE_FORK = """
import os, time
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        open(PIDS, "a").write("%d\\n" % os.getpid())
        os.write(w, b"x")
        time.sleep(600)
        os._exit(0)
    os._exit(0)
os.waitpid(middle, 0)
os.read(r, 1)
"""


def _check(folder: Path, name: str, body: str, pids: Path) -> Path:
    path = folder / name
    path.write_text(f"PIDS = {str(pids)!r}\n" + body)
    return path


def _marked(token: str) -> list[int]:
    """Live processes whose environment holds ``MARK=token`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{MARK}={token}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


class Started:
    """Listener: when each step started (monotonic)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def step_started(self, step: str, deadline: float) -> None:
        del deadline
        self.at[step] = time.monotonic()

    def step_finished(self, result: StepResult) -> None:
        del result


def _probe(checks: list[Path], step_timeout: float) -> tuple[ProbeReport, Started, str, float]:
    token = os.urandom(8).hex()
    spec = ProbeSpec(
        level="quick", vendor="none", step_timeout=step_timeout, checks=read_checks(checks)
    )
    started = Started()
    target = LocalPythonTarget(env={**os.environ, MARK: token})
    report = run_probe(spec, target, listener=started)
    return report, started, token, time.monotonic()


def _steps(report: ProbeReport) -> dict[str, StepResult]:
    return {s.name: s for s in report.steps}


@needs_torch
@needs_proc
def test_daemons_a_check_leaves_are_stopped_and_the_check_passes(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    checks = [
        _check(tmp_path, "setsid.py", SETSID_DAEMON, pids),
        _check(tmp_path, "doublefork.py", DOUBLE_FORK, pids),
        _check(tmp_path, "after.py", "pass\n", pids),
    ]
    report, started, token, returned = _probe(checks, step_timeout=20.0)
    steps = _steps(report)
    assert steps["check:setsid.py"].status == "pass", steps["check:setsid.py"]
    assert "stopped 1 process the check left running: " in steps["check:setsid.py"].detail
    assert "sleep 600" in steps["check:setsid.py"].detail
    assert steps["check:doublefork.py"].status == "pass", steps["check:doublefork.py"]
    assert "stopped 1 process the check left running" in steps["check:doublefork.py"].detail
    assert steps["check:after.py"].status == "pass"
    assert returned - started.at["check:setsid.py"] < 20.0 + SLACK
    assert len(_pids(pids)) == 2
    assert [p for p in _pids(pids) if _alive(p)] == []
    assert _marked(token) == []


@needs_torch
@needs_proc
@pytest.mark.parametrize(
    ("end", "status"),
    [("import time\ntime.sleep(600)\n", "hang"), ("import os\nos.abort()\n", "crash")],
)
def test_a_check_that_hangs_or_dies_after_starting_daemons_leaves_nothing(
    tmp_path: Path, end: str, status: str
) -> None:
    pids = tmp_path / "pids"
    check = _check(tmp_path, "bad.py", SETSID_DAEMON + DOUBLE_FORK + end, pids)
    deadline = short_deadline()
    report, started, token, returned = _probe([check], step_timeout=deadline)
    assert _steps(report)["check:bad.py"].status == status
    assert returned - started.at["check:bad.py"] < deadline + SLACK
    assert len(_pids(pids)) == 2
    assert [p for p in _pids(pids) if _alive(p)] == []
    assert _marked(token) == []


def _envforge(*args: str) -> list[str]:
    return [sys.executable, "-m", "envforge", *args]


def _env(token: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if token:
        env[MARK] = token
    return env


@needs_torch
@needs_proc
def test_cli_returns_with_a_daemon_check_and_leaves_nothing(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    check = _check(tmp_path, "daemon.py", SETSID_DAEMON + DOUBLE_FORK, pids)
    token = os.urandom(8).hex()
    done = subprocess.run(
        _envforge(
            "probe", "--level", "quick", "--step-timeout", "20", "--check", str(check), "--json"
        ),
        cwd=tmp_path,
        env=_env(token),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {s["name"]: s for s in json.loads(done.stdout)["steps"]}
    assert steps["check:daemon.py"]["status"] == "pass"
    assert "stopped 2 processes the check left running" in steps["check:daemon.py"]["detail"]
    assert [p for p in _pids(pids) if _alive(p)] == []
    assert _marked(token) == []


@needs_torch
def test_cli_a_message_with_surrogates_and_escapes_is_a_clean_fail(tmp_path: Path) -> None:
    check = tmp_path / "hostile.py"
    check.write_text('raise ValueError("bad \\udc80 \\x1b[31mred\\x07 \\x00end")\n')
    out = tmp_path / "report"
    done = subprocess.run(
        _envforge("probe", "--level", "quick", "--check", str(check), "--report", str(out)),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    err = done.stderr.decode("utf-8")  # strict: what envforge wrote is valid UTF-8
    assert done.returncode == 1, err
    assert "Traceback" not in err
    assert "\x1b[31m" not in err
    assert "\x00" not in err
    assert "ValueError: bad \\udc80 \\x1b[31mred\\x07 \\x00end" in err
    suite = ET.parse(out / "probe.junit.xml").getroot()  # well-formed XML
    failure = suite.find(".//testcase[@name='check:hostile.py']/failure")
    assert failure is not None
    assert failure.get("message", "").startswith("ValueError: bad \\udc80 \\x1b[31mred\\x07")
    data = json.loads((out / "probe.json").read_text(encoding="utf-8"))
    assert data["status"] == "fail"


def _one_line_exit_2(args: list[str], cwd: Path) -> str:
    done = subprocess.run(
        _envforge(*args),
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def test_cli_a_fifo_or_device_as_check_is_exit_2_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "check.py"
    os.mkfifo(fifo)
    assert "not a regular file (a FIFO)" in _one_line_exit_2(
        ["probe", "--check", str(fifo)], tmp_path
    )
    assert "not a regular file (a character device)" in _one_line_exit_2(
        ["probe", "--check", "/dev/zero"], tmp_path
    )


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e999"])
def test_cli_step_timeouts_no_timer_holds_are_exit_2(tmp_path: Path, value: str) -> None:
    assert "--step-timeout must be positive and at most" in _one_line_exit_2(
        ["probe", "--step-timeout", value], tmp_path
    )


def _folders(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"envforge-probe-{pid}.*"))


def _start_hanging(tmp_path: Path, token: str) -> tuple[subprocess.Popen[bytes], Path]:
    started = tmp_path / "started"
    check = tmp_path / "hang.py"
    check.write_text(f"open({str(started)!r}, 'w').write('x')\nimport time\ntime.sleep(600)\n")
    proc = subprocess.Popen(
        _envforge("probe", "--level", "quick", "--step-timeout", "120", "--check", str(check)),
        cwd=tmp_path,
        env=_env(token),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not started.exists():
        assert proc.poll() is None
        assert time.monotonic() < deadline, "the hanging check never started"
        time.sleep(0.1)
    return proc, check


@needs_torch
@needs_proc
def test_sigterm_cleans_the_temporary_folder_and_every_process(tmp_path: Path) -> None:
    token = os.urandom(8).hex()
    proc, _ = _start_hanging(tmp_path, token)
    try:
        assert _folders(proc.pid)
        proc.terminate()
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _folders(proc.pid) == []
    assert _marked(token) == []


@needs_torch
@needs_proc
def test_the_next_run_sweeps_the_folder_a_killed_envforge_left(tmp_path: Path) -> None:
    token = os.urandom(8).hex()
    proc, _ = _start_hanging(tmp_path, token)
    try:
        left = _folders(proc.pid)
        assert left
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [p for p in left if p.exists()] == left  # SIGKILL: nothing could clean up
    deadline = time.monotonic() + 10  # the launcher sees envforge gone and ends the tree
    while _marked(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _marked(token) == []
    done = subprocess.run(
        _envforge("probe", "--level", "quick", "--json"),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr
    assert [p for p in left if p.exists()] == []
