"""Issue 31 §1: evidence is read through ``KINDS``: each registered kind recognises its
own documents and no other's, reads them as records of its name, and ranks as listed;
an exported record naming an unregistered kind is refused in one line naming the file,
the key and the fix."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from envforge.evidence.kinds import KINDS, ranks
from envforge.evidence.kinds.attestation import document
from envforge.evidence.kinds.signed_probe import sign_report
from envforge.evidence.records import Redactor, parse_document, read_evidence
from envforge.publish import attestation as at
from envforge.publish.signing import PublicKey, SigningKey
from tests.helpers.matrix_synth import Spec, make_certificate, make_report

SPEC = Spec(
    vendor="none",
    arch=None,
    product="",
    driver="",
    recipe="cpu",
    stack="torch2.13.0-cpu-py3.11",
    outcome="pass",
    created=datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc),
)
QUIET = Redactor(("alice-ws", "alice"))


def _documents() -> dict[str, Mapping[str, Any]]:
    """One document of each shipped kind, all of the same run."""
    report = make_report(SPEC)
    marker = {
        "recipe": "cpu",
        "recipe_hash": "sha256:" + "11" * 32,
        "fingerprint": "f",
        "level": "full",
        "report": report.to_dict(),
    }
    return {
        "certificate": make_certificate(SPEC, report),
        "venv": marker,
        "signed-probe": sign_report(report.to_dict(), _key()),
        "attestation": _attestation(report.to_dict()),
        "probe": json.loads(report.to_json()),
    }


def _key() -> SigningKey:
    private = Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SigningKey(PublicKey(raw), private)


def _attestation(report: Mapping[str, Any]) -> dict[str, Any]:
    """The run's signed attestation (a venv's), with the key that verified it."""
    key = _key()
    pred = at.predicate(
        report=report,
        backend="venv",
        recipe={"name": "cpu", "hash": "sha256:" + "11" * 32, "stack_tag": SPEC.stack},
    )
    envelope = at.attest(at.venv_subject("cpu", "sha256:" + "22" * 32), pred, key)
    return document(envelope.to_dict(), key.public.raw)


def test_every_registered_kind_has_a_document_here() -> None:
    assert sorted(_documents()) == sorted(KINDS)


@pytest.mark.parametrize("name", list(KINDS))
def test_every_registered_kind_reads_its_own_documents_only(name: str) -> None:
    documents = _documents()
    for other, doc in documents.items():
        assert KINDS[name].recognises(doc) == (other == name), (name, other)
    record = KINDS[name].read(documents[name], QUIET, signatures=False, table=None)
    assert record.kind == name
    assert record.recipe == "cpu"
    assert parse_document(documents[name], QUIET) == record  # parse goes through KINDS
    exported = parse_document(json.loads(json.dumps(record.to_export())), QUIET)
    assert exported.kind == name


def test_the_kind_listed_first_wins_a_run_read_twice(tmp_path: Path) -> None:
    assert list(ranks()) == list(KINDS)
    assert sorted(ranks().values()) == list(range(len(KINDS)))
    for name, doc in _documents().items():
        if name == "attestation":  # a predicate is not the report: a run of its own key
            continue
        (tmp_path / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
    found = read_evidence([tmp_path], QUIET)
    assert found.problems == ()
    (record,) = found.records
    assert record.kind == next(iter(KINDS))


def test_an_export_naming_an_unknown_kind_is_refused_naming_file_key_and_fix(
    tmp_path: Path,
) -> None:
    record = parse_document(_documents()["probe"], QUIET)
    bundle = tmp_path / "bundle.jsonl"
    bundle.write_text(json.dumps({**record.to_export(), "kind": "sif"}) + "\n", encoding="utf-8")
    found = read_evidence([bundle], QUIET)
    assert found.records == ()
    (problem,) = found.problems
    line = problem.line()
    assert "\n" not in line
    assert line.startswith(f"{bundle}:1: ")
    assert "'kind'" in line
    assert "'sif'" in line
    for name in KINDS:
        assert name in line
    assert "envforge evidence export" in line  # the fix
