"""Publish to the local registry, pull with the plain docker CLI, verify."""

from __future__ import annotations

import json

import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image
from envforge.container.refs import CERTIFICATE_LABEL

from .helpers import Built, Envforge, all_containers, docker_cli, parse_json

pytestmark = pytest.mark.engine


def test_publish_pull_run_and_verify(
    client: EngineClient, built_cpu: Built, envforge: Envforge, registry: str
) -> None:
    done = envforge("publish", "cpu", "--registry", f"{registry}/envforge-test", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    data = parse_json(done)
    assert data["ref"] == f"{registry}/envforge-test/cpu:torch2.13.0-cpu-py3.11"
    assert data["digest"].startswith("sha256:")
    pinned = data["pinned"]
    assert pinned == f"{registry}/envforge-test/cpu@{data['digest']}"

    # A user pulls the pushed digest with the plain docker CLI and runs torch in it.
    pulled = docker_cli("pull", pinned)
    assert pulled.returncode == 0, pulled.stderr
    ran = docker_cli(
        "run", "--rm", "--network", "none", pinned, "python", "-c", "import torch; print('ok')"
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ok"

    verified = envforge("verify", pinned, "--json")
    assert verified.returncode == 0, verified.stderr
    assert parse_json(verified)["certificate"] == data["certificate"]


def test_verify_fails_on_a_retagged_modified_image(
    client: EngineClient, built_cpu: Built, envforge: Envforge, registry: str
) -> None:
    certified = built_cpu.data["tags"][0]
    tampered = f"{registry}/envforge-test/cpu:tampered"
    before = all_containers()
    name = "envforge-test-tamper"
    made = docker_cli(
        "run", "--name", name, "--network", "none", certified,
        "sh", "-c", "echo evil > /opt/evil",
    )
    try:
        assert made.returncode == 0, made.stderr
        committed = docker_cli("commit", name, tampered)
        assert committed.returncode == 0, committed.stderr
    finally:
        docker_cli("rm", "-f", name)
    assert all_containers() == before
    # Same certificate label, different content.
    info = inspect_image(client, tampered)
    assert info is not None
    assert info.labels.get(CERTIFICATE_LABEL)
    pushed = docker_cli("push", tampered)
    assert pushed.returncode == 0, pushed.stderr

    done = envforge("verify", tampered)
    assert done.returncode == 1
    assert "content differs from certificate" in done.stderr
    assert "Traceback" not in done.stderr


def test_publish_refuses_an_uncertified_recipe(envforge: Envforge, registry: str) -> None:
    # gfx1010's certified image was never built on this host.
    done = envforge("publish", "gfx1010", "--registry", registry)
    assert done.returncode == 5, done.stderr
    assert "no certified image" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_publish_refuses_when_the_local_store_has_no_certificate(
    built_cpu: Built, envforge: Envforge, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    empty_home = tmp_path_factory.mktemp("empty-home")
    done = envforge(
        "publish", "cpu", "--registry", registry, extra_env={"ENVFORGE_HOME": str(empty_home)}
    )
    assert done.returncode == 5, done.stderr
    assert "no certificate for its content" in done.stderr
    assert json.dumps(done.stdout) == '""'
