"""Certificates: binding to content, tamper detection, the local store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envforge.errors import CertificationFailed
from envforge.publish.certificate import (
    Certificate,
    CertificateStore,
    binding_problems,
    failing_step_of,
    issue,
)

LAYERS = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
CONFIG: dict[str, Any] = {
    "Env": ["PATH=/opt/venv/bin:/usr/bin", "HSA_OVERRIDE_GFX_VERSION=10.3.0"],
    "Entrypoint": None,
    "Cmd": ["bash"],
    "WorkingDir": "",
    "User": "",
}


def _report(status: str = "pass", bad: str | None = None) -> dict[str, Any]:
    steps = [
        {"name": "env-snapshot", "status": "pass", "seconds": 0.1, "detail": ""},
        {"name": "conv2d", "status": bad or "pass", "seconds": 3.0, "detail": "SIGSEGV: boom"},
        {"name": "autocast", "status": "skip" if bad else "pass", "seconds": 0, "detail": ""},
    ]
    return {"schema": "envforge.probe/1", "status": status, "steps": steps, "level": "full"}


def _cert(status: str = "pass", bad: str | None = None, now: float = 1000.0) -> Certificate:
    return issue(
        report=_report(status, bad),
        recipe_name="cpu",
        recipe_hash="sha256:" + "c" * 64,
        stack_tag="torch2.13.0-cpu-py3.11",
        layers=LAYERS,
        config=CONFIG,
        candidate_id="sha256:" + "d" * 64,
        now=now,
    )


def test_issue_round_trips_and_binds_content() -> None:
    cert = _cert()
    again = Certificate.from_json(cert.to_json())
    assert again.digest == cert.digest
    assert again.passed
    assert again.layers == LAYERS
    assert again.stack_tag == "torch2.13.0-cpu-py3.11"
    assert binding_problems(again, LAYERS, CONFIG) == []
    # Pretty and compact forms carry the same certificate.
    assert Certificate.from_json(cert.to_json(compact=False)).digest == cert.digest
    assert "\n" not in cert.to_json()


def test_digest_changes_with_content_and_edits_are_detected() -> None:
    cert = _cert()
    assert _cert(now=2000.0).digest != cert.digest
    data = json.loads(cert.to_json())
    data["status"] = "pass"
    data["binding"]["layers"][0] = "sha256:" + "e" * 64
    with pytest.raises(CertificationFailed, match="altered"):
        Certificate.from_json(json.dumps(data))
    data = json.loads(cert.to_json())
    data["report"]["steps"][1]["status"] = "crash"
    with pytest.raises(CertificationFailed, match="altered"):
        Certificate.from_json(json.dumps(data))


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"schema": "other"}', '{"schema": "envforge.certificate/1"}'],
)
def test_garbage_is_not_a_certificate(text: str) -> None:
    with pytest.raises(CertificationFailed):
        Certificate.from_json(text)


def test_binding_problems_name_the_difference() -> None:
    cert = _cert()
    other = (LAYERS[0], "sha256:" + "f" * 64)
    (problem,) = binding_problems(cert, other, CONFIG)
    assert "content differs from certificate" in problem
    assert "layer 2" in problem
    (problem,) = binding_problems(cert, (*LAYERS, "sha256:" + "0" * 64), CONFIG)
    assert "3 layers" in problem
    changed = dict(CONFIG, Env=["PATH=/usr/bin"])
    (problem,) = binding_problems(cert, LAYERS, changed)
    assert "config differs" in problem
    assert "Env" in problem


def test_failed_certificate_never_binds() -> None:
    cert = _cert("fail", bad="crash")
    assert not cert.passed
    assert cert.failing_step == "conv2d (crash: SIGSEGV: boom)"
    (problem,) = binding_problems(cert, LAYERS, CONFIG)
    assert "failed probe" in problem
    assert "conv2d" in problem


def test_a_report_that_says_fail_is_never_a_pass() -> None:
    # status comes from the report; a report without a pass status is a failure.
    cert = issue(
        report={"steps": []},
        recipe_name="cpu",
        recipe_hash="h",
        stack_tag="s",
        layers=LAYERS,
        config=CONFIG,
        candidate_id="x",
    )
    assert not cert.passed
    assert cert.failing_step == "probe"
    assert failing_step_of({"steps": [{"name": "a", "status": "hang", "detail": ""}]}) == "a (hang)"


def test_store_saves_atomically_and_finds_latest_by_layers(tmp_path: Path) -> None:
    store = CertificateStore(tmp_path / "certs")
    assert store.latest_for(LAYERS) is None
    assert store.all() == []
    first = _cert(now=1000.0)
    later_fail = _cert("fail", bad="hang", now=2000.0)
    path = store.save(first)
    assert path == tmp_path / "certs" / (first.digest.split(":")[1] + ".json")
    store.save(later_fail)
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == sorted(
        [path.name, store.path_for(later_fail.digest).name]
    )  # no temporary files left behind
    loaded = store.load(first.digest)
    assert loaded is not None
    assert loaded.digest == first.digest
    latest = store.latest_for(LAYERS)
    assert latest is not None
    assert latest.digest == later_fail.digest
    assert store.latest_for(("sha256:" + "9" * 64,)) is None
    # A damaged file is ignored, never trusted.
    store.path_for(first.digest).write_text("{}")
    assert store.load(first.digest) is None
    assert [c.digest for c in store.all()] == [later_fail.digest]
