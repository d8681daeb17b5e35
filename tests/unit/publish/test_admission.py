"""Admission by attestation (``pull --trust``, ``shell`` with trusted keys): a digest is
admitted only with a trusted pass on this host's arch, in one line either way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envforge import backends
from envforge.cli import main
from envforge.errors import CertificationFailed
from envforge.publish import admission
from envforge.publish.signing import load_trust
from tests.helpers import paths
from tests.unit.publish.test_attestations import IMAGE, _keys, _pred, _signed


def _file(path: Path, *envelopes: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in envelopes))
    return path


def test_host_archs_are_the_gpus_or_cpu() -> None:
    assert admission.host_archs(["gfx1031", None, "gfx1031"]) == ("gfx1031",)
    assert admission.host_archs([]) == ("cpu",)


def test_a_trusted_pass_on_this_arch_admits_and_names_it(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path)
    raw = [_signed(key, _pred("fail")), _signed(key)]
    checks = admission.check_raw(raw, load_trust([pub]), IMAGE, source="reg/x@d")
    answer = admission.require("reg/x@d", checks, ("gfx1031",))
    assert answer.admitted_by is checks[1]
    line = answer.line()
    assert line.startswith("admitted reg/x@d: trusted pass on gfx1031 by reg/x@d #2")
    assert key.public.fingerprint[:23] in line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("archs", "trusted", "words"),
    [
        (
            ("gfx1100",),
            True,
            "no trusted pass on gfx1100 among 1 attestation(s) (passes on: gfx1031)",
        ),
        (("gfx1031",), False, "none of 1 attestation(s) is signed by a trusted key"),
    ],
)
def test_refusals_say_why_and_the_fix(
    tmp_path: Path, archs: tuple[str, ...], trusted: bool, words: str
) -> None:
    key, _, pub = _keys(tmp_path / "a")
    _other, _, other_pub = _keys(tmp_path / "b", "other")
    checks = admission.check_raw(
        [_signed(key)], load_trust([pub if trusted else other_pub]), IMAGE, source="s"
    )
    with pytest.raises(CertificationFailed) as err:
        admission.require("img", checks, archs)
    assert words in err.value.one_line()
    assert "certify" in (err.value.hint or "")


def test_no_attestation_or_another_subject_refuses(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path)
    with pytest.raises(CertificationFailed, match="no attestation of it"):
        admission.require("img", [], ("cpu",))
    other = "sha256:" + "ee" * 32
    checks = admission.check_raw([_signed(key)], load_trust([pub]), other, source="s")
    assert admission.admit("img", checks, ("gfx1031",)).admitted_by is None


def test_received_keeps_only_verified_ones_and_the_gate_reads_them(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path / "a")
    stranger, _, _ = _keys(tmp_path / "b", "stranger")
    trust = load_trust([pub])
    raw = [_signed(stranger), _signed(key)]
    checks = admission.check_raw(raw, trust, IMAGE, source="s")
    state = tmp_path / "state"
    kept = admission.keep_received(state, IMAGE, raw, checks)
    assert len(kept.read_text().splitlines()) == 1
    said: list[str] = []
    gate = admission.Gate(trust, ("gfx1031",), state, said.append)
    gate(IMAGE, "envforge/cpu:x", ())
    assert len(said) == 1
    assert said[0].startswith("admitted envforge/cpu:x (sha256:cdcdcdcdcdcd)")
    with pytest.raises(CertificationFailed):
        admission.Gate(trust, ("gfx90a",), state, said.append)(IMAGE, "envforge/cpu:x", ())


def test_the_gate_reads_the_backends_own_file(tmp_path: Path) -> None:
    key, _, pub = _keys(tmp_path)
    venv_file = _file(tmp_path / "venv" / "att.intoto.jsonl", _signed(key, _pred(arch=None)))
    said: list[str] = []
    gate = admission.Gate(load_trust([pub]), ("cpu",), tmp_path / "state", said.append)
    gate(IMAGE, "venv", (venv_file,))
    assert "trusted pass on cpu" in said[0]


def test_shell_hands_the_backend_a_gate_only_with_trusted_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _key, _, pub = _keys(tmp_path)
    seen: list[Any] = []

    def fake_shell(backend: Any, recipe: Any, argv: Any, options: Any, **kw: Any) -> int:
        seen.append(options.admit)
        return 0

    monkeypatch.setattr(backends, "shell", fake_shell)
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ENVFORGE_TRUSTED_KEYS", raising=False)
    assert main(["shell", "cpu", "--backend", "venv", "--", "true"]) == 0
    assert seen[-1] is None
    assert main(["shell", "cpu", "--backend", "venv", "--trust", str(pub), "--", "true"]) == 0
    assert isinstance(seen[-1], admission.Gate)
    monkeypatch.setenv("ENVFORGE_TRUSTED_KEYS", str(pub))
    assert main(["shell", "cpu", "--backend", "venv", "--", "true"]) == 0
    assert isinstance(seen[-1], admission.Gate)


def test_keys_pem_is_what_pem_readers_take_and_verifies_our_envelopes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cosign's --key and Kyverno's publicKeys read PEM SubjectPublicKeyInfo; the same
    key must verify our DSSE signature over the PAE."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    from envforge.publish.dsse import Envelope, pae

    key, _, pub = _keys(tmp_path)
    assert main(["keys", "pem", str(pub)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("-----BEGIN PUBLIC KEY-----\n")
    loaded = load_pem_public_key(text.encode())
    assert isinstance(loaded, Ed25519PublicKey)
    envelope = Envelope.from_dict(_signed(key))
    loaded.verify(envelope.signatures[0].sig, pae(envelope.payload_type, envelope.payload))
    # the docs' Kyverno example carries a key in this form
    policy = paths.ROOT / "docs" / "policy" / "kyverno-clusterpolicy.yaml"
    assert "MCowBQYDK2VwAyEA" in policy.read_text()  # the ed25519 SPKI prefix
