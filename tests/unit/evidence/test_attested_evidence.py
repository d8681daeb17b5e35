"""Attestations as evidence: ``evidence import REF`` and ``matrix --from-registry`` read
every signed attestation of a digest (:mod:`envforge.evidence.attested`), verified with
real ed25519 signatures against the trusted keys; signed ones labelled by their key,
others unsigned, altered ones refused, a run counted once.

The registry's HTTP side is the acceptance tier's (tests/acceptance/test_attest_evidence.py,
a real docker-registry); here its three reads (pin, image ID, envelopes) are stood in for.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envforge.cli import main
from envforge.evidence import attested
from envforge.evidence.genuine import document_problem
from envforge.evidence.kinds.attestation import document
from envforge.evidence.records import EvidenceError, parse_document
from envforge.publish import attestation as at
from envforge.publish.signing import SigningKey, generate, load_signing_key, load_trust
from tests.helpers.matrix_synth import Spec, make_certificate

IMAGE = "sha256:" + "cd" * 32
PINNED = "127.0.0.1:5000/team/gfx@sha256:" + "ef" * 32


def _spec(outcome: str = "pass", arch: str = "gfx1031", day: int = 20) -> Spec:
    return Spec(
        vendor="amd",
        arch=arch,
        product="AMD Radeon RX 6700 XT",
        driver="amdgpu 6.8.0",
        recipe="gfx1031",
        stack="torch2.13.0-rocm7.1-py3.12",
        outcome=outcome,
        created=datetime(2026, 11, day, tzinfo=timezone.utc),
    )


def _envelope(key: SigningKey, spec: Spec, subject: str = IMAGE) -> dict[str, Any]:
    cert = make_certificate(spec)
    pred = at.predicate(
        report=cert["report"],
        backend="docker",
        recipe={"name": spec.recipe, "hash": "sha256:" + "ab" * 32, "stack_tag": spec.stack},
        stack={"torch_version": "2.13.0"},
        certificate=cert["digest"],
    )
    envelope = at.attest(at.image_subject("team/gfx", subject), pred, key).to_dict()
    decoded: dict[str, Any] = json.loads(json.dumps(envelope))  # as the registry's blob is
    return decoded


def _forged(raw: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The envelope with its payload edited and the signature kept."""
    payload = base64.b64decode(raw["payload"]).decode().replace(old, new)
    return {**raw, "payload": base64.b64encode(payload.encode()).decode()}


@pytest.fixture
def keys(tmp_path: Path) -> tuple[SigningKey, Path, SigningKey, Path]:
    site_key, site_pub = generate(tmp_path / "site", "site")
    other_key, other_pub = generate(tmp_path / "other", "other")
    return load_signing_key(site_key), site_pub, load_signing_key(other_key), other_pub


def _redact(text: str) -> str:
    return text


# --------------------------------------------------------------------------- the kind


def test_a_trusted_attestation_is_a_record_signed_by_its_key(keys: Any) -> None:
    key, pub, _other, _other_pub = keys
    raw = _envelope(key, _spec())
    why, signer = attested._refusal(raw, load_trust([pub]), IMAGE)
    assert why is None
    assert signer == key.public.raw
    doc = document(raw, signer)
    assert document_problem(doc) is None  # a real run's steps and host facts
    record = parse_document(doc, _redact, signatures=True)
    assert record.kind == "attestation"
    assert record.signer == key.public.fingerprint
    assert (record.outcome, record.gpu.arch, record.recipe) == ("pass", "gfx1031", "gfx1031")
    assert record.stack == "torch2.13.0-rocm7.1-py3.12"
    assert record.certificate.startswith("sha256:")
    # the same statement read again is the same run
    assert parse_document(document(raw, signer), _redact).key == record.key


def test_an_attestation_no_trusted_key_verifies_is_unsigned(keys: Any) -> None:
    key, _pub, _other, other_pub = keys
    raw = _envelope(key, _spec())
    why, signer = attested._refusal(raw, load_trust([other_pub]), IMAGE)
    assert why is None
    assert signer is None
    record = parse_document(document(raw, None), _redact, signatures=True)
    assert record.signer == ""


def test_an_edited_attestation_is_refused_not_relabelled(keys: Any) -> None:
    """A hang rewritten as a pass on another GPU: the trusted key it names does not verify
    it (refused at the registry), and a stored copy fails its own key's check."""
    key, pub, _other, _other_pub = keys
    raw = _envelope(key, _spec("hang"))
    forged = _forged(raw, '"FAILED"', '"PASSED"')
    why, _signer = attested._refusal(forged, load_trust([pub]), IMAGE)
    assert why is not None
    assert "does not verify" in why
    doc = document(forged, key.public.raw)  # as if stored with the key
    with pytest.raises(EvidenceError, match="does not verify"):
        parse_document(doc, _redact, signatures=True)


def test_an_attestation_about_another_image_or_not_ours_is_refused(keys: Any) -> None:
    key, pub, _other, _other_pub = keys
    trust = load_trust([pub])
    why, _ = attested._refusal(_envelope(key, _spec(), "sha256:" + "00" * 32), trust, IMAGE)
    assert why is not None
    assert "subject" in why
    why, _ = attested._refusal({"payloadType": "x", "payload": "", "signatures": []}, trust, IMAGE)
    assert why is not None
    assert "DSSE" in why


def test_a_predicate_no_probe_run_writes_is_refused(keys: Any) -> None:
    key, _pub, _other, _other_pub = keys
    pred = at.predicate(
        report={
            "steps": [{"name": "matmul", "status": "pass", "seconds": 0.1}],
            "level": "quick",
            "host": {"kernel": "6.8", "machine": "x86_64", "gpus": []},
            "created": "2026-11-20T00:00:00Z",
        },
        backend="docker",
        recipe={"name": "cpu", "hash": "sha256:" + "ab" * 32, "stack_tag": "t"},
    )
    raw = at.attest(at.image_subject("x", IMAGE), pred, key).to_dict()
    assert document_problem(document(raw, key.public.raw)) is not None


def test_the_certificate_and_its_attestation_count_once(keys: Any) -> None:
    key, _pub, _other, _other_pub = keys
    raw = _envelope(key, _spec())
    cert = (
        "label",
        {"digest": json.loads(base64.b64decode(raw["payload"]))["predicate"]["certificate"]},
    )
    signed = ("#1", document(raw, key.public.raw))
    unsigned = ("#1", document(raw, None))
    other = ("#2", document(_envelope(key, _spec(day=21)), None))
    assert attested.without_same_run(cert, [signed, other]) == [other, signed]
    assert attested.without_same_run(cert, [unsigned, other]) == [cert, other]
    assert attested.without_same_run(None, [unsigned]) == [unsigned]


# --------------------------------------------------------------------------- commands


@pytest.fixture
def registry(
    keys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, list[dict[str, Any]]]:
    """An image whose digest has four attestations: a pass signed by the site (attached
    twice), a pass on gfx1100 signed by another key, and a hang signed by the site; its
    config carries no certificate label. Returns the site's public key and the list."""
    key, pub, other, _other_pub = keys
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    for name in ("ENVFORGE_TRUSTED_KEYS", "ENVFORGE_REQUIRE_SIGNED"):
        monkeypatch.delenv(name, raising=False)
    good = _envelope(key, _spec())
    listed = [
        good,
        good,
        _envelope(other, _spec(arch="gfx1100", day=21)),
        _envelope(key, _spec("hang", day=22)),
    ]
    monkeypatch.setattr("envforge.cli.evidence.image_labels", lambda ref, **_: {})
    monkeypatch.setattr(attested, "pinned", lambda ref, **_: PINNED)
    monkeypatch.setattr(attested, "remote_image", lambda ref, **_: SimpleNamespace(id=IMAGE))
    monkeypatch.setattr(attested, "envelopes_of", lambda ref, **_: listed)
    return pub, listed


def test_import_ref_adds_each_attestation_once_labelled(
    registry: tuple[Path, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    pub, _ = registry
    ref = "127.0.0.1:5000/team/gfx:v1"
    assert main(["evidence", "import", ref, "--trust", str(pub), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == 3  # the pass attached twice is one run
    labels = sorted(r["signed"] for r in out["records"])
    assert labels[0].startswith("signed by site")
    assert labels[1].startswith("signed by site")
    assert labels[2] == "unsigned"  # the other key is not trusted here
    assert {r["outcome"] for r in out["records"]} == {"pass", "hang"}
    assert main(["evidence", "import", ref, "--trust", str(pub), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["added"], again["known"]) == (0, 3)


def test_import_ref_require_signed_skips_the_unsigned(
    registry: tuple[Path, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    pub, _ = registry
    ref = "127.0.0.1:5000/team/gfx:v1"
    code = main(["evidence", "import", ref, "--trust", str(pub), "--require-signed", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == 2
    assert any("not counted" in s for s in out["skipped"])


def test_an_edited_attestation_in_the_registry_is_skipped_named(
    registry: tuple[Path, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    pub, listed = registry
    listed[3] = _forged(listed[3], '"FAILED"', '"PASSED"')
    assert main(["evidence", "import", "127.0.0.1:5000/team/gfx:v1", "--trust", str(pub)]) == 0
    err = capsys.readouterr().err
    assert f"{PINNED} #4: attestation refused" in err


def test_matrix_from_registry_counts_trusted_passes(
    registry: tuple[Path, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pub, _ = registry
    refs = tmp_path / "images.txt"
    refs.write_text("# published images\n127.0.0.1:5000/team/gfx:v1  # gfx\n")
    out = tmp_path / "site"
    args = ["matrix", "--from-registry", str(refs), "-o", str(out), "--trust", str(pub)]
    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["reports"], summary["duplicates"]) == (3, 1)
    cells = json.loads((out / "matrix.json").read_text())
    assert "gfx1100" in json.dumps(cells)  # counted, labelled unsigned
    assert main([*args, "--require-signed", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"] == 2
    assert "gfx1100" not in (out / "matrix.json").read_text()
    assert not (tmp_path / "home" / "evidence.sqlite").exists()  # nothing stored


def test_matrix_from_registry_with_no_ref_is_one_line(
    registry: tuple[Path, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "none.txt"
    empty.write_text("# nothing yet\n")
    assert main(["matrix", "--from-registry", str(empty), "-o", str(tmp_path / "s")]) == 2
    assert "no image reference" in capsys.readouterr().err
