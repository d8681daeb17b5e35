"""Issue 22 classes 1 and 2 on the real engine: an image built FROM a certified one that
adds config (HEALTHCHECK, ONBUILD, VOLUME, EXPOSE, STOPSIGNAL, SHELL, LABEL) or a commit
re-tagged over the certified tag fails ``verify --trust``, ``publish --require-signed``
and ``shell``; a shell never runs an image's health check.

The certified image is the stand-in base image with a signed certificate made here with
envforge's own functions (no torch build: verify, publish and shell do not probe), for a
recipe of its own (``ENVFORGE_RECIPE_PATH``), so the shared ``envforge/cpu`` tag is never
touched. The real builds and certifications are covered by test_docker_publish.py.
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image, label_image, tag_image
from envforge.container.refs import CERTIFICATE_LABEL, bound_config, certified_ref
from envforge.publish.certificate import CertificateStore, issue, sign
from envforge.publish.signing import load_signing_key
from envforge.recipe.load import load_recipe_file

from .helpers import ROOT, Envforge, docker_cli

pytestmark = pytest.mark.engine

NAME = "hardenbind"


@dataclass(frozen=True)
class Setup:
    envforge: Envforge
    env: dict[str, str]
    certified: str  # envforge/hardenbind:STACK
    labelled: str  # the ID of the signed certified image
    pub: Path
    registry: str


def _build(sdk: docker.DockerClient, dockerfile: str, tag: str) -> str:
    image, _logs = sdk.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True
    )
    return str(image.id)


@pytest.fixture(scope="module")
def setup(
    client: EngineClient,
    sdk: docker.DockerClient,
    standin: str,
    registry: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("binding")
    recipes = folder / "recipes"
    recipes.mkdir()
    text = (ROOT / "recipes" / "cpu.yaml").read_text(encoding="utf-8")
    (recipes / f"{NAME}.yaml").write_text(text.replace("name: cpu", f"name: {NAME}", 1))
    recipe = load_recipe_file(recipes / f"{NAME}.yaml")
    home = folder / "home"
    env = {"ENVFORGE_RECIPE_PATH": str(recipes)}
    envforge = Envforge(home)
    keys = envforge("keys", "generate", "-o", str(folder / "keys"), extra_env=env)
    assert keys.returncode == 0, keys.stderr
    info = inspect_image(client, standin)
    assert info is not None
    cert = issue(
        report={"status": "pass", "level": "full", "steps": [{"name": "s", "status": "pass"}]},
        recipe_name=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        layers=info.layers,
        config=bound_config(info.config),
        candidate_id=info.id,
    )
    cert = sign(cert, load_signing_key(folder / "keys" / "envforge.key"))
    CertificateStore(home / "certificates").save(cert)
    labelled = label_image(client, info.id, {CERTIFICATE_LABEL: cert.to_json()})
    certified = certified_ref(recipe.name, recipe.stack_tag)
    # the certified tag, and the local registry tag a successful publish leaves
    made = [certified, f"{registry}/envforge-harden/{recipe.name}:{recipe.stack_tag}"]
    yield Setup(envforge, env, certified, labelled, folder / "keys" / "envforge.pub", registry)
    for tag in made + [f"envforge-harden/derived:{k.lower()}" for k in DERIVED]:
        docker_cli("rmi", "--no-prune", tag)
    docker_cli("rmi", "--no-prune", labelled)  # untagged now: it would stay, dangling


def _containers_of(image: str) -> list[str]:
    """Containers made from ``image`` (the engine is shared: others' containers come and go)."""
    listed = docker_cli("ps", "-aq", "--filter", f"ancestor={image}")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def _point_certified_tag_at(client: EngineClient, s: Setup, image: str) -> None:
    tag_image(client, image, s.certified)


#: Dockerfile instructions a derived image adds on top of the certified one, and the
#: config key the refusal must name.
DERIVED = {
    "HEALTHCHECK": (
        "HEALTHCHECK --interval=1s CMD touch /workspace/health-check-ran",
        "Healthcheck",
    ),
    "ONBUILD": ("ONBUILD RUN echo evil", "OnBuild"),
    "VOLUME": ("VOLUME /root/.ssh", "Volumes"),
    "EXPOSE": ("EXPOSE 22", "ExposedPorts"),
    "STOPSIGNAL": ("STOPSIGNAL SIGKILL", "StopSignal"),
    "SHELL": ('SHELL ["/bin/sh", "-ec"]', "Shell"),
    "LABEL": ("LABEL org.example.evil=1", "Labels"),
}


def test_the_certified_image_verifies_publishes_and_runs(
    client: EngineClient, setup: Setup, tmp_path: Path
) -> None:
    _point_certified_tag_at(client, setup, setup.labelled)
    ef, env = setup.envforge, setup.env
    ok = ef("verify", setup.certified, "--no-pull", "--trust", str(setup.pub), extra_env=env)
    assert ok.returncode == 0, ok.stderr
    pushed = ef(
        "publish",
        NAME,
        "--registry",
        f"{setup.registry}/envforge-harden",
        "--require-signed",
        extra_env=env,
    )
    assert pushed.returncode == 0, pushed.stderr
    ran = ef("shell", NAME, "--", "true", extra_env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize("instruction", sorted(DERIVED))
def test_a_derived_image_with_more_config_fails_verify_trust(
    sdk: docker.DockerClient, setup: Setup, instruction: str
) -> None:
    line, key = DERIVED[instruction]
    ref = f"envforge-harden/derived:{instruction.lower()}"
    _build(sdk, f"FROM {setup.labelled}\n{line}\n", ref)
    done = setup.envforge(
        "verify", ref, "--no-pull", "--trust", str(setup.pub), extra_env=setup.env
    )
    assert done.returncode == 1, done.stderr
    assert f"image config differs from certificate: {key}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_a_health_check_over_the_certified_tag_fails_publish_and_shell(
    client: EngineClient, sdk: docker.DockerClient, setup: Setup, tmp_path: Path
) -> None:
    line, _key = DERIVED["HEALTHCHECK"]
    derived = _build(sdk, f"FROM {setup.labelled}\n{line}\n", "envforge-harden/derived:healthcheck")
    _point_certified_tag_at(client, setup, derived)
    try:
        ef, env = setup.envforge, setup.env
        pushed = ef(
            "publish",
            NAME,
            "--registry",
            f"{setup.registry}/envforge-harden",
            "--require-signed",
            extra_env=env,
        )
        assert pushed.returncode == 5, pushed.stderr
        assert "Healthcheck" in pushed.stderr
        ran = ef("shell", NAME, "--", "sh", "-c", "echo ran > ran.txt", extra_env=env, cwd=tmp_path)
        assert ran.returncode == 1, ran.stderr
        assert "Healthcheck" in ran.stderr
        assert "(fix: envforge build hardenbind" in ran.stderr
        assert len(ran.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "ran.txt").exists()
        assert _containers_of(derived) == []  # nothing was even created
        # Asked for by --image it runs (with a warning), but its health check never does.
        asked = ef(
            "shell", NAME, "--image", derived, "--", "sleep", "4", extra_env=env, cwd=tmp_path
        )
        assert asked.returncode == 0, asked.stderr
        assert "is not the image its certificate certifies" in asked.stderr
        assert not (tmp_path / "health-check-ran").exists()
    finally:
        _point_certified_tag_at(client, setup, setup.labelled)


def test_a_commit_retagged_over_the_certified_tag_is_refused_by_shell(
    client: EngineClient, setup: Setup, tmp_path: Path
) -> None:
    name = f"envforge-harden-commit-{secrets.token_hex(4)}"
    made = docker_cli(
        "run",
        "--name",
        name,
        "--network",
        "none",
        setup.labelled,
        "sh",
        "-c",
        "echo evil > /etc/evil",
    )
    try:
        assert made.returncode == 0, made.stderr
        committed = docker_cli("commit", name, setup.certified)
        assert committed.returncode == 0, committed.stderr
    finally:
        docker_cli("rm", "-f", name)
    try:
        ef, env = setup.envforge, setup.env
        ran = ef("shell", NAME, "--", "cat", "/etc/evil", extra_env=env, cwd=tmp_path)
        assert ran.returncode == 1, ran.stdout + ran.stderr
        assert "evil" not in ran.stdout
        assert "is not the image its certificate certifies" in ran.stderr
        assert "content differs from certificate" in ran.stderr
        assert len(ran.stderr.strip().splitlines()) == 1
        verified = ef("verify", setup.certified, "--no-pull", extra_env=env)
        assert verified.returncode == 1, verified.stderr
    finally:
        committed_id = inspect_image(client, setup.certified)
        _point_certified_tag_at(client, setup, setup.labelled)
        if committed_id is not None and committed_id.id != setup.labelled:
            docker_cli("rmi", committed_id.id)


def test_another_recipes_certified_image_over_the_tag_is_refused_by_shell(
    client: EngineClient, setup: Setup, standin: str, tmp_path: Path
) -> None:
    """It matches its own (valid, signed) certificate, which is for another recipe."""
    info = inspect_image(client, standin)
    assert info is not None
    other = issue(
        report={"status": "pass", "level": "full", "steps": [{"name": "s", "status": "pass"}]},
        recipe_name="cpu",
        recipe_hash="sha256:" + "0" * 64,
        stack_tag="torch2.5.1-cpu-py3.11",
        layers=info.layers,
        config=bound_config(info.config),
        candidate_id=info.id,
    )
    image = label_image(client, info.id, {CERTIFICATE_LABEL: other.to_json()})
    _point_certified_tag_at(client, setup, image)
    try:
        ran = setup.envforge(
            "shell", NAME, "--", "sh", "-c", "echo ran > ran.txt", extra_env=setup.env, cwd=tmp_path
        )
        assert ran.returncode == 1, ran.stdout + ran.stderr
        assert f"{setup.certified} is certified for cpu torch2.5.1-cpu-py3.11, not" in ran.stderr
        assert len(ran.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "ran.txt").exists()
    finally:
        _point_certified_tag_at(client, setup, setup.labelled)
        docker_cli("rmi", image)


def test_an_unpullable_base_image_is_exit_4_and_a_bad_image_reference_exit_2(
    setup: Setup, tmp_path: Path
) -> None:
    """Issue 22 §9 on the real engine: a network problem is exit 4, the user's typo 2."""
    ef, env = setup.envforge, setup.env
    built = ef(
        "build",
        NAME,
        "--base-image",
        "127.0.0.1:1/envforge-nope:t",
        "--no-certify",
        extra_env=env,
        cwd=tmp_path,
    )
    assert built.returncode == 4, built.stderr
    assert "neither local nor pullable" in built.stderr
    assert "Traceback" not in built.stderr
    ran = ef("shell", NAME, "--image", "Not A Ref!!", "--", "true", extra_env=env, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert "is not an image reference" in ran.stderr
