"""The probe against real worker processes running torch on this machine's CPU.

Nothing is mocked: the real worker file runs in a child interpreter (this one), in its own
process group, and the runner enforces real deadlines. Skipped only when torch is not
importable here (CI installs torch 2.13.0 for the CPU; see scripts/test).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.select import select_device
from envforge.probe.spec import QUICK_STEPS, ProbeSpec, read_checks

from .helpers import short_deadline

pytestmark = pytest.mark.needs_torch  # skipped where torch is missing (tests/helpers/torch_gate.py)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Clock:
    """Listener that records when each step started (monotonic)."""

    started: dict[str, float] = field(default_factory=dict)

    def step_started(self, step: str, deadline: float) -> None:
        del deadline
        self.started[step] = time.monotonic()

    def step_finished(self, result: StepResult) -> None:
        del result


def _check(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(body)
    return path


def _probe(checks: list[Path], step_timeout: float = 60.0) -> tuple[ProbeReport, Clock]:
    spec = ProbeSpec(
        level="quick", vendor="none", step_timeout=step_timeout, checks=read_checks(checks)
    )
    clock = Clock()
    report = run_probe(spec, LocalPythonTarget(), listener=clock)
    return report, clock


def _by_name(report: ProbeReport) -> dict[str, StepResult]:
    return {s.name: s for s in report.steps}


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def _wait_gone(pgid: int, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    members = _group_members(pgid)
    while members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = _group_members(pgid)
    return members


def _hang_check(folder: Path) -> tuple[Path, Path]:
    marker = folder / "hang.pids"
    check = _check(
        folder,
        "hang.py",
        f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open({str(marker)!r}, "w") as fh:
    fh.write("%d %d %d" % (os.getpid(), os.getpgid(0), child.pid))
while True:
    time.sleep(1000)
""",
    )
    return check, marker


def test_checks_pass_fail_crash_and_later_steps_skip(tmp_path: Path) -> None:
    checks = [
        _check(
            tmp_path,
            "noisy.py",
            "import os, sys\nprint('to stdout')\n"
            "os.write(1, b'raw fd 1\\n')\nsys.stdout.write('{\"event\": \"done\"}\\n')\n",
        ),
        _check(tmp_path, "exit0.py", "import sys\nsys.exit(0)\n"),
        _check(tmp_path, "raises.py", "def f():\n    raise ValueError('the check says no')\nf()\n"),
        _check(tmp_path, "exit3.py", "import sys\nsys.exit(3)\n"),
        _check(tmp_path, "abort.py", "import os\nos.abort()\n"),
        _check(tmp_path, "after.py", "pass\n"),
    ]
    report, _ = _probe(checks)
    steps = _by_name(report)
    for name in QUICK_STEPS:
        assert steps[name].status == "pass", steps[name]
    assert steps["check:noisy.py"].status == "pass"
    assert steps["check:exit0.py"].status == "pass"
    assert steps["check:raises.py"].status == "fail"
    assert "ValueError: the check says no" in steps["check:raises.py"].detail
    assert "raises.py:2" in steps["check:raises.py"].detail
    assert steps["check:exit3.py"].status == "fail"
    assert steps["check:abort.py"].status == "crash"
    assert steps["check:abort.py"].detail.startswith("SIGABRT")
    assert "abort.py" in steps["check:abort.py"].detail
    assert steps["check:after.py"].status == "skip"
    assert report.status == "fail"
    assert report.snapshot["torch"]
    assert isinstance(report.snapshot["env"], dict)


def test_a_segfault_is_a_crash_with_sigsegv(tmp_path: Path) -> None:
    checks = [
        _check(tmp_path, "segv.py", "import ctypes\nctypes.string_at(0)\n"),
        _check(tmp_path, "after.py", "pass\n"),
    ]
    report, _ = _probe(checks)
    steps = _by_name(report)
    assert steps["check:segv.py"].status == "crash"
    assert steps["check:segv.py"].detail.startswith("SIGSEGV")
    assert steps["check:after.py"].status == "skip"


def test_a_hang_is_reported_within_the_deadline_and_nothing_is_left(tmp_path: Path) -> None:
    hang, marker = _hang_check(tmp_path)
    after = _check(tmp_path, "after.py", "pass\n")
    deadline = short_deadline()
    report, clock = _probe([hang, after], step_timeout=deadline)
    returned = time.monotonic()
    steps = _by_name(report)
    assert steps["check:hang.py"].status == "hang"
    assert f"{deadline:g}s deadline" in steps["check:hang.py"].detail
    assert steps["check:after.py"].status == "skip"
    assert returned - clock.started["check:hang.py"] <= deadline + 1.0
    worker, pgid, grandchild = (int(x) for x in marker.read_text().split())
    assert pgid == worker  # the worker leads its own group
    assert _wait_gone(pgid) == []
    assert not Path(f"/proc/{grandchild}").exists() or grandchild not in _group_members(pgid)


def _envforge(*args: str) -> list[str]:
    return [sys.executable, "-m", "envforge", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _python_override() -> list[str]:
    """Pin the cpu recipe's python to this interpreter's, so CI on another 3.x passes."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return [] if here == "3.11" else ["--set", f"python={here}"]


def test_cli_full_level_passes_for_the_cpu_recipe_and_writes_reports(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = subprocess.run(
        _envforge(
            "probe",
            "--recipe",
            "cpu",
            *_python_override(),
            "--level",
            "full",
            "--json",
            "--report",
            str(out),
        ),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "pass"
    names = [s["name"] for s in data["steps"]]
    # the torch steps, one import step per distribution the stack asks for, the audit
    assert names[-6:] == [
        "conv2d",
        "autocast",
        "grad-checkpoint",
        "import:torch",
        "import:numpy",
        "audit",
    ]
    assert all(s["status"] == "pass" for s in data["steps"])
    assert data["recipe"]["name"] == "cpu"
    assert "44x44" in next(s["detail"] for s in data["steps"] if s["name"] == "conv2d")
    assert ProbeReport.from_json((out / "probe.json").read_text()).passed
    suite = ET.parse(out / "probe.junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == str(len(names))
    assert suite.get("failures") == "0"
    assert "Traceback" not in done.stderr


def test_cli_gpu_recipe_without_a_gpu_reports_no_device(tmp_path: Path) -> None:
    done = subprocess.run(
        _envforge("probe", "--recipe", "gfx1030", "--level", "quick", "--json"),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    steps = {s["name"]: s for s in json.loads(done.stdout)["steps"]}
    assert steps["device"]["status"] == "no-device"
    assert steps["expected-versions"]["status"] == "fail"  # a CPU wheel, not ROCm
    assert "ROCm" in steps["expected-versions"]["detail"]
    for name in ("memory", "small-tensor", "matmul", "transfer-back"):
        assert steps[name]["status"] == "skip"
    assert "probe failed at step expected-versions" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_version_mismatch_fails_naming_the_step(tmp_path: Path) -> None:
    # A NumPy bound the installed NumPy (if any) is outside of, and the table accepts.
    try:
        installed = importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    bound = "<2" if installed is None or int(installed.split(".")[0]) >= 2 else ">=2"
    done = subprocess.run(
        _envforge(
            "probe",
            "--recipe",
            "cpu",
            *_python_override(),
            "--set",
            f"numpy={bound}",
            "--level",
            "quick",
        ),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "probe failed at step expected-versions" in done.stderr
    expected = f"outside {bound}" if installed else "numpy is not importable"
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_stops_the_worker_and_exits_130(tmp_path: Path) -> None:
    hang, marker = _hang_check(tmp_path)
    proc = subprocess.Popen(
        _envforge("probe", "--level", "quick", "--step-timeout", "120", "--check", str(hang)),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text().strip():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the hanging check never started"
            time.sleep(0.1)
        worker, pgid, _ = (int(x) for x in marker.read_text().split())
        assert _group_members(pgid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert "Traceback" not in err
    assert _wait_gone(pgid) == []
    assert worker not in _group_members(pgid)


def test_select_device_falls_back_to_cpu_with_a_logged_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="envforge.select"):
        device = select_device(timeout=60)
    import torch

    if torch.cuda.is_available():  # pragma: no cover - GPU machines
        assert device == "cuda"
        return
    assert device == "cpu"
    assert any("no-device" in r.getMessage() for r in caplog.records)


def test_select_device_with_a_missing_interpreter_is_cpu(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="envforge.select"):
        assert select_device(timeout=5, python="/nonexistent/python3") == "cpu"
    assert any("could not run" in r.getMessage() for r in caplog.records)


def _pid1_python(folder: Path) -> Path | None:
    """A wrapper that runs this interpreter as PID 1 of a new PID namespace, or None."""
    wrapper = folder / "pid1-python"
    wrapper.write_text(f'#!/bin/sh\nexec unshare -p -f --mount-proc {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    try:
        done = subprocess.run(
            [str(wrapper), "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    return wrapper if done.stdout.strip() == "1" else None


def test_as_pid1_like_in_a_container_abort_is_still_sigabrt(tmp_path: Path) -> None:
    # PID 1 cannot kill itself with a default-action signal; the worker supervises itself.
    wrapper = _pid1_python(tmp_path)
    if wrapper is None:
        pytest.skip("cannot create a PID namespace here (unshare -p needs privileges)")
    checks = read_checks(
        [
            _check(tmp_path, "abort.py", "import os\nos.abort()\n"),
            _check(tmp_path, "after.py", "pass\n"),
        ]
    )
    spec = ProbeSpec(level="quick", vendor="none", step_timeout=60.0, checks=checks)
    report = run_probe(spec, LocalPythonTarget(python=str(wrapper)))
    steps = _by_name(report)
    assert steps["small-tensor"].status == "pass"
    assert steps["check:abort.py"].status == "crash"
    assert steps["check:abort.py"].detail.startswith("SIGABRT"), steps["check:abort.py"].detail
    assert steps["check:after.py"].status == "skip"


def test_cli_python_option_probes_another_interpreter(tmp_path: Path) -> None:
    # A fresh virtualenv without torch: the snapshot fails, device steps skip, exit 1.
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    done = subprocess.run(
        _envforge("probe", "--python", str(python), "--level", "quick", "--json"),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["environment"]["target"] == f"python {python}"
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["env-snapshot"]["status"] == "fail"
    assert "torch not importable: ModuleNotFoundError" in steps["env-snapshot"]["detail"]
    assert steps["device"]["status"] == "skip"


def _python37() -> str | None:
    """A real Python 3.7 (pyenv's shims are skipped: they may run another version)."""
    for candidate in sorted(Path.home().glob(".pyenv/versions/3.7*/bin/python")):
        return str(candidate)
    found = shutil.which("python3.7")
    return found if found and "/shims/" not in found else None


def test_the_worker_runs_on_python_37(tmp_path: Path) -> None:
    # The grammar test always runs (unit); this runs the file for real where 3.7 exists.
    python = _python37()
    if python is None:
        pytest.skip("no Python 3.7 interpreter on this machine")
    checks = read_checks(
        [
            _check(tmp_path, "raises.py", "raise KeyError('k')\n"),
            _check(tmp_path, "segv.py", "import ctypes\nctypes.string_at(0)\n"),
        ]
    )
    spec = ProbeSpec(level="full", vendor="none", step_timeout=60.0, checks=checks)
    report = run_probe(spec, LocalPythonTarget(python=python))
    steps = _by_name(report)
    assert report.snapshot["python"].startswith("3.7.")
    assert steps["check:raises.py"].status == "fail"
    assert "KeyError" in steps["check:raises.py"].detail
    assert steps["check:segv.py"].status == "crash"
    assert steps["check:segv.py"].detail.startswith("SIGSEGV: Fatal Python error")
    assert "raises.py" not in steps["check:segv.py"].detail  # only the crashing step's stderr


def test_a_killed_envforge_leaves_no_worker_behind(tmp_path: Path) -> None:
    # SIGKILL gives envforge no chance to clean up; the worker notices its parent is gone.
    hang, marker = _hang_check(tmp_path)
    proc = subprocess.Popen(
        _envforge("probe", "--level", "quick", "--step-timeout", "120", "--check", str(hang)),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text().strip():
            assert proc.poll() is None
            assert time.monotonic() < deadline, "the hanging check never started"
            time.sleep(0.1)
        worker, pgid, grandchild = (int(x) for x in marker.read_text().split())
        proc.kill()
        proc.wait(timeout=10)
        gone_by = time.monotonic() + 10
        while _alive_pid(worker) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not _alive_pid(worker)
        assert _wait_gone(pgid) == []  # the check's own child went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _alive_pid(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def _alive_pid(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
