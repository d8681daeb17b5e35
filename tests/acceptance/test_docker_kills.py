"""Kills on the Docker path leave nothing behind (issue 22, class 7), with real signals on
the real engine.

* SIGTERM / SIGHUP during certify: unwinds like Ctrl-C (exit 130), the probe container is
  removed before envforge exits.
* SIGKILL during certify: the watcher bound to envforge removes the probe container.
* SIGKILL to ``shell``: the watcher removes the running container; the docker CLI ends.
* SIGKILL during an image build: the build context stays in TMPDIR (nothing runs on
  SIGKILL) and the next envforge that connects to the engine removes it.
* Containers labelled with a gone owner of this host are swept at the next connect; those
  of a running owner or of another host are not.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from envforge.backends.docker.leftovers import OWNER_LABEL, Owner, this_process
from envforge.core import proc

from .helpers import FIXTURES, Built, Envforge, build_args

pytestmark = [pytest.mark.engine, pytest.mark.slow]

Popen = subprocess.Popen[str]


def owned_by(sdk: docker.DockerClient, pid: int) -> list[str]:
    """Names of the containers whose owner label names process ``pid``."""
    found = []
    for c in sdk.containers.list(all=True, sparse=True, filters={"label": OWNER_LABEL}):
        owner = Owner.parse(str((c.attrs.get("Labels") or {}).get(OWNER_LABEL, "")))
        if owner is not None and owner.pid == pid:
            found.append(str(c.attrs.get("Names", ["?"])[0]).lstrip("/"))
    return found


def wait_until(what: Callable[[], object], seconds: float) -> float | None:
    """Seconds until ``what()`` is true, None when it is not within ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if what():
            return time.monotonic() - start
        time.sleep(0.2)
    return None


@pytest.fixture
def started() -> Iterator[list[Popen]]:
    """Processes a test starts; killed at the end whatever happened."""
    procs: list[Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def certify_hanging(envforge: Envforge, cwd: Path, procs: list[Popen]) -> Popen:
    """``envforge certify cpu`` whose extra check hangs; returns once the check runs."""
    hang = FIXTURES / "hang_forever.py"
    argv = [
        sys.executable,
        "-m",
        "envforge",
        "certify",
        "cpu",
        "--level",
        "quick",
        "--set",
        f"certify.extra_checks=[{json.dumps(str(hang))}]",
        "--set",
        "certify.step_timeout=300",
    ]
    p = subprocess.Popen(
        argv, cwd=cwd, env=envforge.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    procs.append(p)
    assert p.stderr is not None
    for line in p.stderr:
        if line.strip().startswith("transfer-back"):
            break  # the last built-in quick step: the hanging check runs now
    time.sleep(1.0)
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_term_and_hup_during_certify_unwind_and_remove_the_probe_container(  # noqa: PLR0917
    built_cpu: Built,
    envforge: Envforge,
    sdk: docker.DockerClient,
    tmp_path: Path,
    started: list[Popen],
    sig: signal.Signals,
) -> None:
    p = certify_hanging(envforge, tmp_path, started)
    assert owned_by(sdk, p.pid) != []  # the probe container, labelled with its owner
    p.send_signal(sig)
    assert p.wait(timeout=60) == 130
    assert owned_by(sdk, p.pid) == []


def test_sigkill_during_certify_leaves_no_probe_container(
    built_cpu: Built,
    envforge: Envforge,
    sdk: docker.DockerClient,
    tmp_path: Path,
    started: list[Popen],
) -> None:
    p = certify_hanging(envforge, tmp_path, started)
    assert owned_by(sdk, p.pid) != []
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert wait_until(lambda: owned_by(sdk, p.pid) == [], 30) is not None


def test_sigkill_to_shell_stops_and_removes_its_container(
    built_cpu: Built,
    envforge: Envforge,
    sdk: docker.DockerClient,
    tmp_path: Path,
    started: list[Popen],
) -> None:
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envforge",
            "shell",
            "cpu",
            "--",
            "sh",
            "-c",
            "echo ready; exec sleep 300",
        ],
        cwd=tmp_path,
        env=envforge.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(p)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    names = owned_by(sdk, p.pid)
    assert len(names) == 1
    assert sdk.containers.get(names[0]).status == "running"
    children = proc.descendants(p.pid, proc.process_table())  # the docker CLI among them
    assert children != []
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert wait_until(lambda: owned_by(sdk, p.pid) == [], 30) is not None
    assert wait_until(lambda: not any(proc.is_running(c) for c in children), 30) is not None


def test_sigkill_during_an_image_build_leaves_a_context_the_next_run_removes(  # noqa: PLR0917
    envforge: Envforge,
    standin: str,
    wheelhouse: Path,
    ca_bundle: Path,
    built_cpu: Built,
    tmp_path: Path,
    started: list[Popen],
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    extra = {"TMPDIR": str(tmp)}
    argv = [
        sys.executable,
        "-m",
        "envforge",
        *build_args(
            "cpu",
            standin,
            wheelhouse,
            ca_bundle,
            "--builder",
            "classic",
            "--no-certify",
            "--tag",
            "envforge-test/kills:context",
        ),
    ]
    p = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=envforge.env(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(p)

    def contexts() -> list[Path]:
        return [e for e in tmp.iterdir() if e.name.startswith("envforge-build-")]

    assert wait_until(contexts, 120) is not None
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    left = contexts()
    assert left != []  # what SIGKILL leaves: nothing runs
    assert all(e.name.startswith(f"envforge-build-{p.pid}.") for e in left), left
    image = built_cpu.data["tags"][0] if built_cpu.data.get("tags") else "envforge/cpu"
    done = envforge("verify", "--no-pull", str(image), extra_env=extra, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr  # it connected (and so swept)
    assert contexts() == []


def test_the_next_run_sweeps_containers_of_gone_owners_only(
    envforge: Envforge,
    sdk: docker.DockerClient,
    standin: str,
    built_cpu: Built,
    tmp_path: Path,
) -> None:
    here = this_process()
    assert here is not None
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_start = proc.start_time(child.pid) or 1
    child.wait()
    owners = {
        "gone": Owner(here.boot, here.pidns, child.pid, gone_start),
        "running": here,  # this test process
        "elsewhere": Owner("0b1c2d3e-0000-4000-8000-000000000000", here.pidns, child.pid, 1),
    }
    made = {
        role: sdk.containers.create(
            standin,
            ["sleep", "300"],
            labels={OWNER_LABEL: owner.label},
            network_mode="none",
            name=f"envforge-test-kills-{role}-{os.getpid()}",
        )
        for role, owner in owners.items()
    }
    try:
        for c in made.values():
            c.start()
        image = built_cpu.data["tags"][0] if built_cpu.data.get("tags") else "envforge/cpu"
        done = envforge("verify", "--no-pull", str(image), cwd=tmp_path)
        assert done.returncode in (0, 1), done.stderr
        left = {c.name for c in sdk.containers.list(all=True)}
        assert made["gone"].name not in left
        assert made["running"].name in left
        assert made["elsewhere"].name in left
    finally:
        for c in made.values():
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
