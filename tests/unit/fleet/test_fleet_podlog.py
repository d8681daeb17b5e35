"""Kubernetes results: a real ``fleet plan --engine k8s``, its pod command run here (the
ConfigMaps' files in a folder, this interpreter as the image's), and ``fleet collect
--from-logs`` importing the framed report as a Slurm task's, or refusing it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from envforge.cli import main
from envforge.core.resources import templates_dir
from envforge.fleet import podlog
from envforge.fleet.planning import load_plan

HAS_TORCH = subprocess.run([sys.executable, "-c", "import torch"], check=False).returncode == 0


def _plan(folder: Path) -> Path:
    argv = ["fleet", "plan", "--engine", "k8s", "--recipe", "cpu", "--level", "quick"]
    assert main([*argv, "-o", str(folder)]) == 0
    return folder


def _run_pod(plan: Path, where: Path) -> str:
    """The Job's container command, run here; the pod's log (stdout and stderr)."""
    docs = list(yaml.safe_load_all((plan / "jobs.yaml").read_text()))
    root = where / "envforge"
    root.mkdir(parents=True)
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for name, text in doc["data"].items():
                (root / name).write_text(text)
    box = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]
    box = box["containers"][0]
    env = {**os.environ, "JOB_COMPLETION_INDEX": "0", "NODE_NAME": "gpu-node-7"}
    env.update({e["name"]: e["value"] for e in box["env"] if "value" in e})
    argv = [sys.executable, *(a.replace("/envforge", str(root)) for a in box["command"][1:])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def pod_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(a plan folder, the log its one pod printed)."""
    base = tmp_path_factory.mktemp("pod")
    plan = _plan(base / "plan")
    return plan, _run_pod(plan, base / "run")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    return tmp_path


def _copy_plan(src: Path, dest: Path) -> Path:
    dest.mkdir()
    for name in ("plan.json", "jobs.yaml"):
        shutil.copy(src / name, dest / name)
    return dest


def _collect(plan: Path, logs: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["fleet", "collect", str(plan), "--from-logs", str(logs)])
    out = capsys.readouterr()
    return code, out.out + out.err


def _record(log: str) -> dict[str, Any]:
    found, refused = podlog.frames(log, "pod.log")
    assert not refused
    return dict(found[0].record)


def _reframe(log: str, record: dict[str, Any], task: int = 0) -> str:
    """``log`` with its frame replaced by one of ``record`` (a whole, consistent frame)."""
    data = json.dumps(record).encode()
    text = base64.b64encode(data).decode()
    kept = [ln for ln in log.splitlines() if "envforge-report-" not in ln]
    plan, nonce = record["plan"], record["nonce"]
    kept += [
        f"envforge-report-begin task={task:03d} plan={plan} nonce={nonce} framing=1",
        f"envforge-report-data {task:03d} {text}",
        f"envforge-report-end task={task:03d} sha256={hashlib.sha256(data).hexdigest()}",
    ]
    return "\n".join(kept) + "\n"


def test_the_pod_prints_one_framed_report(pod_log: tuple[Path, str]) -> None:
    plan_dir, log = pod_log
    plan = load_plan(plan_dir)
    lines = [ln for ln in log.splitlines() if ln.startswith("envforge-report-")]
    assert lines[0] == (
        f"envforge-report-begin task=000 plan={plan.id} nonce={plan.nonce} framing=1"
    )
    assert lines[-1].startswith("envforge-report-end task=000 sha256=")
    assert all(ln.startswith("envforge-report-data 000 ") for ln in lines[1:-1])
    record = _record(log)
    assert record["host"]["node"] == "gpu-node-7"
    assert json.loads(record["events"][0][1])["event"] == "hello"


@pytest.mark.skipif(not HAS_TORCH, reason="the probe passes only where torch imports")
def test_collect_from_logs_imports_the_report_like_a_slurm_task(
    pod_log: tuple[Path, str], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _copy_plan(pod_log[0], home / "plan")
    logs = home / "logs"
    logs.mkdir()
    # kubectl logs --timestamps puts a time before every line
    stamped = "".join(f"2026-11-28T00:00:00.000000000Z {ln}\n" for ln in pod_log[1].splitlines())
    (logs / "envforge-0-abcde.log").write_text(stamped)
    code, out = _collect(plan, logs, capsys)
    assert code == 0, out
    assert "000  cpu" in out
    assert "passed on gpu-node-7" in out
    report = json.loads((plan / "reports/000/probe.json").read_text())
    assert report["host"]["fleet"]["nonce"] == load_plan(plan).nonce
    assert report["host"]["node"] == "gpu-node-7"
    code, out = _collect(plan, logs, capsys)  # again: nothing new in the store
    assert code == 0
    assert "0 report(s) added" in out


def test_a_tampered_or_cut_log_is_refused_and_nothing_written(
    pod_log: tuple[Path, str], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _copy_plan(pod_log[0], home / "plan")
    lines = pod_log[1].splitlines()
    data = next(i for i, ln in enumerate(lines) if ln.startswith("envforge-report-data"))
    flipped = lines[data][-5] + ("A" if lines[data][-5] != "A" else "B")
    altered = [*lines[:data], lines[data][:-5] + flipped + lines[data][-3:], *lines[data + 1 :]]
    log = home / "altered.log"
    log.write_text("\n".join(altered) + "\n")
    code, out = _collect(plan, log, capsys)
    assert code == 1
    assert "does not match its sha256" in out
    assert not (plan / "reports/000/probe.json").exists()
    log.write_text("\n".join(ln for ln in lines if "report-end" not in ln) + "\n")
    code, out = _collect(plan, log, capsys)
    assert code == 1
    assert "no end line" in out


def test_another_plans_report_is_refused(
    pod_log: tuple[Path, str], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _plan(home / "other")  # the same recipe, another nonce
    log = home / "pod.log"
    log.write_text(pod_log[1])
    code, out = _collect(other, log, capsys)
    assert code == 1
    assert "another plan's nonce" in out
    assert not (other / "reports/000").exists()


def test_a_reframed_forgery_is_refused_by_the_genuineness_checks(
    pod_log: tuple[Path, str], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A frame rebuilt with a consistent sha256 is still checked as a Slurm report is: a
    run that lost its torch steps is no probe run, a task the plan lacks is refused."""
    plan = _copy_plan(pod_log[0], home / "plan")
    record = _record(pod_log[1])
    record["events"] = [e for e in record["events"] if '"step": "matmul"' not in e[1]]
    record["events"] = [e for e in record["events"] if '"event": "done"' not in e[1]]
    log = home / "forged.log"
    log.write_text(_reframe(pod_log[1], record))
    code, out = _collect(plan, log, capsys)
    assert code == 1
    assert "000  cpu" in out
    assert "refused" in out or "failed" in out
    assert "passed" not in out.split("000  cpu")[1].splitlines()[0]
    record = {**_record(pod_log[1]), "task": 5}
    log.write_text(_reframe(pod_log[1], record, task=5))
    code, out = _collect(plan, log, capsys)
    assert code == 1
    assert "the plan has tasks 000-000" in out


def test_a_stopped_worker_replays_as_a_hang(pod_log: tuple[Path, str]) -> None:
    """The pod stopped the worker in a step: the runner's own deadline names the hang."""
    plan = load_plan(pod_log[0])
    record = _record(pod_log[1])
    cut = next(i for i, e in enumerate(record["events"]) if '"step": "matmul"' in e[1])
    record["events"] = record["events"][: cut + 1]  # matmul started, never ended
    record["stopped"] = record["events"][-1][0] + 1000.0
    record["exit"] = -9
    report = podlog.report_of(plan, plan.tasks[0], record)
    status = {s.name: s.status for s in report.steps}
    assert status["matmul"] == "hang"
    assert status["transfer-back"] == "skip"


def test_host_files_outside_the_detectors_are_refused(pod_log: tuple[Path, str]) -> None:
    record = _record(pod_log[1])
    for name in ("etc/passwd", "proc/driver/nvidia/gpus/../../../etc/shadow", "/etc/machine-id"):
        bad = {**record, "host": {**record["host"], "files": {name: "x"}}}
        frame = podlog.Frame("l", 0, bad["plan"], bad["nonce"], "0" * 64, bad)
        assert "not a file the detector reads" in str(podlog.record_problem(frame))


def test_the_pod_wrapper_reads_what_the_import_accepts() -> None:
    pod = runpy.run_path(str(templates_dir() / "fleet" / "k8s-pod.py"))
    assert set(pod["FACTS"]) <= set(podlog.HOST_FILES)
    assert set(pod["FOLDERS"]) == set(podlog.HOST_FOLDERS)
    assert pod["GRANT_VARIABLES"] == podlog.GRANT_VARIABLES
    assert (pod["BEGIN"], pod["DATA"], pod["END"], pod["FRAMING"]) == (
        "envforge-report-begin",
        "envforge-report-data",
        "envforge-report-end",
        podlog.FRAMING,
    )
