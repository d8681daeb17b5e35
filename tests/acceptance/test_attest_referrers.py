"""Attestations attached to an image digest in a real registry, as OCI referrers through
the referrers tag schema (Debian's docker-registry has no referrers API), and listed by an
independent client (oras-py).

The registry is ``ENVFORGE_TEST_REGISTRY`` when CI exports one, else a docker-registry
this module starts on a free loopback port (and stops); skipped when neither exists.
The image is a small OCI image pushed over the HTTP API (no engine needed).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.publish import attestation as at
from envforge.publish import referrers as rf
from envforge.publish.attest_verify import check_envelope
from envforge.publish.signing import generate, load_signing_key, load_trust
from tests.acceptance.helpers import push_oci_image, put_oci_image


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(addr: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{addr}/v2/", timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("ENVFORGE_TEST_REGISTRY")
    if given:
        yield given
        return
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip(
            "no ENVFORGE_TEST_REGISTRY and no docker-registry (apt-get install docker-registry)"
        )
    folder = tmp_path_factory.mktemp("registry")
    addr = f"127.0.0.1:{_free_port()}"
    (folder / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{folder / 'storage'}\nhttp:\n  addr: {addr}\n"
    )
    proc = subprocess.Popen(
        [binary, "serve", str(folder / "config.yml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if _answers(addr):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"docker-registry did not answer on {addr}")
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _envelope(key: object, image_id: str, status: str, host: str = "ab" * 16) -> bytes:
    report = {
        "steps": [{"name": "import-torch", "status": status, "seconds": 1.0}],
        "level": "quick",
        "created": "2026-11-27T23:00:00Z",
        "host": {"kernel": "6.8.0", "machine": "x86_64", "gpus": [], "id": host},
    }
    pred = at.predicate(
        report=report,
        backend="docker",
        recipe={
            "name": "cpu",
            "hash": "sha256:" + "ab" * 32,
            "stack_tag": "torch2.13.0-cpu-py3.11",
        },
        certificate="sha256:" + "01" * 32,
    )
    envelope = at.attest(at.image_subject("cpu", image_id), pred, key)  # type: ignore[arg-type]
    return at.envelope_line(envelope).strip().encode()


def test_attestations_attach_as_referrers_and_oras_lists_them(
    registry: str, tmp_path: Path
) -> None:
    oras_provider = pytest.importorskip("oras.provider")
    repo = f"envforge-test/attest-{os.getpid()}-{int(time.time())}"
    digest, image_id = push_oci_image(registry, repo)
    key_path, pub = generate(tmp_path / "keys", "site")
    key = load_signing_key(key_path)
    ref = f"{registry}/{repo}@{digest}"

    first = rf.attach(
        ref,
        [_envelope(key, image_id, "pass"), _envelope(key, image_id, "hang")],
        created="2026-11-27T23:00:00Z",
    )
    assert first.via == "tag"  # distribution 2.8: no referrers API
    assert first.tag == "sha256-" + digest.split(":")[1]
    rf.attach(ref, [_envelope(key, image_id, "pass")])  # a second site, later: added
    assert len(rf.referrers(ref)) == 3

    # an independent client finds them through the tag schema
    client = oras_provider.Registry(hostname=registry, insecure=True)
    assert first.tag in client.get_tags(f"{registry}/{repo}")
    index = client.get_manifest(f"{registry}/{repo}:{first.tag}", allowed_media_type=[rf.OCI_INDEX])
    assert index["mediaType"] == rf.OCI_INDEX
    listed = index["manifests"]
    assert len(listed) == 3
    assert {m["artifactType"] for m in listed} == {"application/vnd.in-toto+json"}
    trust = load_trust([pub])
    verdicts = []
    for entry in listed:
        manifest = client.get_manifest(
            f"{registry}/{repo}@{entry['digest']}", allowed_media_type=[rf.OCI_MANIFEST]
        )
        assert manifest["subject"]["digest"] == digest
        assert manifest["artifactType"] == rf.ARTIFACT_TYPE
        layer = manifest["layers"][0]
        assert layer["mediaType"] == rf.ENVELOPE_TYPE
        blob = client.get_blob(f"{registry}/{repo}", layer["digest"])
        checked = check_envelope(json.loads(blob.content), trust, image_id, source="registry")
        assert checked.ok, checked.problems
        verdicts.append(checked.result)
    assert sorted(verdicts) == ["FAILED", "PASSED", "PASSED"]
    # and envforge reads the same back, every blob's digest checked
    assert len(rf.envelopes_of(ref)) == 3
    # attest verify REF: the tag resolved, every attestation of the digest checked
    from envforge.cli import main

    assert main(["attest", "verify", f"{registry}/{repo}:v1", "--trust", str(pub)]) == 0
    _other, other_pub = generate(tmp_path / "other", "other")
    assert main(["attest", "verify", ref, "--trust", str(other_pub)]) == 1


def test_publish_attaches_the_stored_attestations(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``publish`` does after its push: this host's attestations of the image (the
    store's file for its image ID) go to the pushed digest."""
    from envforge.cli.attest import attach_published

    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    repo = f"envforge-test/publish-{os.getpid()}-{int(time.time())}"
    digest, image_id = push_oci_image(registry, repo)
    pinned = f"{registry}/{repo}@{digest}"
    assert attach_published(pinned, image_id) is None  # nothing attested: nothing sent
    key_path, pub = generate(tmp_path / "keys", "site")
    key = load_signing_key(key_path)
    stored = at.store_path(tmp_path / "home" / "attestations", at.image_subject("", image_id))
    stored.parent.mkdir(parents=True)
    stored.write_bytes(_envelope(key, image_id, "pass") + b"\n")
    done = attach_published(pinned, image_id)
    assert done is not None
    assert (done["attached"], done["via"]) == (1, "tag")
    [envelope] = rf.envelopes_of(pinned)
    assert check_envelope(envelope, load_trust([pub]), image_id, source="r").passed
    # with a key, publish names the pushed manifest digest too (cosign-style verifiers
    # compare that one) and signs the statement again
    again = attach_published(pinned, image_id, key)
    assert again is not None
    resigned = [e for e in rf.envelopes_of(pinned) if e != envelope]
    assert len(resigned) == 1
    by_manifest = check_envelope(resigned[0], load_trust([pub]), digest, source="r")
    assert by_manifest.passed, by_manifest.problems
    assert {s.digest for s in by_manifest.subjects} == {image_id, digest}


def test_certify_attach_puts_a_pulled_images_attestation_on_its_digest(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``certify REF --attach``: the image this host probed (on a stand-in engine, whose
    image has the registry image's ID) is attested by that ID and attached to REF's
    digest, which does not change; a REF naming other content gets nothing."""
    from envforge.backends import docker
    from envforge.cli import main
    from envforge.cli.attest import attest_result
    from envforge.errors import InvalidInput
    from tests.helpers.fake_engine import FakeEngine, image_attrs
    from tests.helpers.recipes import make_recipe
    from tests.unit.backends.docker.test_docker_pipeline import FakeProbe

    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    repo = f"envforge-test/attach-{os.getpid()}-{int(time.time())}"
    digest, image_id = push_oci_image(registry, repo)
    engine = FakeEngine()
    engine.images.add(image_attrs(image_id))
    recipe = make_recipe()
    key_path, pub = generate(tmp_path / "keys", "node-7")
    key = load_signing_key(key_path)
    for status in ("pass", "hang"):
        result = docker.certify(
            recipe,
            docker.DockerOptions(signer=key),
            image=image_id,
            client=engine,
            prober=FakeProbe(status),
        )
        attest_result(result, recipe, key_path, None, attach_to=f"{registry}/{repo}:v1")
    assert rf.pinned(f"{registry}/{repo}:v1") == f"{registry}/{repo}@{digest}"  # unchanged
    assert main(["attest", "verify", f"{registry}/{repo}:v1", "--trust", str(pub)]) == 0
    assert len(rf.referrers(f"{registry}/{repo}@{digest}")) == 2
    for envelope in rf.envelopes_of(f"{registry}/{repo}@{digest}"):  # both digests named
        assert check_envelope(envelope, load_trust([pub]), digest, source="r").ok

    # a tag that names another image in the registry: refused, nothing attached
    other = f"envforge-test/other-{os.getpid()}-{int(time.time())}"
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    other_digest = put_oci_image(registry, other, "v2", config, [])
    with pytest.raises(InvalidInput, match="not the one certified here"):
        attest_result(result, recipe, key_path, None, attach_to=f"{registry}/{other}:v2")
    assert rf.referrers(f"{registry}/{other}@{other_digest}") == []
