"""A registry's attestations as evidence, against a real registry: ``evidence import REF``
imports every attestation attached to the digest (the referrers tag schema on Debian's
docker-registry), each signature checked against the trusted keys, a run counted once;
``matrix --from-registry`` builds the certified-on matrix from them.

The registry is ``ENVFORGE_TEST_REGISTRY`` when CI exports one, else a docker-registry
started on a free loopback port (the fixture of test_attest_referrers.py); the images are
pushed over the HTTP API (no engine needed) and the signatures are real ed25519 ones.
"""

from __future__ import annotations

import base64
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from envforge.cli import main
from envforge.container.refs import CERTIFICATE_LABEL
from envforge.publish import attestation as at
from envforge.publish import referrers as rf
from envforge.publish.signing import SigningKey, generate, load_signing_key
from tests.acceptance.helpers import push_oci_image
from tests.acceptance.test_attest_referrers import registry  # noqa: F401 - the fixture
from tests.helpers.matrix_synth import Spec, make_certificate


def _spec(outcome: str = "pass", arch: str = "gfx1031", day: int = 20) -> Spec:
    return Spec(
        vendor="amd",
        arch=arch,
        product="AMD Radeon RX 6700 XT" if arch == "gfx1031" else "AMD Radeon RX 7900 XTX",
        driver="amdgpu 6.8.0",
        recipe="gfx1031",
        stack="torch2.13.0-rocm7.1-py3.12",
        outcome=outcome,
        created=datetime(2026, 11, day, tzinfo=timezone.utc),
    )


def _attestation(key: SigningKey, cert: dict[str, Any], image_id: str) -> bytes:
    pred = at.predicate(
        report=cert["report"],
        backend="docker",
        recipe={
            "name": "gfx1031",
            "hash": "sha256:" + "ab" * 32,
            "stack_tag": "torch2.13.0-rocm7.1-py3.12",
        },
        stack={"torch_version": "2.13.0"},
        certificate=cert["digest"],
    )
    envelope = at.attest(at.image_subject("team/gfx", image_id), pred, key)
    return at.envelope_line(envelope).strip().encode()


def _edited(envelope: bytes) -> bytes:
    """A hang rewritten as a pass, the signature kept."""
    raw = json.loads(envelope)
    payload = base64.b64decode(raw["payload"]).decode().replace('"FAILED"', '"PASSED"')
    raw["payload"] = base64.b64encode(payload.encode()).decode()
    return json.dumps(raw).encode()


@pytest.fixture
def published(
    registry: str,  # noqa: F811 - the imported fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[str], Path]:
    """Two images in the registry. The first carries a certificate label (a pass on
    gfx1031) and, attached to its digest: that run's attestation signed by the site
    (twice), a pass on gfx1100 signed by another site's key, and a hang signed by the
    site then edited into a pass. The second: one signed pass, no label. Returns both
    refs (by tag) and the site's public key."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    for name in ("ENVFORGE_TRUSTED_KEYS", "ENVFORGE_REQUIRE_SIGNED", "ENVFORGE_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    site_path, site_pub = generate(tmp_path / "site", "site")
    other_path, _ = generate(tmp_path / "other", "other")
    site, other = load_signing_key(site_path), load_signing_key(other_path)
    stamp = f"{os.getpid()}-{int(time.time() * 1000)}"
    cert = make_certificate(_spec())
    first = f"envforge-test/evidence-a-{stamp}"
    digest, image_id = push_oci_image(registry, first, {CERTIFICATE_LABEL: json.dumps(cert)})
    same_run = _attestation(site, cert, image_id)
    rf.attach(
        f"{registry}/{first}@{digest}",
        [
            same_run,
            _attestation(other, make_certificate(_spec(arch="gfx1100", day=21)), image_id),
            _edited(_attestation(site, make_certificate(_spec("hang", day=22)), image_id)),
        ],
    )
    rf.attach(f"{registry}/{first}@{digest}", [same_run])  # attached again, by another host
    second = f"envforge-test/evidence-b-{stamp}"
    digest2, image_id2 = push_oci_image(registry, second, {})
    rf.attach(
        f"{registry}/{second}@{digest2}",
        [_attestation(site, make_certificate(_spec(day=23)), image_id2)],
    )
    return [f"{registry}/{first}:v1", f"{registry}/{second}:v1"], site_pub


def test_import_ref_imports_every_attestation_of_the_digest(
    published: tuple[list[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (first, _second), pub = published
    assert main(["evidence", "import", first, "--trust", str(pub), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the labelled run and its attestation (attached twice) once, the gfx1100 pass; the
    # edited hang refused, named
    assert out["added"] == 2
    by_arch = {r["gpu"]["arch"]: r for r in out["records"]}
    assert by_arch["gfx1031"]["kind"] == "attestation"
    assert by_arch["gfx1031"]["signed"].startswith("signed by site")
    assert by_arch["gfx1100"]["signed"] == "unsigned"  # not a key trusted here
    assert any("attestation refused" in s and "does not verify" in s for s in out["skipped"])
    code = main(["evidence", "import", first, "--trust", str(pub), "--require-signed", "--json"])
    assert code == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["added"], again["known"]) == (0, 1)  # the unsigned one not counted


def test_matrix_from_registry_is_built_from_the_attestations(
    published: tuple[list[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs, pub = published
    listing = tmp_path / "images.txt"
    listing.write_text("".join(f"{r}\n" for r in refs))
    site = tmp_path / "site"
    args = ["matrix", "--from-registry", str(listing), "-o", str(site), "--trust", str(pub)]
    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"] == 3  # a's two runs (one attached twice), b's one
    assert "gfx1100" in (site / "matrix.json").read_text()
    assert main([*args, "--require-signed", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"] == 2
    assert "gfx1100" not in (site / "matrix.json").read_text()
