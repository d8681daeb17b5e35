"""``envforge shell --backend venv``: signals reach the command, its status comes back, and a
command that cannot run is 126/127 with one line (real processes, real signals).

Needs what ``test_venv_cpu.py`` needs (the torch wheel in ``PIP_FIND_LINKS``, python3.11).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .test_venv_cpu import WHEELS, base_env, envforge, pytestmark  # noqa: F401 - marks apply

#: Longest a forwarded signal may take to end envforge (generous: a loaded CI machine).
PATIENCE = 30.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = base_env(tmp_path_factory.mktemp("envforge-home"))
    done = envforge(
        "build", "cpu", "--backend", "venv", "--wheelhouse", str(WHEELS), "--level", "quick",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return env


def pids_running(*words: str) -> list[int]:
    """Pids whose command line is exactly ``words`` (zombies excluded)."""
    wanted = "\0".join(words).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes() != wanted:
                continue
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def start_shell(env: dict[str, str], *command: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "envforge", "shell", "cpu", "--backend", "venv", "--", *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def wait_until(test: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM to envforge", "SIGINT to envforge", "SIGINT to the group (Ctrl-C)"],
)
def test_a_signal_ends_the_command_and_its_status_comes_back(
    env: dict[str, str], sig: signal.Signals, group: bool
) -> None:
    # A duration no other process uses, so the scan of /proc finds only this sleep.
    seconds = f"600.{uuid.uuid4().int % 10**6:06d}"
    with start_shell(env, "sleep", seconds, start_new_session=True) as proc:
        try:
            wait_until(lambda: pids_running("sleep", seconds), "the sleep")
            sleeper = pids_running("sleep", seconds)[0]
            sent = time.monotonic()
            if group:  # what a terminal's Ctrl-C does: the whole foreground group
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            _out, err = proc.communicate(timeout=PATIENCE)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in pids_running("sleep", seconds):  # only if the test failed
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    assert not Path(f"/proc/{sleeper}").exists()
    assert pids_running("sleep", seconds) == []
    print(f"{sig.name} {'to the group' if group else 'to envforge'}: exit after {took:.3f}s")


def test_a_command_that_handles_the_signal_gives_its_own_code(env: dict[str, str]) -> None:
    script = "trap 'exit 42' TERM; echo ready; while :; do sleep 0.1; done"
    with start_shell(env, "sh", "-c", script) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=PATIENCE)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 42, err


def test_a_folder_or_a_plain_file_is_126_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("not a program\n")
    for command, why in ((str(tmp_path), "is a folder"), (str(plain), "is not executable")):
        done = envforge("shell", "cpu", "--backend", "venv", "--", command, env=env)
        assert done.returncode == 126, done.stderr
        assert done.stderr.splitlines() == [
            f"envforge: error: {command}: command not executable ({command} {why})"
            " (fix: name a program, or make the file executable (chmod +x))"
        ]


def test_a_missing_command_is_127_in_one_line(env: dict[str, str]) -> None:
    done = envforge("shell", "cpu", "--backend", "venv", "--", "nonexistent-cmd", env=env)
    assert done.returncode == 127, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(
        "envforge: error: nonexistent-cmd (searched the cpu venv and PATH): command not found"
    )
    done = envforge("shell", "cpu", "--backend", "venv", "--", "/no/such/program", env=env)
    assert done.returncode == 127, done.stderr
    assert done.stderr.startswith("envforge: error: /no/such/program: command not found")
    assert len(done.stderr.splitlines()) == 1
