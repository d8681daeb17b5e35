"""The local target: the worker as a child process of this host's (or a venv's) Python.

See :mod:`envforge.probe.target` for the contract it honours.
"""

from __future__ import annotations

import collections
import os
import re
import secrets
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envforge.core.proc import (
    is_running,
    kill_marked,
    kill_tree,
    signal_name,
    spawn,
    start_time,
    stop_group,
)
from envforge.errors import Unavailable
from envforge.probe.report import printable
from envforge.probe.target import LineQueue

#: TERM → KILL grace for a hung worker; short, since a hung driver call rarely ends on TERM.
HANG_GRACE = 0.5
STDERR_KEEP = 200
#: Seconds to wait for the worker to exit after it said "done" or closed stdout.
EXIT_WAIT = 5.0
#: Seconds the worker's pipes may stay open after the worker process exited (a process
#: it left behind holds them); then the stream counts as ended.
EXIT_GRACE = 0.5
#: How often (ms) the pump threads look whether the worker is gone or the handle closed.
PUMP_POLL_MS = 100
#: Longest event line kept (a snapshot is a few kB) and longest stderr line kept.
EVENT_LINE_MAX = 1 << 20
STDERR_LINE_MAX = 4096
#: Environment variable marking every process a local probe starts (value: a token).
RUN_MARK = "ENVFORGE_PROBE_RUN"


class _LocalHandle:
    """The worker as a local child process, with its two pipes drained by poll-driven threads.

    End of stream is not trusted alone: a process the worker left behind may hold the
    pipes open for ever. The stream also ends once the worker process itself has exited
    and nothing more arrived for ``exit_grace`` seconds. The pump threads never block on
    a read, so closing the pipes cannot hang either.
    """

    def __init__(
        self, proc: subprocess.Popen[bytes], grace: float, exit_grace: float = EXIT_GRACE
    ) -> None:
        self._proc = proc
        self._grace = grace
        self._exit_grace = exit_grace
        self._lines = LineQueue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_KEEP)
        self._stopped = False
        self._closing = threading.Event()
        self._out = threading.Thread(
            target=self._pump,
            args=(proc.stdout, self._lines.put, EVENT_LINE_MAX, self._lines.close),
            name="probe-stdout",
            daemon=True,
        )
        self._err = threading.Thread(
            target=self._pump,
            args=(proc.stderr, self._stderr.append, STDERR_LINE_MAX, None),
            name="probe-stderr",
            daemon=True,
        )
        self._out.start()
        self._err.start()

    def _pump(
        self,
        stream: IO[bytes] | None,
        sink: Callable[[str], None],
        limit: int,
        at_end: Callable[[], None] | None,
    ) -> None:
        """Split ``stream`` into lines for ``sink`` until it ends, or the worker is long gone."""
        buffer = b""
        exited_at: float | None = None
        try:
            if stream is None:
                return
            fd = stream.fileno()
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            while not self._closing.is_set():
                if poller.poll(PUMP_POLL_MS):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for raw in lines:
                        sink(raw[:limit].decode("utf-8", errors="replace").rstrip("\r"))
                    if len(buffer) > limit:  # a line without end: keep its start only
                        sink(buffer[:limit].decode("utf-8", errors="replace"))
                        buffer = b""
                    continue
                if self._proc.poll() is not None:
                    exited_at = exited_at if exited_at is not None else time.monotonic()
                    if time.monotonic() - exited_at >= self._exit_grace:
                        break  # the worker is gone; whoever holds the pipe is not ours to wait for
        except (OSError, ValueError):
            pass
        finally:
            if buffer:
                sink(buffer[:limit].decode("utf-8", errors="replace"))
            if at_end is not None:
                at_end()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def read_line(self, timeout: float) -> str | None:
        return self._lines.read_line(timeout)

    def stop(self) -> None:
        """Kill the worker's whole tree (whatever session it moved to), then its group; reap."""
        if not self._stopped:
            self._stopped = True
            if self._proc.poll() is None:
                kill_tree(self._proc.pid)
            stop_group(self._proc, self._grace)

    def _join(self, timeout: float = 2.0) -> None:
        self._out.join(timeout=timeout)
        self._err.join(timeout=timeout)

    def close(self) -> None:
        """Stop the worker, end the pump threads and close our ends of its pipes."""
        self.stop()
        self._closing.set()
        self._join()
        if not (self._out.is_alive() or self._err.is_alive()):
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    stream.close()

    def exit_status(self) -> tuple[int | None, str | None]:
        try:
            self._proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            self.stop()
        self._err.join(timeout=self._exit_grace + 1.0)  # the last words on stderr
        code = self._proc.returncode
        return code, signal_name(code)

    def stderr_tail(self, lines: int = 20) -> str:
        if self._proc.poll() is not None:
            self._err.join(timeout=self._exit_grace + 0.5)
        return "\n".join(list(self._stderr)[-lines:])


#: Temporary folders of local probes: ``envforge-probe-<owner pid>.<owner start time>-*``.
FOLDER_PREFIX = "envforge-probe-"
_OWNED = re.compile(r"^envforge-probe-(\d+)\.(\d+)-")
#: A folder without an owner in its name (older envforge) is swept after this many seconds.
UNOWNED_MAX_AGE = 24 * 3600.0


def folder_prefix(pid: int, start: int | None) -> str:
    """The temporary folder prefix naming its owner: ``envforge-probe-1234.56789-``."""
    return f"{FOLDER_PREFIX}{pid}.{start or 0}-"


def stale_folder(name: str, age: float, running: Callable[[int, int | None], bool]) -> bool:
    """Whether a probe folder called ``name`` was left behind by an envforge that is gone.

    ``running(pid, start)`` tells whether that process still runs (``start`` None: unknown).
    """
    if not name.startswith(FOLDER_PREFIX):
        return False
    owned = _OWNED.match(name)
    if owned is None:
        return age > UNOWNED_MAX_AGE
    pid, start = int(owned.group(1)), int(owned.group(2))
    return not running(pid, start or None)


def sweep_stale_folders(parent: Path) -> list[Path]:
    """Remove probe folders in ``parent`` whose envforge died (SIGKILL) before removing them."""
    removed: list[Path] = []
    now = time.time()
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(FOLDER_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if stale_folder(entry.name, now - info.st_mtime, is_running):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


@dataclass(frozen=True)
class LocalPythonTarget:
    """A Python interpreter on this host, run in a process group of its own.

    Everything the worker starts carries ``ENVFORGE_PROBE_RUN=<token>`` in its
    environment. When the probe ends, the worker's process tree is killed (see
    :meth:`_LocalHandle.stop`), then every process still carrying the token: a daemon that
    escaped the tree (its parent died before the tree was walked) is found that way.
    """

    python: str = sys.executable
    #: The worker's base environment; None → this process's environment.
    env: Mapping[str, str] | None = None
    grace: float = HANG_GRACE

    @property
    def description(self) -> str:
        return f"python {printable(self.python)}"

    def _resolve(self) -> str:
        found = shutil.which(self.python) if os.sep not in self.python else self.python
        if not found or not os.access(found, os.X_OK) or os.path.isdir(found):
            raise Unavailable(
                f"interpreter {printable(self.python)!r} not found or not executable",
                hint="pass --python PATH to a Python interpreter (e.g. VENV/bin/python)",
            )
        return found

    @contextmanager
    def start(
        self, worker_source: str, spec_json: str, env: Mapping[str, str]
    ) -> Iterator[_LocalHandle]:
        python = self._resolve()
        parent = Path(tempfile.gettempdir())
        sweep_stale_folders(parent)
        me = os.getpid()
        folder = Path(tempfile.mkdtemp(prefix=folder_prefix(me, start_time(me)), dir=parent))
        token = secrets.token_hex(16)
        try:
            worker = folder / "envforge_probe_worker.py"
            spec = folder / "spec.json"
            worker.write_text(worker_source, encoding="utf-8")
            spec.write_text(spec_json, encoding="utf-8")
            full_env = dict(os.environ if self.env is None else self.env)
            full_env.update(env)
            full_env.setdefault("PYTHONIOENCODING", "utf-8")
            full_env[RUN_MARK] = token
            with ExitStack() as stack:
                stack.callback(kill_marked, RUN_MARK, token)
                try:
                    proc = stack.enter_context(
                        spawn(
                            [python, str(worker), str(spec)],
                            env=full_env,
                            cwd=str(folder),
                            grace=self.grace,
                        )
                    )
                except (FileNotFoundError, PermissionError) as exc:
                    raise Unavailable(
                        f"cannot start {python}: {exc.strerror or exc}",
                        hint="pass --python PATH to a working Python interpreter",
                    ) from None
                handle = _LocalHandle(proc, self.grace)
                stack.callback(handle.close)
                yield handle
        finally:
            shutil.rmtree(folder, ignore_errors=True)
