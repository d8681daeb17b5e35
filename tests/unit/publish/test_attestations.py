"""Signed in-toto attestations: DSSE (the spec's test vector, securesystemslib's
independent implementation), the predicate against its JSON schema, real ed25519
signatures, and tampering refused (payload, key, subject, schema)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from envforge.backends import docker
from envforge.cli import main
from envforge.cli.attest import _venv_envelope, attest_result
from envforge.container.refs import certified_ref
from envforge.publish import attestation as at
from envforge.publish.attest_verify import check_envelope, check_file, tally
from envforge.publish.dsse import (
    INTOTO_PAYLOAD_TYPE,
    Envelope,
    Signature,
    add_signature,
    b64decode,
    pae,
    sign,
    verified_keys,
)
from envforge.publish.signing import SigningKey, generate, load_signing_key, load_trust
from tests.helpers.recipes import make_recipe
from tests.unit.backends.docker.test_docker_pipeline import FakeProbe, _engine

RECIPE = make_recipe()
HASH = "sha256:" + "ab" * 32
IMAGE = "sha256:" + "cd" * 32


def _keys(folder: Path, name: str = "site") -> tuple[SigningKey, Path, Path]:
    key_path, pub = generate(folder, name)
    return load_signing_key(key_path), key_path, pub


def _report(status: str = "pass", arch: str | None = "gfx1031") -> dict[str, Any]:
    gpus = [{"name": "AMD Radeon RX 6700 XT", "arch": arch, "vendor": "amd"}] if arch else []
    return {
        "status": status,
        "steps": [
            {"name": "import-torch", "status": "pass", "seconds": 1.5, "detail": "/home/alice/x"},
            {"name": "matmul", "status": status, "seconds": 0.25, "detail": ""},
        ],
        "level": "quick",
        "host": {
            "kernel": "6.8.0",
            "machine": "x86_64",
            "gpus": gpus,
            "driver": "6.8.0",
            "id": "f00d" * 8,
            "node": "node-17",
            "granted": {"SLURM_JOB_GPUS": "1"},
        },
        "created": "2026-11-27T23:00:00Z",
    }


def _pred(status: str = "pass", arch: str | None = "gfx1031") -> dict[str, Any]:
    return at.predicate(
        report=_report(status, arch),
        backend="docker",
        recipe={"name": "cpu", "hash": HASH, "stack_tag": "torch2.13.0-cpu-py3.11"},
        stack={"torch": "2.13.0"},
        certificate="sha256:" + "01" * 32,
    )


# --------------------------------------------------------------------------- DSSE


def test_pae_is_the_specs_test_vector_and_its_signature_verifies() -> None:
    """DSSE protocol.md, "Test Vectors": our PAE is byte for byte the one the spec's
    ECDSA P-256 signature was made over."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    message = pae("http://example.com/HelloWorld", b"hello world")
    assert message == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    x = 46950820868899156662930047687818585632848591499744589407958293238635476079160
    y = 5640078356564379163099075877009565129882514886557779369047442380624545832820
    public = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    envelope = Envelope.from_dict(
        {
            "payload": "aGVsbG8gd29ybGQ=",
            "payloadType": "http://example.com/HelloWorld",
            "signatures": [
                {
                    "sig": "A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAajabZKciJTfUiHqJ"
                    "PcIAriEGAHTVeCUjW2JIZA=="
                }
            ],
        }
    )
    raw = envelope.signatures[0].sig
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, pae(envelope.payload_type, envelope.payload), ec.ECDSA(hashes.SHA256()))


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_envelopes_verify_with_securesystemslib(tmp_path: Path) -> None:
    """An independent DSSE implementation agrees on PAE and accepts our signatures."""
    dsse = pytest.importorskip("securesystemslib.dsse")
    from securesystemslib.signer._key import SSlibKey

    key, _, _ = _keys(tmp_path)
    envelope = sign(b'{"a": 1}', key)
    theirs = dsse.Envelope.from_dict(envelope.to_dict())
    assert theirs.pae() == pae(INTOTO_PAYLOAD_TYPE, b'{"a": 1}')
    public = SSlibKey(
        key.public.fingerprint, "ed25519", "ed25519", {"public": key.public.raw.hex()}
    )
    accepted = theirs.verify([public], 1)
    assert list(accepted) == [key.public.fingerprint]


def test_sign_and_verify_with_real_keys_and_refuse_others(tmp_path: Path) -> None:
    key, _, _ = _keys(tmp_path / "a")
    other, _, _ = _keys(tmp_path / "b", "other")
    envelope = sign(b"payload", key)
    assert verified_keys(envelope, [key.public]) == (key.public,)
    assert verified_keys(envelope, [other.public]) == ()
    # changed payload, same signature: refused
    changed = Envelope(envelope.payload_type, b"payload!", envelope.signatures)
    assert verified_keys(changed, [key.public]) == ()
    # another payload type is authenticated too
    retyped = Envelope("text/plain", envelope.payload, envelope.signatures)
    assert verified_keys(retyped, [key.public]) == ()
    # a keyid naming the trusted key on another key's signature grants nothing
    forged = Envelope(
        envelope.payload_type,
        envelope.payload,
        (Signature(key.public.fingerprint, other.sign(b"x")),),
    )
    assert verified_keys(forged, [key.public, other.public]) == ()
    both = add_signature(envelope, other)
    assert set(verified_keys(both, [key.public, other.public])) == {key.public, other.public}


def test_either_base64_alphabet_is_read() -> None:
    data = bytes(range(250, 256)) * 3
    assert b64decode(base64.urlsafe_b64encode(data).decode().rstrip("=")) == data
    assert b64decode(base64.b64encode(data).decode()) == data
    with pytest.raises(ValueError, match="base64"):
        b64decode("***")


# --------------------------------------------------------------------------- predicate


def test_predicate_has_the_test_result_shape_and_redacted_host_facts() -> None:
    pred = _pred()
    assert pred["result"] == "PASSED"
    assert pred["passedTests"] == ["import-torch", "matmul"]
    assert pred["configuration"] == [{"name": "recipe:cpu", "digest": {"sha256": "ab" * 32}}]
    assert pred["steps"][0] == {"name": "import-torch", "status": "pass", "seconds": 1.5}
    assert "node" not in pred["host"]
    assert "granted" not in pred["host"]
    assert "alice" not in json.dumps(pred)  # step details are not carried
    assert _pred("hang")["result"] == "FAILED"
    assert _pred("hang")["failedTests"] == ["matmul"]
    assert _pred("warn")["result"] == "WARNED"
    assert at.schema_problems(pred) == []


def test_host_facts_go_through_the_redactor() -> None:
    from envforge.evidence.redact import Redactor

    host = {"kernel": "6.8.0 #1 SMP alicebox", "gpus": [{"name": "gpu on alicebox"}]}
    facts = at.host_facts(host, Redactor(("alicebox",)))
    assert "alicebox" not in json.dumps(facts)


def _schema_cases() -> list[tuple[str, Any]]:
    good = _pred()
    extra = {**good, "surprise": 1}
    bad_status = {**good, "steps": [{"name": "a", "status": "great", "seconds": 1}]}
    missing = {k: v for k, v in good.items() if k != "host"}
    bad_hash = {**good, "recipe": {**good["recipe"], "hash": "md5:00"}}
    negative = {**good, "steps": [{"name": "a", "status": "pass", "seconds": -1}]}
    wrong_type = {**good, "passedTests": "all"}
    return [
        ("good", good),
        ("extra", extra),
        ("status", bad_status),
        ("missing", missing),
        ("hash", bad_hash),
        ("negative", negative),
        ("type", wrong_type),
        ("venv", {**_pred(arch=None), "backend": "venv", "certificate": None}),
    ]


@pytest.mark.parametrize(("name", "value"), _schema_cases())
def test_the_builtin_check_agrees_with_jsonschema(name: str, value: Any) -> None:
    """The schema file is the one definition: a JSON Schema validator and envforge's own
    reading of it accept and refuse the same predicates."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(at.predicate_schema())
    validator.check_schema(at.predicate_schema())
    theirs = sorted(e.message for e in validator.iter_errors(value))
    ours = at.schema_problems(value)
    assert bool(theirs) == bool(ours), (theirs, ours)
    assert bool(ours) == (name not in ("good", "venv"))


# --------------------------------------------------------------------------- verification


def _signed(
    key: SigningKey, pred: dict[str, Any] | None = None, image: str = IMAGE
) -> dict[str, Any]:
    subject = at.image_subject("envforge/cpu:torch2.13.0-cpu-py3.11", image)
    return at.attest(subject, pred or _pred(), key).to_dict()


def test_a_good_attestation_verifies(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path)
    checked = check_envelope(_signed(key), load_trust([pub]), IMAGE, source="x")
    assert checked.ok, checked.problems
    assert checked.passed
    assert checked.signers == (f"site ({key.public.fingerprint[:23]})",)
    assert checked.archs == ("gfx1031",)
    assert checked.machine == "x86_64"
    statement = json.loads(base64.b64decode(_signed(key)["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"][0]["digest"] == {"sha256": "cd" * 32}


def test_tampering_is_refused(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path / "a")
    other, _, _ = _keys(tmp_path / "b", "other")
    trust = load_trust([pub])
    # the payload changed after signing (a fail rewritten as a pass)
    failed = _signed(key, _pred("hang"))
    statement = json.loads(base64.b64decode(failed["payload"]))
    statement["predicate"] = _pred("pass")
    forged = {**failed, "payload": base64.b64encode(at.canonical(statement)).decode()}
    assert "no signature verifies" in check_envelope(forged, trust, IMAGE, source="x").problems[0]
    # signed by a key not trusted
    untrusted = check_envelope(_signed(other), trust, IMAGE, source="x")
    assert not untrusted.ok
    # about another image
    wrong = check_envelope(_signed(key, image="sha256:" + "ee" * 32), trust, IMAGE, source="x")
    assert any("subject" in p for p in wrong.problems)
    # validly signed but outside the schema
    odd = check_envelope(_signed(key, {**_pred(), "level": "thorough"}), trust, IMAGE, source="x")
    assert any("level" in p for p in odd.problems)
    # not an in-toto payload type
    text = sign(b"{}", key, "text/plain").to_dict()
    assert "payloadType" in check_envelope(text, trust, IMAGE, source="x").problems[0]


def test_tally_counts_hosts_archs_and_passes(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path)
    path = tmp_path / "a.intoto.jsonl"
    for pred in (_pred(), _pred("hang"), _pred(arch=None)):
        at.append(path, Envelope.from_dict(_signed(key, pred)))
    path.write_text(path.read_text() + "\n")  # blank lines are skipped
    checks = check_file(path, load_trust([pub]), IMAGE)
    counts = tally(checks)
    assert (counts.total, counts.verified, counts.passed, counts.failed) == (3, 3, 2, 1)
    assert counts.archs == {"gfx1031": 2, "cpu": 1}
    assert counts.hosts == 1
    assert "3 attestation(s): 3 verified; 2 passed, 1 failed" in counts.line()


# --------------------------------------------------------------------------- Docker and venv


def test_a_signed_docker_build_attests_its_certified_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    key, key_path, pub = _keys(tmp_path / "keys")
    engine = _engine()
    result = docker.build(
        RECIPE, docker.DockerOptions(signer=key), client=engine, prober=FakeProbe("pass")
    )
    out = tmp_path / "out.intoto.jsonl"
    attest_result(result, RECIPE, key_path, out)
    image = engine.images.get(certified_ref(RECIPE.name, RECIPE.stack_tag)).attrs["Id"]
    stored = list((tmp_path / "home" / "attestations").glob("*.intoto.jsonl"))
    assert [p.name for p in stored] == [image.split(":")[1] + ".intoto.jsonl"]
    assert stored[0].read_text() == out.read_text()
    checks = check_file(out, load_trust([pub]), image)
    assert [c.ok for c in checks] == [True]
    assert checks[0].recipe == RECIPE.name
    assert main(["attest", "verify", str(out), "--trust", str(pub), "--subject", image]) == 0
    assert (
        main(["attest", "verify", str(out), "--trust", str(pub), "--subject", "sha256:" + "0" * 64])
        == 1
    )
    assert "REFUSED" in capsys.readouterr().out
    assert main(["attest", "verify", str(out), "--trust", str(pub)]) == 2  # which subject?
    assert main(["attest", "verify", str(out)]) == 2  # no trusted keys


def test_attest_needs_a_signing_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ENVFORGE_SIGNING_KEY", raising=False)
    assert main(["certify", "cpu", "--attest", str(tmp_path / "a.jsonl")]) == 2
    assert "--signing-key" in capsys.readouterr().err


def _fake_venv(root: Path) -> Path:
    """A folder laid out as a certified envforge venv (its files, its markers)."""
    from envforge.backends.venvscan import content_digests

    venv = root / "venv"
    dist = venv / "lib" / "python3.11" / "site-packages" / "demo-1.0.dist-info"
    dist.mkdir(parents=True)
    module = venv / "lib" / "python3.11" / "site-packages" / "demo.py"
    module.write_text("x = 1\n")
    (dist / "METADATA").write_text("Name: demo\nVersion: 1.0\n")
    (dist / "RECORD").write_text(
        "demo.py,,\ndemo-1.0.dist-info/METADATA,,\ndemo-1.0.dist-info/RECORD,,\n"
    )
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    markers = venv / ".envforge"
    markers.mkdir()
    (markers / "build.json").write_text(
        json.dumps({"python": "3.11", "interpreter": "/usr/bin/python3.11"})
    )
    report = {**_report(arch=None), "level": "full"}
    (markers / "certified.json").write_text(
        json.dumps(
            {
                "recipe": RECIPE.name,
                "recipe_hash": RECIPE.hash,
                "level": "full",
                "report": report,
                "content": content_digests(venv),
            }
        )
    )
    return venv


def test_a_venv_attestation_names_its_content_and_a_change_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, _, pub = _keys(tmp_path / "keys")
    venv = _fake_venv(tmp_path)
    _venv_envelope(venv, RECIPE, key)
    _venv_envelope(venv, RECIPE, key)  # certified again: both kept, same content
    assert main(["attest", "verify", str(venv), "--trust", str(pub)]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("pass  ") == 2
    assert "2 attestation(s): 2 verified; 2 passed, 0 failed; 1 host(s)" in captured.err
    (venv / "lib" / "python3.11" / "site-packages" / "demo.py").write_text("x = 2\n")
    assert main(["attest", "verify", str(venv), "--trust", str(pub), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["verified"] == 0
    assert all("subject" in a["problems"][0] for a in data["attestations"])
    # a new certification of the changed content drops the old ones
    _venv_envelope(venv, RECIPE, key)
    assert len(at.read_raw(venv / ".envforge" / at.ATTESTATIONS_NAME)) == 1
    assert main(["attest", "verify", str(venv), "--trust", str(pub)]) == 0


def test_a_signed_venv_build_result_is_attested(tmp_path: Path) -> None:
    from envforge.backends.venv.interpreter import Interpreter
    from envforge.backends.venv.layout import VenvBuildResult

    _key, key_path, pub = _keys(tmp_path / "keys")
    from envforge.probe.report import ProbeReport

    venv = _fake_venv(tmp_path)
    interpreter = Interpreter(path="python", executable="python", version="3.11")
    out = tmp_path / "venv.intoto.jsonl"
    # up to date: nothing was certified now, nothing is signed
    attest_result(
        VenvBuildResult(RECIPE.name, venv, "up-to-date", interpreter, None, 0.1),
        RECIPE,
        key_path,
        out,
    )
    assert not out.exists()
    report = ProbeReport.from_dict({**_report(arch=None), "envforge_version": "t"})
    result = VenvBuildResult(RECIPE.name, venv, "built", interpreter, report, 0.1)
    attest_result(result, RECIPE, key_path, out)
    assert main(["attest", "verify", str(venv), "--trust", str(pub)]) == 0
    statement = json.loads(base64.b64decode(json.loads(out.read_text())["payload"]))
    assert statement["subject"][0]["name"] == f"venv/{RECIPE.name}"
    assert statement["predicate"]["backend"] == "venv"
    assert "certificate" not in statement["predicate"]


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        "text",
        {"payloadType": 1},
        {"payloadType": "t", "payload": "e30=", "signatures": "x"},
        {"payloadType": INTOTO_PAYLOAD_TYPE, "payload": "***", "signatures": [{"sig": "AA=="}]},
        {"payloadType": INTOTO_PAYLOAD_TYPE, "payload": "e30=", "signatures": [{"sig": 5}]},
        {
            "payloadType": INTOTO_PAYLOAD_TYPE,
            "payload": "e30=",
            "signatures": [{"sig": "AA=="}] * 65,
        },
        {
            "payloadType": INTOTO_PAYLOAD_TYPE,
            "payload": base64.b64encode(b"[" * 100000 + b"]" * 100000).decode(),
            "signatures": [{"sig": "AA=="}],
        },
        {
            "payloadType": INTOTO_PAYLOAD_TYPE,
            "payload": base64.b64encode(b"\xff\xfe").decode(),
            "signatures": [{"sig": "AA=="}],
        },
    ],
)
def test_hostile_envelopes_are_refused_in_one_line(raw: Any, tmp_path: Path) -> None:
    _key, _, pub = _keys(tmp_path)
    checked = check_envelope(raw, load_trust([pub]), IMAGE, source="x")
    assert not checked.ok
    assert all("\n" not in p for p in checked.problems)


def test_a_file_that_is_not_envelopes_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _key, _, pub = _keys(tmp_path)
    bad = tmp_path / "bad.intoto.jsonl"
    bad.write_text('{"a": 1}\nnot json\n')
    assert main(["attest", "verify", str(bad), "--trust", str(pub), "--subject", IMAGE]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: not a JSON envelope" in err
    assert len(err.strip().splitlines()) == 1
    assert (
        main(
            [
                "attest",
                "verify",
                str(tmp_path / "none.jsonl"),
                "--trust",
                str(pub),
                "--subject",
                IMAGE,
            ]
        )
        == 2
    )
    assert main(["attest", "verify", str(bad), "--trust", str(pub), "--subject", "md5:1"]) == 2


def test_pae_agrees_with_securesystemslib_for_any_input() -> None:
    dsse = pytest.importorskip("securesystemslib.dsse")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=40), st.binary(max_size=200))
    def agree(kind: str, body: bytes) -> None:
        envelope = dsse.Envelope(body, kind, {})
        assert envelope.pae() == pae(kind, body)

    agree()


def test_attach_needs_a_key_and_registry_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ENVFORGE_SIGNING_KEY", raising=False)
    assert main(["certify", "127.0.0.1:5000/team/cpu:v1", "--attach"]) == 2
    assert "--attach: an attestation is signed" in capsys.readouterr().err
    _key, key_path, _pub = _keys(tmp_path)
    assert main(["certify", "cpu", "--attach", "--signing-key", str(key_path)]) == 2
    assert "--attach cpu: not an image in a registry" in capsys.readouterr().err


def test_the_statement_is_valid_for_the_in_toto_attestation_library(tmp_path: Path) -> None:
    """The in-toto project's own bindings (protobuf, strict about field names) read our
    Statement and its subject and accept them; the predicate's configuration entries are
    valid ResourceDescriptors."""
    statement_mod = pytest.importorskip("in_toto_attestation.v1.statement")
    # no type stubs for either (development-only packages)
    from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
    from in_toto_attestation.v1 import (  # type: ignore[import-untyped,unused-ignore]
        resource_descriptor_pb2,
        statement_pb2,
    )
    from in_toto_attestation.v1.resource_descriptor import (  # type: ignore[import-untyped,unused-ignore]
        ResourceDescriptor,
    )

    key, _, _ = _keys(tmp_path)
    payload = base64.b64decode(_signed(key)["payload"])
    proto = json_format.Parse(payload, statement_pb2.Statement())
    statement_mod.Statement.copy_from_pb(proto).validate()
    assert proto.subject[0].digest["sha256"] == "cd" * 32
    for entry in json.loads(payload)["predicate"]["configuration"]:
        rd = json_format.Parse(json.dumps(entry), resource_descriptor_pb2.ResourceDescriptor())
        ResourceDescriptor.copy_from_pb(rd).validate()


def test_arch_admission_needs_a_trusted_pass_on_that_arch(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path / "a")
    other, _, _ = _keys(tmp_path / "b", "other")
    path = tmp_path / "a.intoto.jsonl"
    at.append(path, Envelope.from_dict(_signed(key, _pred())))  # gfx1031, trusted
    at.append(path, Envelope.from_dict(_signed(key, _pred("hang", "gfx1100"))))
    at.append(path, Envelope.from_dict(_signed(other, _pred(arch="gfx1100"))))  # untrusted
    args = ["attest", "verify", str(path), "--trust", str(pub), "--subject", IMAGE]
    assert main(args) == 1  # one refused
    assert main([*args, "--arch", "gfx1031"]) == 0
    assert main([*args, "--arch", "gfx1100"]) == 1  # a hang and an untrusted pass
    assert main([*args, "--arch", "cpu"]) == 1
