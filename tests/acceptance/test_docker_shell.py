"""``envforge shell``: exit codes, the working directory, caches, no container left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import Built, Envforge, containers_mounting

pytestmark = pytest.mark.engine


def test_exit_code_is_passed_through(built_cpu: Built, envforge: Envforge, tmp_path: Path) -> None:
    done = envforge("shell", "cpu", "--", "python", "-c", "import sys; sys.exit(7)", cwd=tmp_path)
    assert done.returncode == 7, done.stderr
    assert "Traceback" not in done.stderr
    assert containers_mounting(tmp_path) == set()


def test_files_in_workdir_belong_to_the_caller(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    script = (
        "import os, torch; "
        "open('made-in-shell.txt', 'w').write(os.getcwd() + ' ' + torch.__version__)"
    )
    done = envforge("shell", "cpu", "--", "python", "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    made = tmp_path / "made-in-shell.txt"
    assert made.read_text().startswith("/workspace 2.13.0")
    st = made.stat()
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


def test_env_caches_and_home_are_writable(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    script = (
        'for d in "$MIOPEN_USER_DB_PATH" "$MIOPEN_CUSTOM_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR" '
        '"$TRITON_CACHE_DIR" "$HOME"; do touch "$d/probe-write" || exit 3; done; '
        'echo "nproc=$NPROC_PER_NODE"; command -v python'
    )
    done = envforge("shell", "cpu", "--", "sh", "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nproc=1" in done.stdout
    assert "/bin/python" in done.stdout


def test_a_signal_reaches_the_command(built_cpu: Built, envforge: Envforge, tmp_path: Path) -> None:
    """SIGTERM to envforge is forwarded: the command's trap runs, its code comes back."""

    script = "trap 'exit 42' TERM; echo ready; while :; do sleep 0.2; done"
    with subprocess.Popen(
        [sys.executable, "-m", "envforge", "shell", "cpu", "--", "sh", "-c", script],
        cwd=tmp_path,
        env=envforge.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 42
    assert containers_mounting(tmp_path) == set()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_a_command_without_a_handler(
    built_cpu: Built, envforge: Envforge, tmp_path: Path, sig: signal.Signals
) -> None:
    """`sleep` has no handler: under docker's init (not PID 1) the signal ends it, the status
    is 128+N as outside a container, and the container is gone."""
    with subprocess.Popen(
        [sys.executable, "-m", "envforge", "shell", "cpu", "--", "sh", "-c",
         "echo ready; exec sleep 600"],
        cwd=tmp_path,
        env=envforge.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.5)
            sent = time.monotonic()
            proc.send_signal(sig)
            code = proc.wait(timeout=60)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 128 + sig
    assert containers_mounting(tmp_path) == set()
    print(f"{sig.name}: envforge exited after {took:.3f}s")


@pytest.mark.parametrize(
    ("given", "kib"), [((), 8 * 1024 * 1024), (("--shm-size", "256m"), 262144)]
)
def test_a_cpu_container_gets_a_dev_shm_that_dataloader_workers_fit_in(
    built_cpu: Built, envforge: Envforge, tmp_path: Path, given: tuple[str, ...], kib: int
) -> None:
    """Docker's default /dev/shm is 64 MB: a DataLoader with two workers dies with "No space
    left on device". A cpu container gets 8g unless --shm-size says otherwise."""
    script = "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize // 1024)"
    done = envforge("shell", "cpu", *given, "--", "python", "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) == kib


@pytest.mark.parametrize("name", ["q,consistency=cached", 'a"b,c=d e'])
def test_the_working_folder_is_mounted_whatever_its_name(
    built_cpu: Built, envforge: Envforge, tmp_path: Path, name: str
) -> None:
    """Issue 27 class 6: from a folder named ``q,consistency=cached`` the unquoted --mount
    string mounted its sibling ``q`` read-write at /workspace."""
    sibling = tmp_path / "q"
    sibling.mkdir()
    (sibling / "which").write_text("sibling")
    folder = tmp_path / name
    folder.mkdir()
    (folder / "which").write_text("asked")
    script = "cat /workspace/which && touch /workspace/made"
    done = envforge("shell", "cpu", "--", "sh", "-c", script, cwd=folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "asked"
    assert (folder / "made").exists()
    assert not (sibling / "made").exists()
