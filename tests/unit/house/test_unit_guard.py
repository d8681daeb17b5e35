"""The autouse guard in conftest.py: reaching for a real engine fails a unit test."""

from __future__ import annotations

import socket
from pathlib import Path

import docker
import pytest

from envforge.backends.docker.engine import connect
from tests.unit.conftest import MESSAGE


def test_connect_to_an_answering_socket_is_refused(tmp_path: Path) -> None:
    sock = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    try:
        with pytest.raises(pytest.fail.Exception, match="unit tests never talk to an engine"):
            connect({"DOCKER_HOST": f"unix://{sock}"})
    finally:
        server.close()


def test_every_client_constructor_is_refused() -> None:
    for make in (docker.from_env, docker.DockerClient, docker.DockerClient.from_env):
        with pytest.raises(pytest.fail.Exception) as info:
            make()
        assert MESSAGE in str(info.value)
