"""ProbeReport: JSON round trip, JUnit XML, atomic writes, host identity from sysfs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from envforge.errors import InvalidInput
from envforge.knowledge.arch import gfx_from_target_version
from envforge.probe.report import (
    ProbeReport,
    ReportGpu,
    ReportHost,
    StepResult,
    host_info,
    printable,
    summarize,
)


def _report(*steps: StepResult) -> ProbeReport:
    return ProbeReport(
        steps=steps,
        level="full",
        target="python /usr/bin/python3",
        host=ReportHost(
            kernel="Linux 6.1",
            machine="x86_64",
            gpus=(ReportGpu("AMD Radeon RX 5700 XT", "gfx1010", "amd"),),
            driver="amdgpu (in-tree)",
        ),
        envforge_version="0.1.0",
        created="2026-11-22T05:00:00Z",
        seconds=2.5,
        recipe_name="gfx1010",
        recipe_hash="sha256:abc",
        snapshot={"torch": "1.13.1+rocm5.2"},
    )


PASS = StepResult("env-snapshot", "pass", 1.2, "Python 3.10")
HANG = StepResult("conv2d", "hang", 15.0, "no result within the 15s deadline; worker stopped")
SKIP = StepResult("autocast", "skip", 0.0, "skipped: conv2d hung")
CRASH = StepResult("grad-checkpoint", "crash", 0.3, "SIGSEGV: Fatal Python error")
FAIL = StepResult("check:x.py", "fail", 0.1, "ValueError: bad & <worse>")


def test_status_is_pass_only_when_every_step_passed() -> None:
    assert _report(PASS).status == "pass"
    assert _report(PASS, SKIP).status == "fail"
    assert _report().status == "fail"
    assert _report(PASS, HANG, SKIP).first_problem == HANG
    # a skip alone fails the report: it is then the problem named, never a passing step
    assert _report(PASS, SKIP).first_problem == SKIP
    assert _report(PASS).first_problem is None


def test_json_has_the_documented_shape_and_round_trips() -> None:
    report = _report(PASS, HANG, SKIP, CRASH)
    data = json.loads(report.to_json())
    assert data["status"] == "fail"
    assert data["steps"][1] == {
        "name": "conv2d",
        "status": "hang",
        "seconds": 15.0,
        "detail": HANG.detail,
    }
    assert data["steps"][3]["detail"].startswith("SIGSEGV")
    assert data["recipe"] == {"name": "gfx1010", "hash": "sha256:abc"}
    assert data["environment"]["target"] == "python /usr/bin/python3"
    assert data["host"]["gpus"][0]["arch"] == "gfx1010"
    assert data["envforge_version"] == "0.1.0"
    assert data["created"] == "2026-11-22T05:00:00Z"
    assert ProbeReport.from_json(report.to_json()) == report


def test_from_json_refuses_garbage_with_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        ProbeReport.from_json("[1, 2]")
    with pytest.raises(InvalidInput):
        ProbeReport.from_json('{"steps": [{"name": "x", "status": "weird", "seconds": 1}]}')
    with pytest.raises(InvalidInput):
        ProbeReport.from_json("{not json")


def test_junit_has_one_testcase_per_step_with_failure_error_and_skipped() -> None:
    root = ET.fromstring(_report(PASS, HANG, SKIP, CRASH, FAIL).to_junit())
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "5"
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "2", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["env-snapshot", "conv2d", "autocast", "grad-checkpoint", "check:x.py"]
    assert len(list(cases["env-snapshot"])) == 0
    error = cases["conv2d"].find("error")
    assert error is not None
    assert error.get("type") == "hang"
    assert cases["autocast"].find("skipped") is not None
    failure = cases["check:x.py"].find("failure")
    assert failure is not None
    assert failure.get("message") == "ValueError: bad & <worse>"


def test_write_puts_both_files_in_place(tmp_path: Path) -> None:
    report = _report(PASS)
    json_path, junit_path = report.write(tmp_path / "out")
    assert ProbeReport.from_json(json_path.read_text()) == report
    ET.fromstring(junit_path.read_text())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["probe.json", "probe.junit.xml"]


@pytest.mark.parametrize(
    ("value", "arch"),
    [(100100, "gfx1010"), (90010, "gfx90a"), (110000, "gfx1100"), (90006, "gfx906"), (0, None)],
)
def test_gfx_names_from_kfd_target_versions(value: int, arch: str | None) -> None:
    assert gfx_from_target_version(value) == arch


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_host_info_reads_amd_and_nvidia_from_a_fake_tree(tmp_path: Path) -> None:
    _write(tmp_path / "sys/class/drm/card0/device/vendor", "0x1002\n")
    _write(tmp_path / "sys/class/drm/card0/device/product_name", "Radeon RX 5700 XT\n")
    _write(tmp_path / "sys/class/drm/card0-DP-1/device/vendor", "0x1002\n")
    _write(tmp_path / "sys/class/drm/card1/device/vendor", "0x8086\n")
    _write(tmp_path / "sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 8\n")
    _write(
        tmp_path / "sys/class/kfd/kfd/topology/nodes/1/properties",
        "simd_count 80\ngfx_target_version 100100\n",
    )
    _write(
        tmp_path / "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 2024\n",
    )
    _write(
        tmp_path / "proc/driver/nvidia/gpus/0000:01:00.0/information",
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ: 1\n",
    )
    host = host_info(tmp_path)
    assert host.gpus == (
        ReportGpu("Radeon RX 5700 XT", "gfx1010", "amd"),
        ReportGpu("NVIDIA H100 80GB HBM3", None, "nvidia"),
    )
    assert host.driver is not None
    assert host.driver.startswith("nvidia 550.54.14; amdgpu")
    assert host.kernel.startswith("Linux ")


def test_host_info_without_gpus(tmp_path: Path) -> None:
    host = host_info(tmp_path)
    assert host.gpus == ()
    assert host.driver is None


def test_summarize_counts_in_status_order() -> None:
    assert summarize([SKIP, PASS, HANG, PASS]) == "2 pass, 1 hang, 1 skip"


HOSTILE = "bad \udc80 \x1b[31mred\x07 nul\x00 c1\x85 \ufffe tab\t end"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("plain ü 中 text", "plain ü 中 text"),
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("x\udc80y", "x\\udc80y"),
        ("line\nbreak\r", "line\\x0abreak\\x0d"),
        ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
        ("\ufffe\uffff", "\\ufffe\\uffff"),
        ("nbsp\u00a0ok", "nbsp\u00a0ok"),
    ],
)
def test_printable_escapes_controls_and_lone_surrogates(text: str, want: str) -> None:
    assert printable(text) == want
    assert printable(want) == want  # idempotent
    want.encode("utf-8")


def test_junit_is_well_formed_whatever_a_message_holds(tmp_path: Path) -> None:
    hostile = StepResult("check:e\x1bvil.py", "fail", 0.1, HOSTILE)
    report = _report(PASS, hostile, StepResult("after", "skip", 0.0, HOSTILE))
    report = replace(report, target="python /x\x1b/py", snapshot={"odd": "\udc80"})
    json_path, junit_path = report.write(tmp_path)
    root = ET.parse(junit_path).getroot()  # well-formed: parses
    case = root.findall(".//testcase")[1]
    assert case.get("name") == "check:e\\x1bvil.py"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == printable(HOSTILE)
    assert "\\x1b[31mred\\x07" in (failure.text or "")
    assert "\\udc80" in (failure.text or "")
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert data["steps"][1]["detail"] == HOSTILE  # JSON escapes; the text itself survives


def test_what_a_certificate_carries_has_no_node_and_no_gpu_uuid() -> None:
    facts = {
        "gpus": [{"index": "0", "uuid": "GPU-5a1e", "temperature": 31.0}, "odd"],
        "tools": {"nvidia-smi": "read"},
    }
    report = replace(
        _report(StepResult("health", "pass", 0.1, "")),
        health=facts,
        host=ReportHost(kernel="k", machine="m", node="gpu01"),
    )
    carried = report.without_node()
    assert carried.host.node is None
    assert carried.health == {
        "gpus": [{"index": "0", "temperature": 31.0}, "odd"],
        "tools": {"nvidia-smi": "read"},
    }
    assert report.health["gpus"][0]["uuid"] == "GPU-5a1e"  # the local report keeps it
    plain = replace(report, host=ReportHost(kernel="k", machine="m"), health={})
    assert plain.without_node() is plain
