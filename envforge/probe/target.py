"""Probe targets: where the worker runs, and the contract every target honours.

The runner does not care where the worker runs. A *target* starts the worker (the text
of one file, :func:`envforge.probe.bundle.worker_source`, plus a JSON spec) somewhere and
hands back a *handle* that streams the worker's stdout line by line. Two implementations exist:
:class:`envforge.probe.local.LocalPythonTarget` (an interpreter on this host: the current
one, or a virtualenv's) and the Docker backend's container target
(``envforge.backends.docker.probe_target``). A target must honour this contract:

``ProbeTarget.description``
    One line naming what is probed, for reports: an interpreter path, an image id.

``ProbeTarget.start(worker_source, spec_json, env)``
    A context manager. On entry, start ``python WORKER SPEC`` (SPEC: the JSON text, a path
    to a file holding it, or ``-`` with the JSON on stdin; ``python -c SOURCE SPEC`` works
    too) with ``env`` added to the target's own environment, and yield a
    :class:`WorkerHandle`. On exit, by any route (KeyboardInterrupt included), everything
    the target started must be gone: a process group stopped and reaped, a container
    killed and removed. Raise :class:`envforge.errors.Unavailable` when the target cannot
    start at all (no interpreter, no engine).

``WorkerHandle.read_line(timeout)``
    The worker's next stdout line without its newline; ``None`` when ``timeout`` seconds
    pass without one; ``""`` at end of stream (the worker closed stdout or died). A
    process the worker left behind may hold stdout open: the end of the worker process
    (plus a short grace) must count as end of stream too.

``WorkerHandle.stop()``
    Kill everything now, whatever session a descendant moved to (the local target walks
    the process tree, then TERM, short grace, KILL to the group; or kill the container),
    reap; idempotent.

``WorkerHandle.exit_status()``
    After end of stream or :meth:`stop`: ``(returncode, signal_name)``. ``signal_name`` is
    ``"SIGSEGV"`` and the like when the worker died of a signal (containers: exit code
    128+N means signal N, see :func:`container_exit_status`), else None.

``WorkerHandle.stderr_tail(lines=20)``
    The last lines the worker wrote to stderr (it must be drained continuously so the
    worker never blocks on a full pipe).

Optionally a handle may expose ``oom_killed: bool`` (Docker's ``State.OOMKilled``); a
worker killed by SIGKILL with ``oom_killed`` true is classified ``oom``.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

from envforge.core.proc import signal_name


class WorkerHandle(Protocol):
    def read_line(self, timeout: float) -> str | None: ...

    def stop(self) -> None: ...

    def exit_status(self) -> tuple[int | None, str | None]: ...

    def stderr_tail(self, lines: int = 20) -> str: ...


class ProbeTarget(Protocol):
    @property
    def description(self) -> str: ...

    def start(
        self, worker_source: str, spec_json: str, env: Mapping[str, str]
    ) -> AbstractContextManager[WorkerHandle]: ...


def container_exit_status(code: int | None) -> tuple[int | None, str | None]:
    """A container's exit code → (code, signal name): 139 → (139, "SIGSEGV")."""
    if code is not None and 128 < code < 128 + 65:
        return code, signal_name(-(code - 128))
    return code, None


# --------------------------------------------------------------------------- line queue


class LineQueue:
    """Lines a reader thread hands to ``read_line``; ``""`` only ever means end of stream.

    Shared by every ``WorkerHandle`` (local process, container). Blank lines carry no event
    and are dropped, so the end-of-stream answer cannot be confused with one.
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._eof = False

    def put(self, line: str) -> None:
        if line:
            self._queue.put(line)

    def close(self) -> None:
        """Called once by the reader thread when its stream ends, however it ends."""
        self._queue.put(None)

    def read_line(self, timeout: float) -> str | None:
        if self._eof:
            return ""
        try:
            line = self._queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        if line is None:
            self._eof = True
            return ""
        return line
