"""Issue 22 class 3: every file output refuses a target that is not a regular file.

Real processes (``python -m envforge``) against real special files made in a temporary
folder: character and block device nodes (``mknod``, as root: a copy of /dev/null's
numbers, and an unused loop device's), FIFOs, a listening unix socket, and symbolic links
to a FIFO and to a device. /dev itself is never written. Each case asserts exit 2, one
``envforge: error:`` line naming the path, no traceback, no hang (a FIFO without a reader
would block an open for writing), the node still there with the same type and device
numbers, and no temporary file left beside it.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: /dev/null's numbers (1, 3) and an unused loop device's (7, 250): only the node is made.
CHAR_DEV = os.makedev(1, 3)
BLOCK_DEV = os.makedev(7, 250)


def _make_char(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o666, CHAR_DEV)


def _make_block(path: Path) -> None:
    os.mknod(path, stat.S_IFBLK | 0o600, BLOCK_DEV)


def _make_fifo(path: Path) -> None:
    os.mkfifo(path)


def _make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    _SOCKETS.append(sock)


def _make_link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("real-fifo"))
    os.symlink("real-fifo", path)


def _make_link_to_char(path: Path) -> None:
    _make_char(path.with_name("real-char"))
    os.symlink(path.with_name("real-char"), path)


_SOCKETS: list[socket.socket] = []

KINDS: dict[str, Callable[[Path], None]] = {
    "char-device": _make_char,
    "block-device": _make_block,
    "fifo": _make_fifo,
    "socket": _make_socket,
    "link-to-fifo": _make_link_to_fifo,
    "link-to-char-device": _make_link_to_char,
}


@dataclass(frozen=True)
class Output:
    """A command and where, relative to the work folder, the special file goes."""

    target: str
    args: tuple[str, ...]  # {T}: the target path, {W}: the work folder


OUTPUTS: dict[str, Output] = {
    "solve --write": Output("out.yaml", ("solve", "gfx1100", "--write", "{T}")),
    "evidence export -o": Output("bundle.jsonl", ("evidence", "export", "-o", "{T}")),
    "render -o": Output("site/cpu/Dockerfile", ("render", "cpu", "-o", "{W}/site")),
    "knowledge refresh -o": Output(
        "overlay.yaml",
        (
            "knowledge",
            "refresh",
            "--index",
            "http://127.0.0.1:9/",
            "--no-pytorch-index",
            "-o",
            "{T}",
        ),
    ),
    "lock -o": Output("cpu.lock", ("lock", "cpu", "-o", "{T}")),
    "probe --report": Output("rep/probe.json", ("probe", "--report", "{W}/rep")),
    "probe --summary": Output("summary.md", ("probe", "--summary", "{T}")),
    "keys generate -o": Output("keys/envforge.key", ("keys", "generate", "-o", "{W}/keys")),
    "matrix -o": Output("site/index.html", ("matrix", "--evidence", "{W}/ev", "-o", "{W}/site")),
    "fleet plan -o": Output(
        "plan/plan.json",
        (
            "fleet",
            "plan",
            "--engine",
            "slurm",
            "--recipe",
            "cpu",
            "--backend",
            "venv",
            "-o",
            "{W}/plan",
        ),
    ),
}

#: Every kind for three outputs; a FIFO and a device (the two that hang or destroy) for all.
CASES = [(o, k) for o in ("solve --write", "evidence export -o", "render -o") for k in KINDS] + [
    (o, k)
    for o in sorted(OUTPUTS)
    if o not in ("solve --write", "evidence export -o", "render -o")
    for k in ("fifo", "char-device")
]


@pytest.fixture
def work() -> Iterator[Path]:
    # short: a unix socket's path must fit in 108 bytes
    folder = Path(tempfile.mkdtemp(prefix="efs-", dir="/tmp"))
    (folder / "ev").mkdir()
    try:
        yield folder
    finally:
        while _SOCKETS:
            _SOCKETS.pop().close()
        shutil.rmtree(folder, ignore_errors=True)


def _kind(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return stat.S_IFMT(st.st_mode), st.st_rdev


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize(("output", "kind"), CASES, ids=[f"{o}-{k}" for o, k in CASES])
def test_an_output_onto_a_special_file_is_exit_2_and_leaves_it_alone(
    work: Path, output: str, kind: str
) -> None:
    case = OUTPUTS[output]
    target = work / case.target
    target.parent.mkdir(parents=True, exist_ok=True)
    KINDS[kind](target)
    before = _kind(target)
    listing = sorted(p.name for p in target.parent.iterdir())
    args = [a.replace("{T}", str(target)).replace("{W}", str(work)) for a in case.args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(work / "home")
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,  # a FIFO opened for writing without a reader would block for ever
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("envforge: error:")]
    assert len(errors) == 1, done.stderr
    assert str(target) in errors[0]
    assert _kind(target) == before  # not replaced, not removed
    assert sorted(p.name for p in target.parent.iterdir()) == listing  # nothing left beside
