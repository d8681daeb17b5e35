"""Signed certificates: keys, signatures, trust lists, publish --require-signed, and the
private key never showing up anywhere but its own file."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envforge.backends import docker
from envforge.backends.docker import push as publish
from envforge.cli import main
from envforge.container.refs import CERTIFICATE_LABEL, certified_ref
from envforge.errors import CertificationFailed, InvalidInput, PublishRefused
from envforge.publish.certificate import Certificate, CertificateStore, issue, sign
from envforge.publish.signing import (
    SigningKey,
    TrustList,
    check_signature,
    generate,
    load_signing_key,
    load_trust,
    require_trusted,
    trust_paths,
)
from tests.helpers.fake_engine import FakeEngine, image_attrs
from tests.helpers.recipes import make_recipe
from tests.unit.backends.docker.test_docker_pipeline import CANDIDATE, FakeProbe, _engine

RECIPE = make_recipe()


def _cert() -> Certificate:
    report = {"status": "pass", "steps": [{"name": "a", "status": "pass", "seconds": 0.1}]}
    return issue(
        report=report,
        recipe_name="cpu",
        recipe_hash="sha256:" + "ab" * 32,
        stack_tag="torch2.13.0-cpu-py3.11",
        layers=["sha256:" + "01" * 32],
        config={"Env": ["A=1"]},
        candidate_id="sha256:" + "cd" * 32,
        now=1000.0,
    )


def _keys(folder: Path, name: str = "") -> tuple[SigningKey, Path]:
    key_path, pub_path = generate(folder, name)
    return load_signing_key(key_path), pub_path


def _secrets(key_path: Path) -> list[str]:
    """The private key as it could leak: the PEM body, its base64 lines, the raw seed
    (hex and base64)."""
    pem = key_path.read_text()
    body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
    der = base64.b64decode(body)
    seed = der[-32:]  # PKCS#8 ed25519: the 32-byte seed ends the structure
    return [
        body,
        *[ln for ln in pem.splitlines() if not ln.startswith("-----")],
        seed.hex(),
        base64.b64encode(seed).decode(),
        base64.urlsafe_b64encode(seed).decode(),
    ]


def test_generate_writes_a_private_0600_key_and_never_overwrites(tmp_path: Path) -> None:
    key_path, pub_path = generate(tmp_path / "keys", "CI runner gfx1031")
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert key_path.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    line = pub_path.read_text().strip()
    assert line.startswith("envforge-ed25519 ")
    assert line.endswith(" CI runner gfx1031")
    before = key_path.read_bytes()
    with pytest.raises(InvalidInput, match="already exists"):
        generate(tmp_path / "keys")
    assert key_path.read_bytes() == before
    # Only the public file there is still refused (a pair is never half-replaced).
    other = tmp_path / "other"
    other.mkdir()
    (other / "envforge.pub").write_text("x")
    with pytest.raises(InvalidInput, match="already exists"):
        generate(other)
    assert not (other / "envforge.key").exists()


def test_keys_generate_cli_refuses_existing_keys_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "generate", "-o", str(tmp_path), "--name", "me"]) == 0
    out = capsys.readouterr()
    assert "sha256:" in out.out
    secrets = _secrets(tmp_path / "envforge.key")
    assert not any(s in out.out + out.err for s in secrets)
    assert main(["keys", "generate", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err
    assert len(err.strip().splitlines()) == 1


def test_a_signed_certificate_verifies_and_keeps_its_digest(tmp_path: Path) -> None:
    key, pub = _keys(tmp_path, "alice's runner")
    cert = _cert()
    signed = sign(cert, key)
    assert signed.digest == cert.digest  # the signature is not part of the digest
    assert signed.signed_by == key.public.fingerprint
    # It survives the label round trip and parses.
    again = Certificate.from_json(signed.to_json())
    assert check_signature(again.data).state == "valid"
    trusted = require_trusted(again.data, load_trust([pub]), what="img")
    assert trusted.name == "alice's runner"
    assert cert.signed_by is None
    assert check_signature(cert.data).state == "unsigned"


def test_unsigned_wrong_key_and_tampered_signatures_fail_against_trust(tmp_path: Path) -> None:
    mine, pub = _keys(tmp_path / "mine")
    theirs, _other_pub = _keys(tmp_path / "theirs")
    trust = load_trust([pub])
    with pytest.raises(CertificationFailed, match="not signed"):
        require_trusted(_cert().data, trust, what="img")
    with pytest.raises(CertificationFailed, match="not among the 1 trusted"):
        require_trusted(sign(_cert(), theirs).data, trust, what="img")

    data: dict[str, Any] = json.loads(sign(_cert(), mine).to_json())
    value = bytearray(base64.b64decode(data["signature"]["value"]))
    value[0] ^= 1
    data["signature"]["value"] = base64.b64encode(bytes(value)).decode()
    tampered = Certificate.from_data(data)  # the digest still matches: only the sig changed
    assert check_signature(tampered.data).state == "invalid"
    with pytest.raises(CertificationFailed, match="signature does not match"):
        require_trusted(tampered.data, trust, what="img")

    # Someone else's signature relabelled with my fingerprint: checked with *my* key.
    forged: dict[str, Any] = json.loads(sign(_cert(), theirs).to_json())
    forged["signature"]["key"] = mine.public.fingerprint
    assert check_signature(forged).state == "invalid"
    with pytest.raises(CertificationFailed, match="signature does not match"):
        require_trusted(forged, trust, what="img")

    # Content edited after signing: the digest check refuses it before any signature.
    edited: dict[str, Any] = json.loads(sign(_cert(), mine).to_json())
    edited["status"] = "fail"
    with pytest.raises(CertificationFailed, match="altered"):
        Certificate.from_data(edited)


def test_trust_files_hold_several_named_keys_and_refuse_junk(tmp_path: Path) -> None:
    a, pub_a = _keys(tmp_path / "a", "runner A")
    b, pub_b = _keys(tmp_path / "b", "runner B")
    both = tmp_path / "trusted.pub"
    both.write_text("# the team's keys\n\n" + pub_a.read_text() + "  " + pub_b.read_text())
    trust = load_trust([both])
    assert trust.name_of(a.public.fingerprint) == "runner A"
    assert trust.name_of(b.public.fingerprint) == "runner B"
    bad = tmp_path / "bad.pub"
    bad.write_text("# ok\nssh-ed25519 AAAA me\n")
    with pytest.raises(InvalidInput, match=r"bad.pub:2: not an envforge public key"):
        load_trust([bad])
    short = tmp_path / "short.pub"
    short.write_text("envforge-ed25519 AAAA\n")
    with pytest.raises(InvalidInput, match="not 32 bytes"):
        load_trust([short])
    empty = tmp_path / "empty.pub"
    empty.write_text("# nothing\n")
    with pytest.raises(InvalidInput, match="holds no public key"):
        load_trust([empty])
    with pytest.raises(InvalidInput, match="cannot read"):
        load_trust([tmp_path / "missing.pub"])
    assert not TrustList()


def test_trusted_keys_variable_is_split_on_pathsep(tmp_path: Path) -> None:
    env = {"ENVFORGE_TRUSTED_KEYS": f"{tmp_path}/a.pub{os.pathsep}{tmp_path}/b.pub"}
    assert trust_paths([], env) == [tmp_path / "a.pub", tmp_path / "b.pub"]
    assert trust_paths([tmp_path / "c.pub"], env) == [tmp_path / "c.pub"]
    assert trust_paths([], {}) == []


def test_a_bad_signing_key_is_one_line_that_never_quotes_the_file(tmp_path: Path) -> None:
    not_a_key = tmp_path / "key.pem"
    secret = "-----BEGIN PRIVATE KEY-----\nTOPSECRETBYTES0123456789\n-----END PRIVATE KEY-----\n"
    not_a_key.write_text(secret)
    with pytest.raises(InvalidInput) as info:
        load_signing_key(not_a_key)
    assert "TOPSECRET" not in info.value.one_line()
    assert str(not_a_key) in info.value.one_line()
    with pytest.raises(InvalidInput, match="cannot read"):
        load_signing_key(tmp_path / "missing.key")
    key, _pub = _keys(tmp_path / "k")
    assert repr(key) == f"SigningKey({key.public.fingerprint})"
    assert str(key) == repr(key)


def test_a_signed_build_labels_and_stores_the_signature_but_not_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    key_path, pub = generate(tmp_path / "keys")
    key = load_signing_key(key_path)
    engine = _engine()
    said: list[str] = []
    options = docker.DockerOptions(signer=key, report_dir=tmp_path / "reports", say=said.append)
    result = docker.build(RECIPE, options, client=engine, prober=FakeProbe("pass"))
    assert result.certified
    label = engine.images.get(certified_ref(RECIPE.name, RECIPE.stack_tag)).attrs["Config"][
        "Labels"
    ][CERTIFICATE_LABEL]
    cert = Certificate.from_json(label)
    assert cert.signed_by == key.public.fingerprint
    require_trusted(cert.data, load_trust([pub]), what="label")
    # The store and the report folder hold the signed certificate.
    assert result.certification is not None
    stored = Certificate.from_json(result.certification.outcome.stored_at.read_text())
    assert stored.signed_by == key.public.fingerprint
    everything = [label, "\n".join(said), repr(options), repr(result)]
    for path in [*(tmp_path / "home").rglob("*"), *(tmp_path / "reports").rglob("*")]:
        if path.is_file():
            everything.append(path.read_text())
    for secret in _secrets(key_path):
        assert not any(secret in text for text in everything), "the private key leaked"


def _publishable_engine(cert: Certificate) -> FakeEngine:
    engine = FakeEngine()
    attrs = image_attrs(CANDIDATE, labels={CERTIFICATE_LABEL: cert.to_json()})
    engine.images.add(attrs, certified_ref(RECIPE.name, RECIPE.stack_tag))
    return engine


def test_publish_require_signed_refuses_unsigned_and_invalid_signatures(
    tmp_path: Path,
) -> None:
    from envforge.container.refs import bound_config

    attrs = image_attrs(CANDIDATE)

    base = issue(
        report={"status": "pass", "steps": [{"name": "a", "status": "pass", "seconds": 0.1}]},
        recipe_name=RECIPE.name,
        recipe_hash=RECIPE.hash,
        stack_tag=RECIPE.stack_tag,
        layers=attrs["RootFS"]["Layers"],
        config=bound_config(attrs["Config"]),
        candidate_id=CANDIDATE,
    )
    store = CertificateStore(tmp_path / "store")
    store.save(base)
    engine = _publishable_engine(base)
    publish.publishable(engine, RECIPE, store)  # unsigned is fine without the flag
    with pytest.raises(PublishRefused, match="not signed"):
        publish.publishable(engine, RECIPE, store, require_signed=True)
    key, _pub = _keys(tmp_path / "k")
    signed = sign(base, key)
    publish.publishable(_publishable_engine(signed), RECIPE, store, require_signed=True)
    data: dict[str, Any] = json.loads(signed.to_json())
    data["signature"]["value"] = base64.b64encode(b"\0" * 64).decode()
    broken = Certificate.from_data(data)
    with pytest.raises(PublishRefused, match="signature is not valid"):
        publish.publishable(_publishable_engine(broken), RECIPE, store, require_signed=True)
    assert PublishRefused("x").exit_code == 5


def test_key_material_in_the_variable_is_refused_without_echoing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENVFORGE_SIGNING_KEY set to the key itself (a CI secret pasted into the variable)
    instead of its path: exit 2, and not one line of the key on any output."""
    key_path, _pub = generate(tmp_path / "k")
    monkeypatch.setenv("ENVFORGE_SIGNING_KEY", key_path.read_text())
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    summary = tmp_path / "summary.md"
    code = main(["certify", "cpu", "--summary", str(summary)])
    out = capsys.readouterr()
    assert code == 2
    assert "holds key material, not a path" in out.err
    assert len(out.err.strip().splitlines()) == 1
    texts = [out.out, out.err, summary.read_text()]
    for secret in _secrets(key_path):
        assert not any(secret in text for text in texts)
    # Debug tracebacks do not carry it either.
    assert main(["--debug", "certify", "cpu"]) == 2
    out = capsys.readouterr()
    for secret in _secrets(key_path):
        assert secret not in out.err


def test_the_matrix_reads_signers_and_skips_a_signature_that_does_not_match(
    tmp_path: Path,
) -> None:
    from dataclasses import replace
    from datetime import datetime, timezone

    from envforge.evidence.matrix import aggregate
    from envforge.evidence.records import Redactor, read_evidence
    from tests.helpers.matrix_synth import Spec, make_certificate

    key, pub = _keys(tmp_path / "k", "runner A")
    spec = Spec(
        vendor="none",
        arch=None,
        product="",
        driver="",
        recipe="cpu",
        stack="torch2.13.0-cpu-py3.11",
        outcome="pass",
        created=datetime(2026, 11, 20, tzinfo=timezone.utc),
    )
    good = sign(Certificate.from_data(make_certificate(spec)), key)
    (tmp_path / "good.json").write_text(good.to_json())
    bad: dict[str, Any] = json.loads(
        sign(
            Certificate.from_data(
                make_certificate(replace(spec, created=datetime(2026, 11, 21, tzinfo=timezone.utc)))
            ),
            key,
        ).to_json()
    )
    bad["signature"]["value"] = base64.b64encode(b"\1" * 64).decode()
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    found = read_evidence([tmp_path], Redactor(), signatures=True)
    assert [r.signer for r in found.records] == [key.public.fingerprint]
    assert len(found.problems) == 1
    assert "signature does not match" in found.problems[0].message
    names = {fp: k.name for fp, k in load_trust([pub]).keys.items()}
    data = aggregate(found).to_dict(signers=names)
    (run,) = [r for c in data["cells"] for r in c["runs"]]
    assert (run["signer"], run["signer_name"]) == (key.public.fingerprint, "runner A")
    # Without checking, the claim is read as it stands (show does not check signatures).
    assert len(read_evidence([tmp_path], Redactor()).records) == 2


def test_a_key_readable_by_others_is_used_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envforge.cli.common import load_signer

    key_path, _pub = generate(tmp_path / "k")
    assert load_signer(key_path) is not None
    assert "warning" not in capsys.readouterr().err
    key_path.chmod(0o644)
    assert load_signer(key_path) is not None
    assert "can be read by other users" in capsys.readouterr().err


def test_no_key_loads_no_cryptography() -> None:
    """A probe, build or certify without a signing key runs where cryptography is missing
    (a GPU node's own Python running envforge from source): no key, no import of it."""
    code = (
        "import sys; from envforge.cli.common import load_signer; "
        "assert load_signer(None) is None; "
        "names = ('cryptography', 'envforge.publish'); "
        "print(sorted(m for m in sys.modules if m.startswith(names)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
