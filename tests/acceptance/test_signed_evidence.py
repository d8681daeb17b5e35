"""Signed certificates and registry evidence on the real engine and the real local registry.

A signed ``build cpu`` (stand-in base, local wheel folder, as test_docker_publish.py) ->
``publish --require-signed`` -> ``verify --trust`` passes; another key's trust list is exit
1; the private key appears in no output, label, report, store file, summary, nor in the
image's config and layers (``docker save``). ``evidence import REF`` reads the certificate
label from the registry's HTTP API through a recording forwarder in front of the real
registry: manifests and the config blob only, never a layer.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envforge.backends.docker.client import EngineClient
from envforge.core.proc import Completed
from tests.helpers.httpserver import Handler, serving

from .helpers import (
    BUILD_TIMEOUT,
    Built,
    Envforge,
    build_args,
    cert_label,
    parse_json,
)

pytestmark = pytest.mark.engine

NAMESPACE = "envforge-test-signed"


@dataclass(frozen=True)
class Keys:
    key: Path
    pub: Path
    other_pub: Path
    fingerprint: str

    def secrets(self) -> list[str]:
        """The private key as it could leak: PEM body lines, the seed in hex and base64."""
        lines = [ln for ln in self.key.read_text().splitlines() if not ln.startswith("-----")]
        seed = base64.b64decode("".join(lines))[-32:]
        return [
            *lines,
            seed.hex(),
            base64.b64encode(seed).decode().rstrip("="),
            base64.urlsafe_b64encode(seed).decode().rstrip("="),
        ]


@pytest.fixture(scope="module")
def keys(envforge: Envforge, tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("keys")
    made = envforge("keys", "generate", "-o", str(folder / "mine"), "--name", "CI runner", "--json")
    assert made.returncode == 0, made.stderr
    other = envforge("keys", "generate", "-o", str(folder / "other"))
    assert other.returncode == 0, other.stderr
    data = parse_json(made)
    return Keys(
        Path(data["private"]),
        Path(data["public"]),
        folder / "other" / "envforge.pub",
        data["fingerprint"],
    )


def test_publish_require_signed_refuses_the_unsigned_certificate(
    built_cpu: Built, envforge: Envforge, registry: str, client: EngineClient
) -> None:
    if cert_label(client, built_cpu.data["tags"][0]).get("signature"):
        pytest.skip("the certified cpu image is signed already (another module signed it)")
    done = envforge("publish", "cpu", "--registry", f"{registry}/{NAMESPACE}", "--require-signed")
    assert done.returncode == 5, done.stderr
    assert "not signed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@dataclass(frozen=True)
class Signed:
    build: Completed
    data: dict[str, Any]
    report: Path
    summary: Path


@pytest.fixture(scope="module")
def signed(  # noqa: PLR0917 - pytest fixtures
    built_cpu: Built,
    envforge: Envforge,
    keys: Keys,
    standin: str,
    wheelhouse: Path,
    ca_bundle: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Signed:
    """``build cpu`` again (cached layers), signed through ENVFORGE_SIGNING_KEY."""
    folder = tmp_path_factory.mktemp("signed-build")
    summary = folder / "summary.md"
    done = envforge(
        *build_args(
            "cpu",
            standin,
            wheelhouse,
            ca_bundle,
            "--report",
            str(folder / "report"),
            "--summary",
            str(summary),
            "--json",
            "--attest",
            str(folder / "build.intoto.jsonl"),
        ),
        timeout=BUILD_TIMEOUT,
        extra_env={"ENVFORGE_SIGNING_KEY": str(keys.key)},
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return Signed(done, parse_json(done), folder / "report", summary)


def test_signed_build_publish_require_signed_and_verify_trust(
    signed: Signed, keys: Keys, envforge: Envforge, registry: str, client: EngineClient
) -> None:
    label = cert_label(client, signed.data["tags"][0])
    assert label["signature"]["key"] == keys.fingerprint
    assert "signed by" in signed.summary.read_text()
    assert signed.summary.read_text().startswith("### envforge build cpu: ✅ pass")

    pushed = envforge(
        "publish", "cpu", "--registry", f"{registry}/{NAMESPACE}", "--require-signed", "--json"
    )
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    data = parse_json(pushed)
    assert data["signed_by"] == keys.fingerprint
    pinned = data["pinned"]

    # The build's signed attestation went with the push, as a referrer of the digest
    # (the tag schema: the CI's docker-registry has no referrers API).
    assert data["attestations"]["attached"] >= 1
    assert data["attestations"]["via"] == "tag"
    attested = envforge("attest", "verify", pinned, "--trust", str(keys.pub))
    assert attested.returncode == 0, attested.stderr
    assert " 0 failed" in attested.stderr
    refused = envforge("attest", "verify", pinned, "--trust", str(keys.other_pub))
    assert refused.returncode == 1
    local = envforge(
        "attest",
        "verify",
        str(signed.report.parent / "build.intoto.jsonl"),
        "--trust",
        str(keys.pub),
        "--image",
        signed.data["tags"][0],
    )
    assert local.returncode == 0, local.stderr

    trusted = envforge("verify", pinned, "--trust", str(keys.pub))
    assert trusted.returncode == 0, trusted.stderr
    assert "signed by CI runner" in trusted.stdout
    assert "(trusted)" in trusted.stdout

    wrong = envforge("verify", pinned, "--trust", str(keys.other_pub))
    assert wrong.returncode == 1
    assert "not among the 1 trusted key(s)" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1

    by_env = envforge(
        "verify", pinned, "--no-pull", extra_env={"ENVFORGE_TRUSTED_KEYS": str(keys.other_pub)}
    )
    assert by_env.returncode == 1
    assert "not among" in by_env.stderr

    untrusted = envforge("verify", pinned, "--no-pull", extra_env={"ENVFORGE_TRUSTED_KEYS": ""})
    assert untrusted.returncode == 0, untrusted.stderr
    assert "not checked" in untrusted.stdout
    assert keys.fingerprint[:23] in untrusted.stdout

    # The matrix names the signer from the trust file.
    site = signed.report.parent / "site"
    drawn = envforge("matrix", "-o", str(site), "--trust", str(keys.pub))
    assert drawn.returncode == 0, drawn.stderr
    runs = [r for c in json.loads((site / "matrix.json").read_text())["cells"] for r in c["runs"]]
    mine = [r for r in runs if r["signer"] == keys.fingerprint]
    assert mine
    assert all(r["signer_name"] == "CI runner" for r in mine)

    leaks = _texts(
        signed,
        [pushed, attested, trusted, wrong, by_env, untrusted, drawn],
        envforge.home,
        site,
        json.dumps(label),
    )
    for secret in keys.secrets():
        found = [where for where, text in leaks if secret in text]
        assert not found, f"the private key appears in {found}"


def _texts(
    signed: Signed, runs: list[Completed], home: Path, site: Path, label: str
) -> list[tuple[str, str]]:
    texts = [
        ("build stdout", signed.build.stdout),
        ("build stderr", signed.build.stderr),
        ("label", label),
    ]
    for i, run in enumerate(runs):
        texts += [(f"run {i} stdout", run.stdout), (f"run {i} stderr", run.stderr)]
    for folder in (signed.report, signed.summary.parent, home, site):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix != ".key":
                texts.append((str(path), path.read_text(errors="replace")))
    return texts


def test_the_private_key_is_not_in_the_image(signed: Signed, keys: Keys) -> None:
    """``docker save`` of the signed image (config and every layer, uncompressed) holds
    none of the key's forms."""
    patterns = signed.report.parent / "patterns"
    patterns.write_text("\n".join(keys.secrets()) + "\n")
    with subprocess.Popen(
        ["docker", "save", signed.data["tags"][0]], stdout=subprocess.PIPE
    ) as saved:
        grep = subprocess.run(
            ["grep", "-a", "-c", "-F", "-f", str(patterns)],
            stdin=saved.stdout,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert saved.returncode == 0
    assert grep.stdout.strip() == "0", "the private key is in the image"
    # The check can fail: the same grep finds the key in the key file itself.
    found = subprocess.run(
        ["grep", "-a", "-c", "-F", "-f", str(patterns), str(keys.key)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert int(found.stdout.strip()) > 0


class _Forwarder:
    """An HTTP forwarder in front of the real registry that records every path asked."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.paths: list[str] = []


@pytest.fixture
def forwarder(registry: str) -> Iterator[tuple[str, _Forwarder]]:
    state = _Forwarder(registry)

    class Forwarder(Handler):
        def do_GET(self) -> None:
            state.paths.append(self.path)
            request = urllib.request.Request(
                f"http://{state.upstream}{self.path}",
                headers={
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("accept", "authorization")
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, headers, body = response.status, response.headers, response.read()
            except urllib.error.HTTPError as exc:
                status, headers, body = exc.code, exc.headers, exc.read()
            kept = ("Content-Type", "Docker-Content-Digest")
            self.send(status, body, {key: headers[key] for key in kept if headers.get(key)})

    with serving(Forwarder) as server:
        yield server.host, state


def test_evidence_import_reads_the_label_from_the_registry_without_layers(  # noqa: PLR0917 - fixtures
    signed: Signed,
    keys: Keys,
    envforge: Envforge,
    registry: str,
    forwarder: tuple[str, _Forwarder],
    tmp_path: Path,
) -> None:
    pushed = envforge("publish", "cpu", "--registry", f"{registry}/{NAMESPACE}", "--json")
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    data = parse_json(pushed)
    address, state = forwarder
    ref = f"{address}/{NAMESPACE}/cpu@{data['digest']}"
    other_home = {"ENVFORGE_HOME": str(tmp_path / "home")}
    done = envforge("evidence", "import", ref, "--json", extra_env=other_home)
    assert done.returncode == 0, done.stderr
    result = parse_json(done)
    assert result["added"] == 1
    (record,) = result["records"]
    assert record["recipe"] == "cpu"
    assert record["outcome"] == "pass"
    assert record["signer"] == keys.fingerprint
    assert record["certificate"] == data["certificate"]
    # Manifests, the config blob and the attestations attached to the digest were asked
    # for; never a layer of the image (the evidence is in its config, not its files).
    assert state.paths, "nothing went through the forwarder"
    blobs = [p for p in state.paths if "/blobs/" in p]
    config = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", signed.data["tags"][0]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert any(p.endswith(config) for p in blobs), state.paths  # the ID is its config digest
    wanted = urllib.request.Request(
        f"http://{registry}/v2/{NAMESPACE}/cpu/manifests/{data['digest']}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(wanted, timeout=30) as answer:
        layers = [layer["digest"] for layer in json.load(answer)["layers"]]
    assert layers
    assert not [p for p in blobs if any(p.endswith(layer) for layer in layers)], state.paths

    # Imported once: a second import adds nothing; show counts it.
    again = envforge("evidence", "import", ref, "--json", extra_env=other_home)
    assert parse_json(again)["added"] == 0
    shown = envforge("show", "cpu", extra_env=other_home)
    assert "Evidence: certified on" in shown.stdout


def test_certify_writes_a_signed_summary_and_junit(
    signed: Signed, keys: Keys, envforge: Envforge, tmp_path: Path, client: EngineClient
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("## earlier step\n")
    done = envforge(
        "certify",
        "cpu",
        "--signing-key",
        str(keys.key),
        "--report",
        str(tmp_path / "report"),
        "--summary",
        str(summary),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = summary.read_text()
    assert text.startswith("## earlier step\n### envforge certify cpu: ✅ pass")
    assert f"| signed by | {keys.fingerprint} |" in text
    assert "| step | status | seconds | detail |" in text
    assert (tmp_path / "report" / "probe.junit.xml").is_file()
    assert cert_label(client, signed.data["tags"][0])["signature"]["key"] == keys.fingerprint
    for secret in keys.secrets():
        assert secret not in text + done.stdout + done.stderr
