"""Issue 21 §3: inside a Slurm job or a pod the probe report records the node and the GPUs
the scheduler granted; what is shared (the evidence store, a certificate) drops the node's
name; reports without them load as before."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from envforge.errors import InvalidInput
from envforge.evidence.evidence_store import read_store, record, sanitized_report
from envforge.evidence.records import Redactor, parse_document
from envforge.evidence.summary import report_facts
from envforge.host.grant import node_facts
from envforge.probe.report import ProbeReport, host_info
from tests.helpers.matrix_synth import Spec, make_report
from tests.unit.evidence.test_evidence_store import GPU

JOB = {
    "SLURM_JOB_ID": "41",
    "SLURMD_NODENAME": "gpu-n07",
    "SLURM_JOB_GPUS": "1,3",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "ROCR_VISIBLE_DEVICES": "0,1",
    "HOME": "/home/x",
}


def _on_node(spec: Spec = GPU) -> ProbeReport:
    report = make_report(spec)
    node, grant = node_facts(JOB)
    return replace(report, host=replace(report.host, node=node, granted=grant))


def test_node_facts_inside_a_job_and_nothing_outside() -> None:
    assert node_facts(JOB) == (
        "gpu-n07",
        (
            ("SLURM_JOB_GPUS", "1,3"),
            ("ROCR_VISIBLE_DEVICES", "0,1"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
        ),
    )
    assert node_facts({k: v for k, v in JOB.items() if k != "SLURM_JOB_ID"}) == (None, ())
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NVIDIA_VISIBLE_DEVICES": "GPU-4f2a"}
    node, grant = node_facts(pod)
    assert node  # the pod's host name
    assert grant == (("NVIDIA_VISIBLE_DEVICES", "GPU-4f2a"),)  # as seen, a UUID too


def test_host_info_records_the_node_and_grant_of_the_job(tmp_path: Path) -> None:
    host = host_info(tmp_path, environ=JOB)
    assert host.node == "gpu-n07"
    assert dict(host.granted)["SLURM_JOB_GPUS"] == "1,3"
    outside = host_info(tmp_path, environ={"SLURMD_NODENAME": "gpu-n07"})
    assert (outside.node, outside.granted) == (None, ())
    assert "node" not in outside.to_dict()
    assert "granted" not in outside.to_dict()


def test_the_report_round_trips_node_and_grant_and_shows_them() -> None:
    report = _on_node()
    data = json.loads(report.to_json())
    assert data["host"]["node"] == "gpu-n07"
    assert data["host"]["granted"] == {
        "SLURM_JOB_GPUS": "1,3",
        "ROCR_VISIBLE_DEVICES": "0,1",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert ProbeReport.from_dict(data) == report
    props = {
        p.get("name"): p.get("value") for p in ET.fromstring(report.to_junit()).iter("property")
    }
    assert props["node"] == "gpu-n07"
    assert props["granted"] == (
        "SLURM_JOB_GPUS=1,3, ROCR_VISIBLE_DEVICES=0,1, CUDA_VISIBLE_DEVICES=0,1"
    )
    facts = dict(report_facts(report))
    assert facts["node"] == "gpu-n07"
    assert facts["granted GPUs"].startswith("SLURM_JOB_GPUS=1,3")


def test_a_report_from_before_loads_and_a_bad_grant_is_one_error() -> None:
    old = make_report(GPU).to_dict()
    assert "node" not in old["host"]
    loaded = ProbeReport.from_dict(old)
    assert (loaded.host.node, loaded.host.granted) == (None, ())
    assert loaded.to_dict() == old  # the same JSON: digests over it still hold
    old["host"]["granted"] = "1,3"
    with pytest.raises(InvalidInput, match="granted"):
        ProbeReport.from_dict(old)


def test_what_is_shared_drops_the_node_name_and_keeps_the_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    report = _on_node()
    assert "node" not in report.without_node().to_dict()["host"]
    shared = sanitized_report(report.to_dict(), Redactor(("alice",)))
    assert "node" not in shared["host"]
    assert shared["host"]["granted"]["SLURM_JOB_GPUS"] == "1,3"
    # the run is the same run with or without its node's name: one record
    redact = Redactor(())
    plain = sanitized_report(report.without_node().to_dict(), redact)
    assert parse_document(shared, redact).key == parse_document(plain, redact).key
    # the site's own store keeps the node's name (issue 33 §8: which node to drain)
    record(report.to_dict(), redact=Redactor(()))
    (kept,) = read_store().records
    assert kept.node == "gpu-n07"
    assert kept.key == parse_document(plain, redact).key


def test_what_is_shared_keeps_the_health_facts_and_drops_the_gpu_uuids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    facts = {
        "gpus": [{"index": "0", "uuid": "GPU-7f3e-serial", "ecc_volatile": 0}],
        "tools": {"nvidia-smi": "read"},
    }
    report = replace(_on_node(), health=facts)
    kept = sanitized_report(report.to_dict(), Redactor(()))
    assert kept["health"] == {
        "gpus": [{"index": "0", "ecc_volatile": 0}],
        "tools": {"nvidia-smi": "read"},
    }
    record(report.to_dict(), redact=Redactor(()))
    (home_db,) = (tmp_path / "home").glob("evidence.sqlite")
    stored = home_db.read_bytes()
    assert b"GPU-7f3e-serial" not in stored
    assert b"ecc_volatile" in stored
