"""Reading evidence: recognised forms, deduplication, malformed files, redaction."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envforge.evidence.records import EvidenceError, Redactor, parse_document, read_evidence
from envforge.probe.report import ProbeReport, ReportGpu, ReportHost, StepResult
from envforge.publish.certificate import VenvBinding, issue
from tests.helpers.matrix_synth import Spec, make_certificate, make_report
from tests.helpers.old_certificates import venv_marker

WHEN = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
SPEC = Spec(
    vendor="amd",
    arch="gfx1031",
    product="AMD Radeon RX 6700 XT",
    driver="amdgpu 6.8.0",
    recipe="gfx1031",
    stack="torch2.13.0-rocm7.1-py3.12",
    outcome="pass",
    created=WHEN,
)
QUIET = Redactor(("alice-ws", "alice"))


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def test_a_probe_report_is_read_with_its_host_facts(tmp_path: Path) -> None:
    report = make_report(replace(SPEC, outcome="hang"))
    report.write(tmp_path / "run")
    found = read_evidence([tmp_path], QUIET)
    assert found.problems == ()
    assert found.files == 1  # probe.junit.xml is not read
    (record,) = found.records
    assert record.kind == "probe"
    assert record.recipe == "gfx1031"
    assert record.outcome == "hang"
    assert record.gpu.row_key == "amd:gfx1031"
    assert record.gpu.product == "AMD Radeon RX 6700 XT"
    assert record.driver == "amdgpu 6.8.0"
    assert record.kernel == "Linux 6.8.0-45-generic"
    assert record.runtime == "HIP 7.1.32830"
    assert record.stack == "torch2.13.0-rocm7.1-py3.12"  # derived from the snapshot
    assert record.created == WHEN
    assert record.first_problem is not None
    assert record.first_problem.name == "conv2d"


def test_the_same_run_read_twice_is_one_record_and_the_certificate_wins(tmp_path: Path) -> None:
    report = make_report(SPEC)
    report.write(tmp_path / "report")
    cert = make_certificate(SPEC, report)
    _write(tmp_path / "report" / "certificate.json", cert)
    _write(tmp_path / "store" / (cert["digest"].split(":")[1] + ".json"), cert)
    found = read_evidence([tmp_path / "report", tmp_path / "store", tmp_path], QUIET)
    assert found.problems == ()
    assert found.files == 3  # the folder named again adds no file twice
    assert len(found.records) == 1
    assert found.duplicates == 2
    (record,) = found.records
    assert record.kind == "certificate"
    assert record.certificate == cert["digest"]


def test_different_runs_are_not_merged(tmp_path: Path) -> None:
    make_report(SPEC).write(tmp_path / "a")
    make_report(replace(SPEC, created=WHEN.replace(hour=13))).write(tmp_path / "b")
    found = read_evidence([tmp_path], QUIET)
    assert len(found.records) == 2
    assert found.duplicates == 0


def test_a_venv_certification_marker_from_before_format_3_is_read(tmp_path: Path) -> None:
    report = make_report(
        replace(
            SPEC,
            recipe="cpu",
            vendor="none",
            arch=None,
            product="",
            driver="",
            stack="torch2.13.0-cpu-py3.11",
        )
    )
    marker = {
        "recipe": "cpu",
        "recipe_hash": "sha256:" + "11" * 32,
        "fingerprint": "f",
        "level": "full",
        "report": report.to_dict(),
    }
    _write(tmp_path / ".envforge" / "certified.json", marker)
    (record,) = read_evidence([tmp_path], QUIET).records
    assert record.kind == "venv"
    assert record.recipe == "cpu"
    assert record.gpu.row_key == "none:cpu"
    assert record.runtime == "cpu"


def test_a_venv_certificate_is_a_certificate_and_the_same_run_as_its_old_marker(
    tmp_path: Path,
) -> None:
    report = make_report(replace(SPEC, recipe="cpu", vendor="none", arch=None, product=""))
    cert = issue(
        report=report.to_dict(),
        recipe_name="cpu",
        recipe_hash="sha256:" + "11" * 32,
        stack_tag="torch2.13.0-cpu-py3.11",
        binding=VenvBinding("f", {"torch": "sha256:" + "22" * 32}, 2),
    )
    _write(tmp_path / "venv" / ".envforge" / "certified.json", dict(cert.data))
    _write(tmp_path / "old" / "certified.json", venv_marker(cert.data))
    found = read_evidence([tmp_path], QUIET)
    (record,) = found.records
    assert found.duplicates == 1  # one run: the certificate kept over the old marker
    assert record.kind == "certificate"
    assert record.certificate == cert.digest
    assert record.recipe == "cpu"
    assert record.stack == "torch2.13.0-cpu-py3.11"
    altered = dict(cert.data, status="fail")
    with pytest.raises(EvidenceError, match="altered"):
        parse_document(altered, QUIET)


def test_a_bundle_is_read_line_by_line_and_bad_lines_are_named(tmp_path: Path) -> None:
    a = make_report(SPEC).to_json(indent=None)
    b = json.dumps(make_certificate(replace(SPEC, created=WHEN.replace(day=21))))
    bundle = tmp_path / "evidence.jsonl"
    bundle.write_text(f'{a}\n\n{b}\nnot json\n{{"schema": "other/1"}}\n', encoding="utf-8")
    found = read_evidence([bundle], QUIET)
    assert len(found.records) == 2
    assert [p.source for p in found.problems] == [f"{bundle}:4", f"{bundle}:5"]
    assert "not JSON" in found.problems[0].message
    assert "schema 'other/1'" in found.problems[1].message


def _valid() -> dict[str, Any]:
    return dict(make_report(SPEC).to_dict())


def _altered_certificate() -> dict[str, Any]:
    cert = make_certificate(SPEC)
    cert["status"] = "pass" if cert["status"] == "fail" else "fail"
    return cert


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"name": "package"}', "no 'schema'"),
        ('{"schema": "envforge.lock/9"}', "schema 'envforge.lock/9'"),
        (
            json.dumps({**_valid(), "steps": [{"name": "x", "status": "bogus", "seconds": 1}]}),
            "unknown step status 'bogus'",
        ),
        (json.dumps({**_valid(), "steps": "none"}), "not a probe report"),
        (json.dumps({**_valid(), "host": "alice-ws"}), "key 'host' is not a JSON object"),
        (json.dumps({**_valid(), "host": {"gpus": [7]}}), "not a probe report"),
        (json.dumps({**_valid(), "created": "yesterday"}), "key 'created' is not an ISO 8601"),
        (json.dumps({k: v for k, v in _valid().items() if k != "level"}), "'level'"),
        (json.dumps(_altered_certificate()), "was altered"),
        (json.dumps({**make_certificate(SPEC), "report": []}), "lacks required fields"),
    ],
)
def test_malformed_files_are_problems_not_exceptions(
    tmp_path: Path, content: str, message: str
) -> None:
    make_report(SPEC).write(tmp_path / "good")
    bad = tmp_path / "bad" / "report.json"
    bad.parent.mkdir()
    bad.write_text(content, encoding="utf-8")
    found = read_evidence([tmp_path], QUIET)
    assert len(found.records) == 1
    (problem,) = found.problems
    assert problem.source == str(bad)
    assert message in problem.message
    assert "\n" not in problem.line()


def test_unreadable_and_binary_files_are_problems(tmp_path: Path) -> None:
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "folder.json").mkdir()  # a folder named like a report: walked, holds nothing
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000, encoding="utf-8")
    found = read_evidence([tmp_path], QUIET)
    assert found.records == ()
    messages = {Path(p.source).name: p.message for p in found.problems}
    assert messages["binary.json"] == "not UTF-8 text"
    assert "nested too deeply" in messages["deep.json"] or "not JSON" in messages["deep.json"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = (
    "schema",
    "status",
    "steps",
    "level",
    "recipe",
    "environment",
    "host",
    "envforge_version",
    "created",
    "seconds",
)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(KEYS), value=JSON)
def test_any_damage_to_a_report_is_an_evidence_error(key: str, value: Any) -> None:
    data = _valid()
    data[key] = value
    with contextlib.suppress(EvidenceError):
        parse_document(data, QUIET)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_any_json_is_evidence_or_an_evidence_error(value: Any) -> None:
    with contextlib.suppress(EvidenceError):
        parse_document(value, QUIET)


def test_a_damaged_step_or_gpu_is_an_evidence_error() -> None:
    for key, value in (
        ("steps", [{"name": "a", "status": "pass", "seconds": "slow"}]),
        ("steps", [["a"]]),
        ("host", {"gpus": [{"arch": "gfx1031"}]}),
    ):
        with pytest.raises(EvidenceError):
            parse_document({**_valid(), key: value}, QUIET)


def test_nothing_names_the_host_or_the_user() -> None:
    report = ProbeReport(
        steps=(
            StepResult("env-snapshot", "pass", 0.1, "python /home/alice/venv/bin/python"),
            StepResult(
                "check:mine",
                "crash",
                0.2,
                'File "/Users/alice/checks/mine.py" on alice-ws.lab: '
                "C:\\Users\\alice\\x; alice-wsx stays; alice@alice-ws",
            ),
        ),
        level="full",
        target="/home/alice/.local/share/envforge/venvs/cpu/bin/python",
        host=ReportHost(
            kernel="Linux 6.8.0",
            machine="x86_64",
            gpus=(ReportGpu("AMD Radeon RX 6700 XT", "gfx1031", "amd"),),
            driver="amdgpu 6.8.0",
        ),
        envforge_version="0.1.0",
        created="2026-11-20T12:00:00Z",
        recipe_name="gfx1031",
        snapshot={
            "executable": "/home/alice/venv/bin/python",
            "platform": "on alice-ws",
            "env": {"HOME": "/home/alice"},
            "torch": "2.13.0+rocm7.1",
            "hip": "7.1.1",
            "python": "3.12.4",
        },
    )
    record = parse_document(report.to_dict(), Redactor(("alice-ws", "alice-ws.lab", "alice")))
    text = repr(record)
    assert "/home/~/venv/bin/python" in text
    assert "/Users/~/checks/mine.py" in text
    assert "C:\\\\Users\\\\~\\\\x" in text
    assert "alice-wsx stays" in text  # only whole names are replaced
    for word in ("/home/alice", "alice@", "@alice-ws", "on alice-ws", "Users\\\\alice"):
        assert word not in text, word


def test_this_hosts_redactor_never_replaces_root() -> None:
    assert "root" not in Redactor.for_this_host().names
    assert Redactor(())("the root cause in /root/x") == "the root cause in /root/x"


def test_nvidia_arch_comes_from_the_product_name() -> None:
    spec = replace(
        SPEC,
        vendor="nvidia",
        arch=None,
        product="NVIDIA GeForce RTX 4090",
        driver="nvidia 580.65.06",
        recipe="sm_90",
        stack="torch2.13.0-cu130-py3.12",
    )
    record = parse_document(make_report(spec).to_dict(), QUIET)
    assert record.gpu.row_key == "nvidia:sm_89"
    assert record.runtime == "CUDA 13.0"
    unknown = replace(spec, product="NVIDIA Quantum 9000")
    assert parse_document(make_report(unknown).to_dict(), QUIET).gpu.arch == "unknown"


def test_the_gpu_named_by_the_recipe_is_the_one_counted() -> None:
    data = make_report(SPEC).to_dict()
    data["host"]["gpus"] = [
        {"name": "AMD Radeon Graphics", "arch": "gfx1036", "vendor": "amd"},  # the iGPU
        {"name": "AMD Radeon RX 6700 XT", "arch": "gfx1031", "vendor": "amd"},
    ]
    record = parse_document(data, QUIET)
    assert record.gpu.arch == "gfx1031"
    assert record.gpu_count == 2
    data["recipe"]["name"] = "other"
    assert parse_document(data, QUIET).gpu.arch == "gfx1036"


def test_a_report_without_steps_is_a_fail_and_times_are_utc() -> None:
    data = {**_valid(), "steps": [], "created": "2026-11-20T14:00:00+02:00"}
    record = parse_document(data, QUIET)
    assert record.outcome == "fail"
    assert record.created == WHEN
    assert record.column == "gfx1031"
    data["recipe"] = {"name": None, "hash": None}
    assert parse_document(data, QUIET).column == "torch2.13.0-rocm7.1-py3.12"


def test_a_folder_that_cannot_be_listed_is_a_problem(tmp_path: Path) -> None:
    make_report(SPEC).write(tmp_path / "ok")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as root: permissions are not enforced")
        found = read_evidence([tmp_path], QUIET)
    finally:
        locked.chmod(0o755)
    assert len(found.records) == 1
    assert [(p.source, p.message) for p in found.problems] == [
        (str(locked), "cannot read folder: Permission denied")
    ]
