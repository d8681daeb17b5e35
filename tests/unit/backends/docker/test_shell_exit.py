"""The shell's exit code comes from the engine; a docker CLI that missed the exit is stopped.

Podman 4.3's Docker API: ``docker run --rm`` reports 0 whatever the command returned, and
without ``--rm`` the CLI can wait for ever on a quick command. Real processes stand in for
the docker CLI; a fake engine answers ``inspect``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker.errors

from envforge.backends.docker.client import ContainerModel, EngineClient
from envforge.backends.docker.shell import ExitWatch, engine_has_init, wait_for_cli
from tests.helpers.fake_engine import FakeEngine


class _Container:
    def __init__(self, state: dict[str, Any]) -> None:
        self.attrs = {"State": state}


class _Containers:
    def __init__(self) -> None:
        self.state: dict[str, Any] | None = None

    def get(self, container_id: str) -> ContainerModel:
        if self.state is None:
            raise docker.errors.NotFound(container_id)
        return _Container(self.state)  # type: ignore[return-value]


def _client(containers: _Containers) -> EngineClient:
    client = FakeEngine()
    client.containers = containers  # type: ignore[assignment]
    return client


def test_a_cli_left_waiting_after_the_exit_is_stopped_and_the_engines_code_wins() -> None:
    containers = _Containers()
    watch = ExitWatch(_client(containers), "envforge-shell-x", poll=0.05)
    watch.start()
    # The stand-in CLI never returns by itself (as the docker CLI on Podman 4.3 may not).
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        containers.state = {"Status": "running", "ExitCode": 0}
        time.sleep(0.3)
        assert watch.exited_for() == 0.0
        containers.state = {"Status": "exited", "ExitCode": 7}
        started = time.monotonic()
        code = wait_for_cli(proc, watch, grace=0.5)
        waited = time.monotonic() - started
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0  # the CLI was stopped, not waited for
    assert waited < 30
    assert watch.final_code() == 7


def test_a_cli_that_returns_keeps_its_code_when_no_container_ran() -> None:
    containers = _Containers()  # `docker run` failed before creating the container
    watch = ExitWatch(_client(containers), "envforge-shell-y", poll=0.05)
    watch.start()
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(125)"])
    try:
        assert wait_for_cli(proc, watch, grace=0.5) == 125
    finally:
        watch.stop()
    assert watch.final_code() is None


def test_a_created_or_running_container_has_no_final_code() -> None:
    containers = _Containers()
    watch = ExitWatch(_client(containers), "n")
    for status in ("created", "running", "paused"):
        containers.state = {"Status": status, "ExitCode": 0}
        assert watch.final_code() is None
    containers.state = {"Status": "exited", "ExitCode": 42}
    assert watch.final_code() == 42


class _Polled:
    """A container whose inspect says running ``runs`` times, then ``final``."""

    def __init__(self, runs: int, final: str, code: int) -> None:
        self.runs = runs
        self.final = final
        self.code = code
        self.attrs: dict[str, Any] = {}

    def reload(self) -> None:
        if self.runs > 0:
            self.runs -= 1
            self.attrs = {"State": {"Status": "running", "ExitCode": 0}}
        else:
            self.attrs = {"State": {"Status": self.final, "ExitCode": self.code}}


def test_wait_stopped_reads_the_code_from_inspect() -> None:
    from envforge.backends.docker.containers import wait_stopped

    # Podman says "stopped" where Docker says "exited".
    for final in ("exited", "stopped", "dead"):
        polled = _Polled(3, final, 5)
        assert wait_stopped(polled, timeout=5, poll=0.01) == 5  # type: ignore[arg-type]
    never = _Polled(10**6, "exited", 0)
    assert wait_stopped(never, timeout=0.2, poll=0.01) is None  # type: ignore[arg-type]


def test_run_init_is_asked_only_where_the_engine_has_one(tmp_path: Path) -> None:
    """Docker always has docker-init; Podman only with catatonit at its init_path (CI saw
    "container-init binary not found on the host" without it)."""
    present = tmp_path / "catatonit"
    present.write_text("")
    assert engine_has_init("docker", tmp_path / "missing")
    assert engine_has_init("podman", present)
    assert not engine_has_init("podman", tmp_path / "missing")
