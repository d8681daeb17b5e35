"""A busy GPU is named: the worker's memory step (a stand-in torch), the ``warn`` status in
every output (text, JSON, JUnit, summary, certificate, evidence), the runner naming the
holders with a stand-in nvidia-smi, and ``--require-free`` failing the step."""

from __future__ import annotations

import io
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envforge.backends.base import Options
from envforge.cli import main
from envforge.cli.display import ProbeProgress
from envforge.errors import InvalidInput
from envforge.evidence.records import parse_document
from envforge.evidence.summary import section
from envforge.probe.report import ProbeReport, StepResult, summarize
from envforge.probe.spec import ProbeSpec
from envforge.publish.certificate import issue
from tests.unit.host.test_gpumem import NVIDIA_APPS, NVIDIA_GPUS, fake_tool
from tests.unit.probe.test_probe_runner import HOST, ScriptTarget
from tests.unit.probe.worker.test_probe_worker import _load_worker

W = _load_worker()
GIB = 1 << 30
#: The H200 of issue 26: 0.49 GiB free of 139.80 GiB, another process holding the rest.
H200 = (int(0.49 * GIB), int(139.8 * GIB), 0)


def fake_torch(*devices: tuple[int, int, int], hip: str | None = None, old: bool = False) -> Any:
    """A torch stand-in: per device (free, total, ours) bytes."""
    cuda = SimpleNamespace(
        device_count=lambda: len(devices),
        memory_reserved=lambda i: devices[i][2],
        get_device_properties=lambda i: SimpleNamespace(
            name="NVIDIA H200",
            total_memory=devices[i][1],
            uuid="3f9b5e2c-8a41-6d7e-19f0-2b4c6d8e0a13" if i == 0 else f"uuid-{i}",
        ),
    )
    if not old:
        cuda.mem_get_info = lambda i: devices[i][:2]
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(hip=hip, cuda="13.0"))


def memory(torch: Any, device: str = "cuda", **spec: Any) -> tuple[str, str, Any]:
    ctx = W.Context({"vendor": "nvidia", **spec})
    ctx.torch, ctx.device = torch, device
    status, detail, data = W.call_step(ctx, "memory", W.step_memory)
    return status, detail, data


# --------------------------------------------------------------------------- the worker


def test_memory_held_by_another_process_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3f9b")
    status, detail, data = memory(fake_torch(H200, (80 * GIB, 80 * GIB, 0)))
    assert status == "warn"
    assert detail == (
        "device 0: 0.49 GiB free of 139.80 GiB, 139.31 GiB (99%) held by "
        "other processes; device 1: 80.00 GiB free of 80.00 GiB"
    )
    busy, idle = data["devices"]
    assert (busy["busy"], idle["busy"]) == (True, False)
    assert busy["uuid"] == "3f9b5e2c-8a41-6d7e-19f0-2b4c6d8e0a13"
    assert data["visible"] == {"CUDA_VISIBLE_DEVICES": "GPU-3f9b"}
    assert (data["pid"], data["vendor"]) == (os.getpid(), "nvidia")


def test_memory_the_probe_itself_holds_is_no_warning() -> None:
    status, detail, _ = memory(fake_torch((10 * GIB, 140 * GIB, 128 * GIB)))
    assert (status, detail) == ("pass", "device 0: 10.00 GiB free of 140.00 GiB")
    assert memory(fake_torch((71 * GIB, 140 * GIB, 0)))[0] == "pass"  # under half held
    assert memory(fake_torch((1 * GIB, 140 * GIB, 0), old=True))[0] == "pass"  # torch < 1.10


def test_require_free_fails_the_step_and_keeps_the_data() -> None:
    status, detail, data = memory(fake_torch(H200), require_free=8)
    assert status == "fail"
    assert detail.endswith("held by other processes, below --require-free 8 GiB")
    assert data["devices"][0]["busy"] is True  # the host still names the holders
    assert data["devices"][0]["short"] is True
    assert memory(fake_torch((100 * GIB, 140 * GIB, 0)), require_free=8)[0] == "pass"


def test_require_free_on_the_cpu_compares_available_memory() -> None:
    status, detail, _ = memory(SimpleNamespace(), "cpu", require_free=1 << 20)
    assert status == "fail"
    assert detail.startswith("cpu: ")
    assert detail.endswith("below --require-free 1048576 GiB")
    assert memory(SimpleNamespace(), "cpu")[0] == "pass"


def test_the_spec_carries_require_free_only_when_given() -> None:
    assert "require_free" not in ProbeSpec().worker_dict()
    assert ProbeSpec(require_free=8.5).worker_dict()["require_free"] == 8.5
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInput, match="--require-free must be a positive number"):
            ProbeSpec(require_free=bad)


# --------------------------------------------------------------------------- every output

WARNING = (
    "device 0: 0.49 GiB free of 139.80 GiB, 139.31 GiB (99%) held by other "
    "processes; held by python3 (pid 4242, 137.72 GiB)"
)


def warned_report() -> ProbeReport:
    return ProbeReport(
        steps=(
            StepResult("env-snapshot", "pass", 0.4, "Python 3.12"),
            StepResult("memory", "warn", 0.1, WARNING),
            StepResult("matmul", "pass", 0.2),
        ),
        level="quick",
        target="python /usr/bin/python3",
        host=HOST,
        envforge_version="0",
        created="2026-11-28T10:00:00Z",
        recipe_name="sm_90",
        recipe_hash="abc",
    )


def test_a_warning_passes_and_is_in_the_json_report() -> None:
    report = warned_report()
    assert (report.status, report.passed, report.first_problem) == ("pass", True, None)
    data = report.to_dict()
    assert data["warnings"] == ["memory"]
    assert data["steps"][1]["status"] == "warn"
    assert ProbeReport.from_dict(data).warnings == report.warnings
    assert (
        "warnings"
        not in ProbeReport.from_dict(
            {**data, "warnings": [], "steps": [data["steps"][0]]}
        ).to_dict()
    )
    assert summarize(report.steps) == "2 pass, 1 warn"


def test_a_warning_in_junit_is_a_passing_testcase_with_its_detail() -> None:
    suite = ET.fromstring(warned_report().to_junit()).find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "0")
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["warnings"] == "memory"
    case = next(c for c in suite.findall("testcase") if c.get("name") == "memory")
    assert case.find("failure") is None
    assert case.find("skipped") is None
    assert case.findtext("system-out") == f"warning: {WARNING}"
    assert case.find("properties/property[@name='warning']").get("value") == WARNING  # type: ignore[union-attr]


def test_a_warning_in_the_summary_and_the_text_lines() -> None:
    text = section("envforge probe", warned_report())
    assert text.startswith("### envforge probe: ✅ pass, ⚠️ 1 warning\n")
    assert "| memory | ⚠️ warn | 0.10 |" in text
    assert "**Warning** memory: device 0: 0.49 GiB free" in text
    assert "Failing step" not in text
    out = io.StringIO()
    ProbeProgress(out, tty=False).step_finished(warned_report().steps[1])
    assert "memory" in out.getvalue()
    assert " warn " in out.getvalue()
    assert "held by other processes" in out.getvalue()


def test_a_warning_is_certified_and_recorded() -> None:
    cert = issue(
        report=warned_report().to_dict(),
        recipe_name="sm_90",
        recipe_hash="abc",
        stack_tag="t",
        layers=["sha256:1"],
        config={},
        candidate_id="sha256:2",
        now=0.0,
    )
    assert cert.passed
    assert cert.failing_step is None
    assert cert.data["warnings"] == [f"memory: {WARNING}"]
    record = parse_document(warned_report().to_dict(), lambda s: s)
    assert record.outcome == "pass"
    assert record.first_problem is None
    assert [s.status for s in record.steps] == ["pass", "warn", "pass"]


# --------------------------------------------------------------------------- the runner

BUSY_WORKER = """
emit(event="hello", pid=os.getpid(), python="3", protocol=1)
for step in spec["steps"]:
    emit(event="start", step=step, deadline=5)
    if step == "memory":
        data = {"devices": [{"index": 0, "uuid": "3f9b5e2c-8a41-6d7e-19f0-2b4c6d8e0a13",
                             "busy": True}], "pid": os.getpid(), "vendor": "nvidia",
                "visible": {}}
        emit(event="end", step=step, status="warn", seconds=0.1, data=data,
             detail="device 0: 0.49 GiB free of 139.80 GiB, 139.31 GiB (99%) held by other "
                    "processes")
    else:
        emit(event="end", step=step, status="pass", seconds=0.0, detail="")
emit(event="done")
"""


def test_the_runner_names_who_holds_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(
        tmp_path,
        "nvidia-smi",
        {
            "--query-gpu=index,uuid,memory.used,memory.total": NVIDIA_GPUS,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_memory": NVIDIA_APPS,
        },
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    from envforge.probe.runner import run_probe

    report = run_probe(ProbeSpec(level="quick"), ScriptTarget(BUSY_WORKER), host=HOST)
    step = next(s for s in report.steps if s.name == "memory")
    assert step.status == "warn"
    assert step.detail.endswith(
        "held by other processes; held by python3 (pid 4242, 137.72 GiB), vllm (pid 5151)"
    )
    assert report.passed


# --------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "2e6"])
def test_a_bad_require_free_is_one_line_exit_2(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "--require-free", value]) == 2
    err = capsys.readouterr().err
    assert "--require-free must be a positive number of GiB" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["probe", "build", "certify"])
def test_probe_build_and_certify_take_require_free(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    assert "--require-free GIB" in capsys.readouterr().out


def test_the_backends_carry_require_free_to_their_probe() -> None:
    from envforge.backends.docker.options import docker_options
    from envforge.backends.venv import venv_options

    options = Options(require_free=8.0, extra={"no_certify": True})
    assert venv_options(options).require_free == 8.0
    assert docker_options(options).require_free == 8.0
