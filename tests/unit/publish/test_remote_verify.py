"""`verify` without an engine: the certificate, layers and config read through a registry's
HTTP API (a real HTTP server on 127.0.0.1 serving manifest and config blob, no layers)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from envforge.cli import main
from envforge.container.refs import CERTIFICATE_LABEL, bound_config
from envforge.publish.certificate import issue
from envforge.publish.registry import remote_image
from tests.helpers.hostile_registry import HostileRegistry, serving
from tests.helpers.recipes import make_recipe

RECIPE = make_recipe()
LAYERS = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
CONFIG: dict[str, Any] = {
    "Env": ["PATH=/opt/venv/bin:/usr/bin"],
    "Cmd": ["bash"],
    "Labels": {"io.envforge.recipe": "cpu"},
}


def _certified_config(config: dict[str, Any], layers: list[str]) -> bytes:
    cert = issue(
        report={"status": "pass", "level": "full", "steps": [{"name": "a", "status": "pass"}]},
        recipe_name=RECIPE.name,
        recipe_hash=RECIPE.hash,
        stack_tag=RECIPE.stack_tag,
        layers=LAYERS,
        config=bound_config(CONFIG),
        candidate_id="sha256:" + "c" * 64,
    )
    labels = {**config["Labels"], CERTIFICATE_LABEL: cert.to_json()}
    blob = {
        "architecture": "amd64",
        "os": "linux",
        "config": {**config, "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": layers},
    }
    return json.dumps(blob).encode()


def _serve(state: HostileRegistry, name: str, config: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"digest": digest, "size": len(config)},
        "layers": [],
    }
    state.paths[f"/v2/team/{name}/manifests/v1"] = json.dumps(manifest).encode()
    state.paths[f"/v2/team/{name}/blobs/{digest}"] = config
    return f"{state.host}/team/{name}:v1"


@pytest.fixture
def registry() -> Iterator[HostileRegistry]:
    with serving() as state:
        yield state


def test_remote_image_is_the_config_digest_layers_and_labels(registry: HostileRegistry) -> None:
    config = _certified_config(CONFIG, LAYERS)
    info = remote_image(_serve(registry, "good", config))
    assert info.id == "sha256:" + hashlib.sha256(config).hexdigest()
    assert info.layers == tuple(LAYERS)
    assert CERTIFICATE_LABEL in info.labels


def test_verify_reads_the_registry_with_no_engine(
    registry: HostileRegistry,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # no engine to ask
    good = _serve(registry, "good", _certified_config(CONFIG, LAYERS))
    assert main(["verify", good, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["ok"], data["recipe"], data["layers"]) == (True, RECIPE.name, 2)
    # the same certificate on other content: a layer swapped
    other = _serve(
        registry, "swapped", _certified_config(CONFIG, [LAYERS[0], "sha256:" + "e" * 64])
    )
    assert main(["verify", other]) == 1
    assert "content differs from certificate: layer 2" in capsys.readouterr().err
    # or a HEALTHCHECK added on top of the certified config
    added = {**CONFIG, "Healthcheck": {"Test": ["CMD-SHELL", "true"]}}
    assert main(["verify", _serve(registry, "added", _certified_config(added, LAYERS))]) == 1
    assert "image config differs from certificate: Healthcheck" in capsys.readouterr().err


def test_pull_and_no_pull_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "127.0.0.1:9/x/y:z", "--pull", "--no-pull"]) == 2
    assert "exclude each other" in capsys.readouterr().err


def test_publish_takes_auto_like_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`auto` is resolved for this host (no GPU here: cpu) before the engine is asked."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    assert main(["publish", "auto", "--registry", "127.0.0.1:9"]) == 4
    err = capsys.readouterr().err
    assert "auto -> " in err  # chosen for this host, said on stderr
    assert "no Docker engine answers" in err
    assert main(["publish", "no-such-recipe", "--registry", "127.0.0.1:9"]) == 2


def test_a_manifest_asked_for_by_digest_must_be_those_bytes(
    registry: HostileRegistry,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """REF@sha256:... (publish prints it) names one manifest: a registry that answers
    with another one (here: another image that verifies on its own) is refused, exit 4,
    as an engine's pull would refuse it; so is a manifest list entry's."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    good = _serve(registry, "pinned", _certified_config(CONFIG, LAYERS))
    manifest = registry.paths["/v2/team/pinned/manifests/v1"]
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    registry.paths[f"/v2/team/pinned/manifests/{digest}"] = manifest
    pinned = good.rsplit(":", 1)[0] + "@" + digest
    assert main(["verify", pinned]) == 0
    capsys.readouterr()
    # the same digest, other bytes (another certified image's manifest)
    _serve(registry, "other", _certified_config(CONFIG, LAYERS))  # issued again: other bytes
    registry.paths[f"/v2/team/pinned/manifests/{digest}"] = registry.paths[
        "/v2/team/other/manifests/v1"
    ]
    registry.paths.update(
        {
            k.replace("/team/other/", "/team/pinned/"): v
            for k, v in list(registry.paths.items())
            if "/team/other/blobs/" in k
        }
    )
    assert main(["verify", pinned]) == 4
    err = capsys.readouterr().err
    assert f"the manifest does not match its digest {digest[:19]}" in err
    assert len(err.strip().splitlines()) == 1
    # a manifest list whose entry's digest names other bytes
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "digest": digest,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "platform": {"os": "linux", "architecture": "amd64"},
            }
        ],
    }
    registry.paths["/v2/team/pinned/manifests/list"] = json.dumps(index).encode()
    assert main(["verify", good.rsplit(":", 1)[0] + ":list"]) == 4
    assert "does not match its digest" in capsys.readouterr().err
    registry.paths[f"/v2/team/pinned/manifests/{digest}"] = manifest
    assert main(["verify", good.rsplit(":", 1)[0] + ":list"]) == 0
