"""Misbehaving checks in the container target: the container goes, and everything in it.

The container case of issue 11, class 4: a check that leaves a daemon (new session,
double fork), or hangs after starting one, must not keep the probe waiting nor leave a
process or a container behind. The worker runs as the container's PID 1 launcher; the
target kills and removes the container when the probe ends.
"""

from __future__ import annotations

import gc
import os
import time
import warnings
from pathlib import Path

import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.probe_target import DockerTarget
from envforge.probe.runner import run_probe
from envforge.probe.spec import ProbeSpec, read_checks

from .helpers import Built, all_containers

pytestmark = pytest.mark.engine

SLACK = 10.0  # container start and removal on a shared, loaded engine
MARK = "ENVFORGE_TEST_MARK"
DAEMONS = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
    os._exit(0)
time.sleep(0.5)
"""


def _marked(token: str) -> list[int]:
    """Live host processes (container processes included) started with MARK=token."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{MARK}={token}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize(("tail", "status"), [("", "pass"), ("time.sleep(600)\n", "hang")])
def test_daemons_in_a_probe_container_leave_nothing(
    client: EngineClient, built_cpu: Built, tmp_path: Path, tail: str, status: str
) -> None:
    check = tmp_path / "daemons.py"
    check.write_text(DAEMONS + tail)
    after = tmp_path / "after.py"
    after.write_text("pass\n")
    token = os.urandom(8).hex()
    deadline = 8.0
    spec = ProbeSpec(
        level="quick",
        vendor="none",
        step_timeout=deadline,
        checks=read_checks([check, after]),
        env=((MARK, token),),
    )
    before = all_containers()
    began = time.monotonic()
    report = run_probe(spec, DockerTarget(client, built_cpu.data["tags"][0]))
    took = time.monotonic() - began
    with warnings.catch_warnings():
        # A killed container's attach socket is left to the garbage collector
        # (ContainerHandle, not this test's subject): collect it here, quietly.
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    steps = {s.name: s for s in report.steps}
    assert steps["check:daemons.py"].status == status, steps["check:daemons.py"]
    if status == "pass":
        assert "stopped 2 processes the check left running" in steps["check:daemons.py"].detail
        assert steps["check:after.py"].status == "pass"
    else:
        assert steps["check:after.py"].status == "skip"
    assert took < len(spec.steps) * deadline + SLACK  # bounded, however the check behaves
    assert _marked(token) == []
    assert all_containers() <= before
