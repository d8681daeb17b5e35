"""GPU health facts around the probe (envforge/probe/health.py): the ``health`` step.

Fixtures (tests/unit/fixtures/gpu-health/):
- ``nvidia-h200-query-gpu.csv``, ``nvidia-h200-remapped-rows.csv``: real output of
  ``nvidia-smi`` (driver 580.159.04) on an idle NVIDIA H200, captured for this test with
  exactly :data:`NVIDIA_QUERY` and :data:`NVIDIA_REMAP` (retired pages are ``[N/A]``:
  Hopper remaps rows instead; throttle ``0x1`` is "GPU idle").
- ``amd-smi-metric-mi210.json``: ``amd-smi metric --json`` of an MI210 (ROCm 7 shape,
  ``{"gpu_data": [...]}``) as AMD's device-metrics-exporter documents it; the sections
  it abbreviates (``"usage": {...}``) are left out here.
- ``rocm-smi-temp-power.json``: ``rocm-smi --showtemp --showpower --json`` with the
  keys public scripts read (``Temperature (Sensor edge) (C)``, ``Average Graphics
  Package Power (W)``).
The failing cases below are those real rows with one value changed, said where they are.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from envforge.evidence.genuine import document_problem
from envforge.probe.health import (
    AMD_METRIC,
    NVIDIA_QUERY,
    NVIDIA_REMAP,
    ROCM_METRIC,
    Runner,
    ToolRun,
    health_step,
    parse_amd_smi,
    parse_nvidia,
    parse_rocm_smi,
    read_health,
    tool_run,
)
from envforge.probe.report import ProbeReport, ReportHost
from envforge.probe.runner import LocalPythonTarget, WorkerHandle, run_probe
from envforge.probe.spec import HEALTH_STEP, ProbeSpec
from tests.helpers import paths

FIXTURES = paths.UNIT / "fixtures" / "gpu-health"
H200 = (FIXTURES / "nvidia-h200-query-gpu.csv").read_text()
H200_REMAP = (FIXTURES / "nvidia-h200-remapped-rows.csv").read_text()
MI210 = (FIXTURES / "amd-smi-metric-mi210.json").read_text()
ROCM = (FIXTURES / "rocm-smi-temp-power.json").read_text()


def _runner(answers: Mapping[tuple[str, ...], ToolRun]) -> Runner:
    def run(argv: Sequence[str]) -> ToolRun:
        return answers.get(tuple(argv), ToolRun(tuple(argv), "absent"))

    return run


def test_the_h200s_real_answer_is_healthy() -> None:
    (gpu,) = parse_nvidia(H200, H200_REMAP)
    assert gpu.index == "0"
    assert gpu.uuid == "GPU-ca685dd5-545d-2278-39d6-c22bfa1140e9"
    assert (gpu.ecc_volatile, gpu.ecc_aggregate) == (0, 0)
    assert gpu.retired_pending is None  # [N/A]: not a fact, not a problem
    assert (gpu.remap_pending, gpu.remap_failure, gpu.remap_uncorrectable) == (False, False, 0)
    assert gpu.throttle == 0x1
    assert (gpu.temperature, gpu.power) == (39.0, 81.17)
    assert gpu.problems == ()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ((", 0, 0, [N/A]", ", 2, 2, [N/A]"), "2 uncorrected ECC error(s) since the driver loaded"),
        ((", 0, 0, [N/A]", ", 0, 7, [N/A]"), "7 uncorrected ECC error(s) in its lifetime"),
        (("[N/A], [N/A], 0x", "Yes, 1, 0x"), "pages waiting to be retired"),
        (("0x0000000000000001", "0x0000000000000048"), "hardware slowdown, hardware thermal"),
        (("0x0000000000000001", "0x0000000000000080"), "power brake"),
    ],
)
def test_a_failing_fact_is_named(change: tuple[str, str], problem: str) -> None:
    """The real H200 row with one value changed to what a failing GPU reports."""
    assert change[0] in H200
    (gpu,) = parse_nvidia(H200.replace(*change), H200_REMAP)
    assert len(gpu.problems) == 1
    assert problem in gpu.problems[0]


def test_software_throttles_are_no_problem() -> None:
    """SW power cap (0x4) and idle (0x1) are the normal life of a GPU."""
    (gpu,) = parse_nvidia(H200.replace("0x0000000000000001", "0x0000000000000005"))
    assert gpu.problems == ()


def test_pending_remapped_rows_are_a_problem() -> None:
    (gpu,) = parse_nvidia(H200, H200_REMAP.replace("0, No, No", "1, Yes, No"))
    assert gpu.remap_uncorrectable == 1
    assert gpu.problems == ("rows waiting to be remapped (reset the GPU)",)
    (failed,) = parse_nvidia(H200, H200_REMAP.replace("No, No", "No, Yes"))
    assert failed.problems == ("a row remapping failed",)


def test_amd_smi_metric() -> None:
    (gpu,) = parse_amd_smi(MI210)
    assert (gpu.index, gpu.source, gpu.ecc_aggregate) == ("0", "amd-smi", 0)
    assert (gpu.temperature, gpu.power) == (33.0, 41.0)
    assert gpu.problems == ()
    # ROCm 6 printed the list itself; an uncorrectable error and a throttle are named
    data = json.loads(MI210)["gpu_data"]
    data[0]["ecc"]["total_uncorrectable_count"] = 3
    data[0]["power"]["throttle_status"] = "THROTTLED"
    (bad,) = parse_amd_smi(json.dumps(data))
    assert bad.problems == (
        "3 uncorrected ECC error(s) in its lifetime",
        "throttled: THROTTLED",
    )


def test_rocm_smi() -> None:
    (gpu,) = parse_rocm_smi(ROCM)
    assert (gpu.index, gpu.temperature, gpu.power) == ("0", 52.0, 35.0)


@pytest.mark.parametrize("text", ["", "garbage", "[1, 2", '{"card0": 5}', "0, x, y"])
def test_nonsense_gives_no_gpu(text: str) -> None:
    assert parse_nvidia(text) == []
    assert parse_amd_smi(text) == []
    assert parse_rocm_smi(text) == []


def test_absent_tools_are_facts_not_errors() -> None:
    facts = read_health(_runner({}))
    assert facts.gpus == ()
    assert dict(facts.tools) == {"nvidia-smi": "absent", "amd-smi": "absent", "rocm-smi": "absent"}
    result, _ = health_step(runner=_runner({}))
    assert result.status == "pass"
    assert "nvidia-smi absent" in result.detail


def test_nvidia_first_then_amd_then_rocm() -> None:
    nvidia = {
        NVIDIA_QUERY: ToolRun(NVIDIA_QUERY, "read", H200),
        NVIDIA_REMAP: ToolRun(NVIDIA_REMAP, "read", H200_REMAP),
    }
    assert read_health(_runner(nvidia)).gpus[0].source == "nvidia-smi"
    amd = {AMD_METRIC: ToolRun(AMD_METRIC, "read", MI210)}
    facts = read_health(_runner(amd))
    assert [g.source for g in facts.gpus] == ["amd-smi"]
    assert dict(facts.tools) == {"nvidia-smi": "absent", "amd-smi": "read"}
    rocm = {ROCM_METRIC: ToolRun(ROCM_METRIC, "read", ROCM)}
    assert [g.source for g in read_health(_runner(rocm)).gpus] == ["rocm-smi"]


def test_a_failing_fact_warns_unless_health_is_required() -> None:
    bad = H200.replace(", 0, 0, [N/A]", ", 2, 2, [N/A]")
    answers = {NVIDIA_QUERY: ToolRun(NVIDIA_QUERY, "read", bad)}
    warned, facts = health_step(runner=_runner(answers))
    assert warned.status == "warn"
    assert warned.detail.startswith("GPU 0: 2 uncorrected ECC error(s)")
    assert facts.to_dict()["gpus"][0]["problems"]
    failed, _ = health_step(require=True, runner=_runner(answers))
    assert failed.status == "fail"
    healthy, _ = health_step(
        require=True, runner=_runner({**answers, NVIDIA_QUERY: ToolRun(NVIDIA_QUERY, "read", H200)})
    )
    assert healthy.status == "pass"


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_real_runner_under_a_deadline(tmp_path: Path) -> None:
    """Through envforge.core.proc: absent, failed (exit and the tool's line), timed out."""
    _tool(tmp_path, "nvidia-smi", "echo 'Field \"x\" is not a valid field to query.'; exit 2")
    _tool(tmp_path, "amd-smi", f"exec {shutil.which('sleep')} 30")
    run = tool_run(timeout=0.5, environ={"PATH": str(tmp_path)})
    failed = run(NVIDIA_QUERY)
    assert failed.state == "failed"
    assert failed.why.startswith("exit 2: Field")
    assert run(AMD_METRIC).state == "timed out"
    assert run(ROCM_METRIC).state == "absent"


STAND_IN = """
import json, sys
spec = json.load(open(sys.argv[1]))
def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\\n"); sys.stdout.flush()
emit(event="hello", pid=0, python="3", protocol=1)
for name in spec["steps"]:
    emit(event="start", step=name, deadline=30)
    emit(event="end", step=name, status="pass", seconds=0.01, detail="ok")
emit(event="done")
"""


class _StandIn:
    description = "stand-in worker"

    def start(
        self, worker_source: str, spec_json: str, env: Mapping[str, str]
    ) -> AbstractContextManager[WorkerHandle]:
        del worker_source
        return LocalPythonTarget(python=sys.executable).start(STAND_IN, spec_json, env)


@pytest.mark.parametrize(("require", "status"), [(False, "warn"), (True, "fail")])
def test_the_report_carries_the_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, require: bool, status: str
) -> None:
    """A probe asked for health runs a (stand-in) nvidia-smi on the host after the
    worker: the step warns (fails with require_healthy), the facts are in the report,
    and the report still reads as a genuine run."""
    bad = tmp_path / "bad.csv"
    bad.write_text(H200.replace("0x0000000000000001", "0x0000000000000008"))
    _tool(tmp_path, "nvidia-smi", f'case "$1" in --query-gpu=*) cat {bad};; *) exit 9;; esac')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    spec = ProbeSpec(level="quick", vendor="none", health=not require, require_healthy=require)
    report = run_probe(spec, _StandIn(), host=ReportHost(kernel="Linux", machine="x86_64"))
    step = {s.name: s for s in report.steps}[HEALTH_STEP]
    assert step.status == status
    assert report.status == ("pass" if status == "warn" else "fail")
    data = json.loads(report.to_json())
    assert data["health"]["tools"]["nvidia-smi"] == "read"
    assert data["health"]["gpus"][0]["problems"] == ["throttled: hardware slowdown"]
    assert ProbeReport.from_json(report.to_json()).health == data["health"]
    assert document_problem(data) is None
