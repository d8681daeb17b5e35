"""Signed probe reports: with a signing key ``probe --report DIR`` also writes
``probe.signed.json`` (the report as the store keeps it, in a DSSE envelope signed with
the site's ed25519 key) and keeps it signed; import, ``matrix --evidence`` and ``fleet
collect`` verify it (an edited one is refused) and count it as signed evidence."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from envforge.cli import main
from envforge.cli.probe import _write_report
from envforge.evidence import evidence_db
from envforge.evidence.evidence_store import read_store, record, signed_report
from envforge.evidence.kinds.signed_probe import FILE_NAME, PAYLOAD_TYPE
from envforge.evidence.records import EvidenceError, Redactor, parse_document, read_evidence
from envforge.fleet import outcome
from envforge.fleet.planning import make_plan
from envforge.probe.report import ProbeReport
from envforge.publish.dsse import Envelope, pae
from envforge.publish.signing import SigningKey, generate, load_signing_key
from envforge.recipe.catalogue import Catalogue
from tests.helpers.matrix_synth import Spec, make_report

QUIET = Redactor(())


def _report(outcome_: str = "pass") -> ProbeReport:
    return make_report(
        Spec(
            vendor="amd",
            arch="gfx1031",
            product="AMD Radeon RX 6700 XT",
            driver="amdgpu 6.8.0",
            recipe="gfx1031",
            stack="torch2.13.0-rocm7.1-py3.12",
            outcome=outcome_,
            created=datetime(2026, 11, 20, tzinfo=timezone.utc),
        )
    )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SigningKey, Path]:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    for name in ("ENVFORGE_TRUSTED_KEYS", "ENVFORGE_REQUIRE_SIGNED", "ENVFORGE_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    key_path, pub = generate(tmp_path / "keys", "site")
    return load_signing_key(key_path), pub


def _edited(doc: dict[str, Any]) -> dict[str, Any]:
    """The report's hang rewritten as a pass on another kernel, the signature kept."""
    payload = json.loads(base64.b64decode(doc["envelope"]["payload"]))
    for step in payload["steps"]:
        step["status"] = "pass"
    payload["status"] = "pass"
    payload["host"]["kernel"] = "6.99.0"
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return {**doc, "envelope": {**doc["envelope"], "payload": base64.b64encode(body).decode()}}


def test_the_report_is_written_and_kept_signed(
    site: tuple[SigningKey, Path], tmp_path: Path
) -> None:
    key, _pub = site
    folder = tmp_path / "report"
    _write_report(_report(), folder, key)
    doc = json.loads((folder / FILE_NAME).read_text())
    envelope = Envelope.from_dict(doc["envelope"])
    assert envelope.payload_type == PAYLOAD_TYPE
    # a real ed25519 signature over the DSSE PAE, by the site's key
    assert key.public.verify(envelope.signatures[0].sig, pae(PAYLOAD_TYPE, envelope.payload))
    signed = json.loads(envelope.payload)
    assert "/home/" not in json.dumps(signed)  # what the store keeps: no interpreter path
    record = parse_document(doc, QUIET, signatures=True)
    assert (record.kind, record.signer) == ("signed-probe", key.public.fingerprint)
    (kept,) = read_store().records
    assert (kept.kind, kept.signer) == ("signed-probe", key.public.fingerprint)
    # the folder is one run: probe.json beside its signed copy is not read again
    found = read_evidence([folder], QUIET, signatures=True)
    assert [r.kind for r in found.records] == ["signed-probe"]


def test_without_a_key_nothing_is_signed(tmp_path: Path, site: Any) -> None:
    folder = tmp_path / "report"
    _write_report(_report(), folder, None)
    assert not (folder / FILE_NAME).exists()
    (kept,) = read_store().records
    assert (kept.kind, kept.signer) == ("probe", "")


def test_an_edited_signed_report_is_refused(
    site: tuple[SigningKey, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, pub = site
    folder = tmp_path / "report"
    _write_report(_report("hang"), folder, key)
    capsys.readouterr()
    doc = json.loads((folder / FILE_NAME).read_text())
    forged = _edited(doc)
    with pytest.raises(EvidenceError, match="does not verify"):
        parse_document(forged, QUIET, signatures=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / FILE_NAME).write_text(json.dumps(forged))
    assert main(["evidence", "import", str(other), "--trust", str(pub)]) == 2
    assert "does not verify" in capsys.readouterr().err


def test_import_require_signed_counts_the_signed_report(
    site: tuple[SigningKey, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, pub = site
    signed, unsigned = tmp_path / "signed", tmp_path / "unsigned"
    _write_report(_report(), signed, key)
    _write_report(_report("hang"), unsigned, None)
    capsys.readouterr()
    args = ["evidence", "import", str(signed), str(unsigned), "--trust", str(pub), "--json"]
    assert main([*args, "--require-signed"]) == 0
    out = json.loads(capsys.readouterr().out)
    added = out["records"] + [{"known": 1}] * out["known"]
    assert len(added) == 1  # the signed run; the unsigned hang not counted
    assert any("not counted" in s for s in out["skipped"])


def test_fleet_collect_reads_a_tasks_signed_report(
    site: tuple[SigningKey, Path], tmp_path: Path
) -> None:
    key, _pub = site
    plan = make_plan(
        "slurm", [("cpu", Catalogue.default({}).load("cpu"))], backend="venv", images=False
    )
    raw = json.loads(_report().to_json())
    raw["recipe"] = {"name": "cpu", "hash": plan.tasks[0].recipe_hash}
    raw["host"] = {**raw["host"], "gpus": [], "fleet": {"plan": plan.id, "task": "0",
                                                         "nonce": plan.nonce}}  # fmt: skip
    out = tmp_path / "plan" / "reports" / "000"
    out.mkdir(parents=True)
    _write_report(ProbeReport.from_dict(raw), out, key)
    (out / "task.json").write_text(json.dumps({"exit": 0, "node": "n1"}))
    (state,) = outcome.states(plan, tmp_path / "plan", {}, QUIET)
    assert (state.state, state.detail) == ("passed", "")
    assert state.source.endswith(FILE_NAME)
    assert state.record is not None
    assert state.record.signer == key.public.fingerprint
    # edited after the task: refused at collect
    (out / FILE_NAME).write_text(json.dumps(_edited(json.loads((out / FILE_NAME).read_text()))))
    (state,) = outcome.states(plan, tmp_path / "plan", {}, QUIET)
    assert state.state == "failed"
    assert "does not verify" in state.detail


def test_a_signed_copy_replaces_an_older_stores_unsigned_row(
    site: tuple[SigningKey, Path], tmp_path: Path
) -> None:
    """A row keeps the rank number its kind had when written; the signed copy of the run
    still replaces a bare probe row an envforge before the signed kinds stored (rank 2)."""
    key, _pub = site
    _write_report(_report(), tmp_path / "unsigned", None)
    with evidence_db.connect(evidence_db.db_path(tmp_path / "home")) as conn:
        conn.execute("UPDATE reports SET rank = 2 WHERE kind = 'probe'")
    record(signed_report(_report().to_dict(), key))
    (kept,) = read_store().records
    assert (kept.kind, kept.signer) == ("signed-probe", key.public.fingerprint)
