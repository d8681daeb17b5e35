"""What a killed envforge leaves on the Docker path (envforge.backends.docker.leftovers):
owner labels and their staleness, build context folders, the watcher process that binds a
container's lifetime to envforge's (real processes, real SIGKILL), SIGTERM/SIGHUP as Ctrl-C.
The same on a real engine: tests/acceptance/test_docker_kills.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envforge.backends.docker import leftovers
from envforge.backends.docker.leftovers import Owner, stale, stale_context
from envforge.cli.common import term_as_interrupt
from envforge.core import proc

HERE = Owner("6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", "4026531836", 4242, 777)


def running_only(*alive: tuple[int, int]) -> leftovers.Running:
    return lambda pid, start: (pid, start) in alive


def test_an_owner_label_reads_back() -> None:
    assert Owner.parse(HERE.label) == HERE
    me = leftovers.this_process()
    assert me is not None  # Linux with /proc: every container gets the label
    assert Owner.parse(me.label) == me
    assert me.pid == os.getpid()
    assert leftovers.owner_labels() == {leftovers.OWNER_LABEL: me.label}


@pytest.mark.parametrize("value", ["", "nonsense", "a:b:c.d", "0f2c:1:2", "x" * 200 + ":1:2.3"])
def test_a_label_that_is_not_an_owner_is_never_stale(value: str) -> None:
    assert not stale(value, HERE, running_only())


def test_a_gone_owner_of_this_boot_and_pid_namespace_is_stale() -> None:
    gone = Owner(HERE.boot, HERE.pidns, 99, 5).label
    assert stale(gone, HERE, running_only())
    assert not stale(gone, HERE, running_only((99, 5)))  # still running: left alone
    reused = Owner(HERE.boot, HERE.pidns, 99, 6).label  # pid reused by another process
    assert stale(reused, HERE, running_only((99, 5)))


def test_another_host_or_pid_namespace_is_never_swept() -> None:
    other_boot = "0b1c2d3e-0000-4000-8000-000000000000"
    assert not stale(Owner(other_boot, HERE.pidns, 99, 5).label, HERE, running_only())
    assert not stale(Owner(HERE.boot, "4026532000", 99, 5).label, HERE, running_only())


def test_this_process_is_not_stale_but_an_earlier_one_with_its_pid_is() -> None:
    assert not stale(HERE.label, HERE, running_only())
    earlier = Owner(HERE.boot, HERE.pidns, HERE.pid, HERE.start - 1).label
    assert stale(earlier, HERE, running_only())


def test_build_contexts_name_their_owner() -> None:
    prefix = leftovers.context_prefix()
    assert prefix == f"envforge-build-{os.getpid()}.{proc.start_time(os.getpid())}-"
    assert not stale_context(prefix + "abc", 1e9)  # this process: never


def test_stale_contexts() -> None:
    dead = running_only()
    assert stale_context("envforge-build-99.5-abc", 1.0, dead)
    assert stale_context("envforge-build-99.5-abc.iid", 1.0, dead)
    assert not stale_context("envforge-build-99.5-abc", 1.0, running_only((99, 5)))
    assert not stale_context("envforge-build-abc", 60.0, dead)  # older envforge, young
    assert stale_context("envforge-build-abc", 2 * 24 * 3600.0, dead)  # ... and old
    assert not stale_context("envforge-probe-99.5-abc", 1.0, dead)
    assert not stale_context("other", 1e9, dead)


def gone_pid() -> tuple[int, int]:
    """The pid and start time of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    start = proc.start_time(child.pid)
    child.wait()
    assert start is not None
    return child.pid, start


def test_sweep_contexts_removes_only_what_a_gone_envforge_left(tmp_path: Path) -> None:
    pid, start = gone_pid()
    left = tmp_path / f"envforge-build-{pid}.{start}-k1"
    (left / "wheelhouse").mkdir(parents=True)
    (left / "wheelhouse" / "torch.whl").write_bytes(b"x" * 1000)
    iid = tmp_path / f"envforge-build-{pid}.{start}-k1.iid"
    iid.write_text("sha256:0", encoding="utf-8")
    mine = tmp_path / (leftovers.context_prefix() + "k2")
    mine.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    removed = leftovers.sweep_contexts(tmp_path)
    assert sorted(removed) == sorted([left, iid])
    assert not left.exists()
    assert not iid.exists()
    assert mine.is_dir()
    assert other.is_dir()


WATCHED = textwrap.dedent(
    """
    import sys, time
    from envforge.core import proc
    marker = sys.argv[1]
    watcher = [sys.executable, "-c",
               "import sys, pathlib; said = sys.stdin.buffer.read(64);"
               "pathlib.Path(sys.argv[1]).write_text("
               "'done' if said.startswith(b'done') else 'eof')",
               marker]
    with proc.watcher(watcher):
        print("ready", flush=True)
        if sys.argv[2] == "hang":
            time.sleep(300)
    """
)


def run_watched(marker: Path, mode: str) -> subprocess.Popen[str]:
    owner = subprocess.Popen(
        [sys.executable, "-c", WATCHED, str(marker), mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert owner.stdout is not None
    assert owner.stdout.readline().strip() == "ready"
    return owner


def wait_for(path: Path, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(encoding="utf-8"):
            return path.read_text(encoding="utf-8")
        time.sleep(0.05)
    return ""


def test_the_watcher_has_nothing_to_do_when_its_owner_ends_normally(tmp_path: Path) -> None:
    owner = run_watched(tmp_path / "said", "end")
    assert owner.wait(timeout=30) == 0
    assert owner.stdout is not None
    owner.stdout.close()
    assert wait_for(tmp_path / "said") == "done"


def test_the_watcher_acts_when_its_owner_is_killed(tmp_path: Path) -> None:
    owner = run_watched(tmp_path / "said", "hang")
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    assert owner.stdout is not None
    owner.stdout.close()
    assert wait_for(tmp_path / "said") == "eof"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_term_and_hup_unwind_like_ctrl_c(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    unwound: list[signal.Signals] = []

    def signalled() -> None:
        with term_as_interrupt():
            try:
                os.kill(os.getpid(), sig)
                time.sleep(5)
            finally:
                unwound.append(sig)

    with pytest.raises(KeyboardInterrupt):
        signalled()
    assert unwound == [sig]
    assert signal.getsignal(sig) == before
