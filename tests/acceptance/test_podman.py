"""The Docker-engine acceptance path on Podman's Docker-compatible API, rootful and rootless.

``scripts/ci-podman.sh up`` (after ``scripts/ci-engine.sh up``) starts the engines and
exports ``ENVFORGE_PODMAN_HOST`` and ``ENVFORGE_PODMAN_ROOTLESS_HOST`` (or
``ENVFORGE_PODMAN_ROOTLESS_SKIP``: why this machine cannot run rootless Podman). With
``ENVFORGE_REQUIRE_ENGINE=1`` a missing rootful Podman fails these tests; rootless ones skip
with the machine's reason. The build, certification and publishing run once, on rootful
Podman (a torch image is minutes of work per engine); what differs rootless (the engine's
identity, user namespaces, shells, volumes, files the command writes) runs on both, with
the stand-in image. Nothing is mocked: the real envforge CLI, the real docker CLI, real
Podman.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import docker
import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.engine import connect, identify_engine
from envforge.backends.docker.images import inspect_image
from envforge.container.identity import EngineIdentity
from envforge.errors import Unavailable

from .helpers import (
    BUILD_TIMEOUT,
    DEFAULT_STANDIN,
    STATE,
    Built,
    Envforge,
    build_args,
    parse_json,
    setting,
    unavailable,
)


def podman_setting(name: str) -> str | None:
    """From the environment, else from ``$ENVFORGE_CI_STATE/podman/env`` (ci-podman.sh up)."""
    value = setting(name)
    if value:
        return value
    try:
        text = (STATE / "podman" / "env").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and words[1].startswith(name + "="):
            return words[1].split("=", 1)[1]
    return None


pytestmark = pytest.mark.engine


@dataclass(frozen=True)
class Podman:
    mode: str
    host: str
    client: EngineClient
    identity: EngineIdentity
    envforge: Envforge

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def containers(self) -> set[str]:
        sdk = cast("docker.DockerClient", self.client)
        return {str(c.id) for c in sdk.containers.list(all=True)}


@pytest.fixture(scope="module", params=["rootful", "rootless"])
def podman(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podman]:
    mode = str(request.param)
    if mode == "rootful":
        host = podman_setting("ENVFORGE_PODMAN_HOST")
        if not host:
            unavailable("ENVFORGE_PODMAN_HOST is not set (run: bash scripts/ci-podman.sh up)")
    else:
        host = podman_setting("ENVFORGE_PODMAN_ROOTLESS_HOST")
        if not host:
            # Rootless needs user namespaces and subordinate ids the machine may refuse:
            # a skip with the machine's own reason, never a failure.
            pytest.skip(
                podman_setting("ENVFORGE_PODMAN_ROOTLESS_SKIP")
                or "ENVFORGE_PODMAN_ROOTLESS_HOST is not set (run: bash scripts/ci-podman.sh up)"
            )
    assert host is not None
    try:
        client = connect({"DOCKER_HOST": host})
    except Unavailable as exc:
        unavailable(f"{mode} Podman does not answer: {exc.one_line()}")
        raise  # not reached
    identity = identify_engine(client)
    home = tmp_path_factory.mktemp(f"envforge-home-podman-{mode}")
    yield Podman(mode, host, client, identity, Envforge(home))
    client.close()


@pytest.fixture(scope="module")
def podman_built(podman: Podman, wheelhouse: Path, ca_bundle: Path) -> Built:
    """``envforge build cpu`` (build + certify) on this Podman, once per module and mode."""
    standin = setting("ENVFORGE_STANDIN_IMAGE", DEFAULT_STANDIN)
    assert standin is not None
    if inspect_image(podman.client, standin) is None:
        unavailable(f"stand-in {standin} is not in {podman.mode} Podman's store (ci-podman.sh up)")
    report = Path(tempfile.mkdtemp(prefix=f"envforge-podman-{podman.mode}-report-"))
    completed = podman.envforge(
        *build_args("cpu", standin, wheelhouse, ca_bundle, "--report", str(report), "--json"),
        timeout=BUILD_TIMEOUT,
        extra_env=podman.env,
    )
    assert completed.returncode == 0, (
        f"envforge build cpu on {podman.mode} Podman exited {completed.returncode}:\n"
        f"{completed.stderr[-5000:]}"
    )
    return Built(completed, parse_json(completed), report)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A working directory a rootless engine's user can enter (pytest's tmp is 0700 root)."""
    path = Path(tempfile.mkdtemp(prefix="envforge-podman-cwd-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


def test_the_engine_is_identified_as_podman(podman: Podman) -> None:
    assert podman.identity.kind == "podman"
    assert podman.identity.rootless is (podman.mode == "rootless")
    assert podman.identity.version


ROOTFUL = pytest.mark.parametrize("podman", ["rootful"], indirect=True)


@ROOTFUL
def test_build_certifies_and_tags_on_podman(podman: Podman, podman_built: Built) -> None:
    data = podman_built.data
    assert data["certified"] is True
    assert data["status"] == "pass"
    ref = data["tags"][0]
    assert ref == "envforge/cpu:torch2.13.0-cpu-py3.11"
    info = inspect_image(podman.client, ref)
    assert info is not None
    assert info.id == data["image"]
    assert (podman_built.report_dir / "certificate.json").is_file()


def test_shell_exit_code_passes_through_on_podman(podman: Podman, workdir: Path) -> None:
    """`docker run --rm` against Podman's API reports 0; envforge must return the 7. The
    stand-in image (``--image``): what is tested here is the engine, not the image."""
    standin = setting("ENVFORGE_STANDIN_IMAGE", DEFAULT_STANDIN)
    assert standin is not None
    image = ("--image", standin)
    before = podman.containers()
    done = podman.envforge(
        "shell",
        "cpu",
        *image,
        "--",
        "sh",
        "-c",
        "exit 7",
        cwd=workdir,
        extra_env=podman.env,
    )
    assert done.returncode == 7, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert podman.containers() == before
    ok = podman.envforge(
        "shell",
        "cpu",
        *image,
        "--",
        "sh",
        "-c",
        'touch "$TRITON_CACHE_DIR/w" "$MIOPEN_USER_DB_PATH/w" && echo made > made.txt',
        cwd=workdir,
        extra_env=podman.env,
    )
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert (workdir / "made.txt").read_text().strip() == "made"
    sdk = cast("docker.DockerClient", podman.client)
    uid = os.getuid()
    volumes = {v.name for v in sdk.volumes.list()}
    assert f"envforge-cpu-torch2.13.0-cpu-py3.11-u{uid}-miopen" in volumes


@ROOTFUL
def test_publish_and_verify_on_podman(podman: Podman, podman_built: Built, registry: str) -> None:
    repo = f"{registry}/envforge-podman-{podman.mode}"
    done = podman.envforge("publish", "cpu", "--registry", repo, "--json", extra_env=podman.env)
    assert done.returncode == 0, done.stderr[-3000:]
    data = parse_json(done)
    assert data["ref"] == f"{repo}/cpu:torch2.13.0-cpu-py3.11"
    assert data["digest"].startswith("sha256:")
    verified = podman.envforge("verify", data["pinned"], "--json", extra_env=podman.env)
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert parse_json(verified)["certificate"] == data["certificate"]
