"""The one helper for running processes under deadlines.

Every child envforge starts goes through here. Children run in a session (process group)
of their own so that a hang can be ended for the whole tree: TERM to the group, a grace
period, then KILL, then reap. A Ctrl-C in envforge ends the group the same way before
the KeyboardInterrupt travels on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

#: Seconds between TERM and KILL when a group is stopped.
DEFAULT_GRACE = 2.0


@dataclass(frozen=True)
class Completed:
    """What a finished (or stopped) child left behind."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    @property
    def signal_name(self) -> str | None:
        """``SIGSEGV`` and the like when the child died of a signal, else None."""
        return signal_name(self.returncode)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def signal_name(returncode: int | None) -> str | None:
    """Name of the signal behind a negative return code (``-11`` → ``SIGSEGV``)."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def stop_group(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace: float = DEFAULT_GRACE
) -> None:
    """End ``proc`` and every process in its group: TERM, wait ``grace``, KILL, reap."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    # The leader may be gone while children of its group live on: KILL the group anyway.
    _signal_group(proc.pid, signal.SIGKILL)
    # A process stuck in the kernel (D state) may outlive KILL; there is nothing more to do.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@contextmanager
def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
    stdout: int | None = subprocess.PIPE,
    stderr: int | None = subprocess.PIPE,
    grace: float = DEFAULT_GRACE,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` in a new process group; the group is always stopped on exit.

    For callers that stream the child's output themselves (the probe runner). Leaving
    the block by any route, KeyboardInterrupt included, stops and reaps the whole group.
    """
    proc = subprocess.Popen(  # argv is built by envforge, never a shell string
        list(argv),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        stop_group(proc, grace)


def run(
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    grace: float = DEFAULT_GRACE,
) -> Completed:
    """Run ``argv`` to completion or until ``timeout`` seconds, capturing text output.

    A child still running at the deadline is stopped with its whole group and reported
    with ``timed_out=True``; it never raises for a non-zero exit. Raises
    :class:`FileNotFoundError` when the program does not exist.
    """
    start = time.monotonic()
    with spawn(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        grace=grace,
    ) as proc:
        timed_out = False
        try:
            out, err = proc.communicate(
                input=input.encode() if input is not None else None, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_group(proc, grace)
            out, err = proc.communicate()
        seconds = time.monotonic() - start
        returncode = proc.returncode
    return Completed(
        argv=tuple(argv),
        returncode=returncode if returncode is not None else -signal.SIGKILL,
        stdout=out.decode(errors="replace") if out else "",
        stderr=err.decode(errors="replace") if err else "",
        seconds=seconds,
        timed_out=timed_out,
    )
