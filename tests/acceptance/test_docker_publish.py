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

    verified = envforge("verify", pinned, "--json")  # through the registry's HTTP API
    assert verified.returncode == 0, verified.stderr
    assert parse_json(verified)["certificate"] == data["certificate"]
    assert parse_json(verified)["image"] == data["image"]  # the config digest is the image ID
    pulled_too = envforge("verify", pinned, "--pull", "--json")
    assert pulled_too.returncode == 0, pulled_too.stderr
    assert parse_json(pulled_too)["image"] == data["image"]


def test_pull_makes_a_published_image_the_recipes_certified_image(
    client: EngineClient, built_cpu: Built, envforge: Envforge, registry: str
) -> None:
    """A second machine: the certified tag is not there; `pull` verifies the published
    image and tags it, and `shell cpu` uses it by name."""
    certified = built_cpu.data["tags"][0]
    published = envforge("publish", "cpu", "--registry", f"{registry}/envforge-test", "--json")
    assert published.returncode == 0, published.stderr[-3000:]
    pinned = parse_json(published)["pinned"]
    image = inspect_image(client, certified)
    assert image is not None
    untagged = docker_cli("rmi", certified)  # the image stays: the registry tag names it
    try:
        assert untagged.returncode == 0, untagged.stderr
        missing = envforge("shell", "cpu", "--backend", "docker", "--", "true")
        assert missing.returncode != 0
        done = envforge("pull", pinned)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == certified
        again = inspect_image(client, certified)
        assert again is not None
        assert again.id == image.id
        ran = envforge(
            "shell",
            "cpu",
            "--backend",
            "docker",
            "--",
            "python",
            "-c",
            "import torch; print(torch.__version__)",
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "2.13.0+cpu"
    finally:
        docker_cli("tag", image.id, certified)


def test_verify_fails_on_a_retagged_modified_image(
    client: EngineClient, built_cpu: Built, envforge: Envforge, registry: str
) -> None:
    certified = built_cpu.data["tags"][0]
    tampered = f"{registry}/envforge-test/cpu:tampered"
    before = all_containers()
    name = "envforge-test-tamper"
    made = docker_cli(
        "run",
        "--name",
        name,
        "--network",
        "none",
        certified,
        "sh",
        "-c",
        "echo evil > /opt/evil",
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
