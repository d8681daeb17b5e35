"""``pull --trust``'s admission against a real registry (Debian's docker-registry): the
attestations attached to the pulled digest, checked with real ed25519 keys against the
image's config digest and this host's arch; the verified ones kept for ``shell``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from envforge.cli.registry import _admission
from envforge.errors import CertificationFailed
from envforge.host.detect import detect
from envforge.publish import admission
from envforge.publish import referrers as rf
from envforge.publish.signing import generate, load_signing_key, load_trust
from tests.acceptance.helpers import push_oci_image
from tests.acceptance.test_attest_referrers import _envelope, registry

__all__ = ["registry"]  # the fixture


def test_pull_admission_reads_the_registry_and_keeps_what_it_verified(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if any(g.arch for g in detect().gpus):
        pytest.skip("the envelopes here record a CPU host; this host has a GPU")
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    repo = f"envforge-test/admit-{os.getpid()}-{int(time.time())}"
    digest, image_id = push_oci_image(registry, repo)
    key_path, pub = generate(tmp_path / "keys", "site")
    stranger_path, stranger_pub = generate(tmp_path / "stranger", "stranger")
    key, stranger = load_signing_key(key_path), load_signing_key(stranger_path)
    ref = f"{registry}/{repo}:v1"

    with pytest.raises(CertificationFailed, match="no attestation of it"):
        _admission(ref, image_id, load_trust([pub]), 30)
    rf.attach(f"{registry}/{repo}@{digest}", [_envelope(stranger, image_id, "pass")])
    with pytest.raises(CertificationFailed, match="signed by a trusted key"):
        _admission(ref, image_id, load_trust([pub]), 30)
    rf.attach(
        f"{registry}/{repo}@{digest}",
        [_envelope(key, image_id, "hang"), _envelope(key, image_id, "pass")],
    )
    answer = _admission(ref, image_id, load_trust([pub]), 30)
    assert answer.admitted_by is not None
    assert answer.admitted_by.passed
    assert answer.line().startswith(f"admitted {registry}/{repo}@{digest}: trusted pass on cpu")
    kept = admission.own_files(tmp_path / "home", image_id)[1]
    assert len(kept.read_text().splitlines()) == 2  # the stranger's is not kept
    # shell's gate reads them back with no registry
    said: list[str] = []
    admission.Gate(load_trust([pub]), ("cpu",), tmp_path / "home", said.append)(
        image_id, "envforge/cpu:x", ()
    )
    assert said[0].startswith("admitted envforge/cpu:x")
    # another site's key only: refused, the stranger's pass counts for nothing
    stranger_only = _admission(ref, image_id, load_trust([stranger_pub]), 30)
    assert stranger_only.admitted_by is not None  # the stranger's own pass, for its trust
    assert stranger.public.fingerprint[:23] in stranger_only.line()
