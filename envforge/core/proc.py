"""The one helper for running processes under deadlines.

Every child envforge starts goes through here. Children run in a session (process group)
of their own so that a hang can be ended for the whole tree: TERM to the group, a grace
period, then KILL, then reap. A Ctrl-C in envforge ends the group the same way before
the KeyboardInterrupt travels on.

A process group does not hold everything: a grandchild may start a session of its own
(``setsid``) or double-fork into a daemon. For those, :func:`kill_tree` walks the process
tree in ``/proc`` (freeze every descendant with SIGSTOP, then SIGKILL them all) and
:func:`kill_marked` finds processes by a marker variable in their environment, which
survives re-parenting. Both are no-ops where there is no ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: Seconds between TERM and KILL when a group is stopped.
DEFAULT_GRACE = 2.0
#: Rounds of "find new descendants, freeze them" before the tree is killed (a fork bomb
#: outruns any bound; this one is far above what a misbehaving check does).
TREE_ROUNDS = 200
PROC = Path("/proc")


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


@contextmanager
def watcher(argv: Sequence[str]) -> Iterator[subprocess.Popen[bytes] | None]:
    """Start ``argv`` as a watcher that outlives this process: its own session (a Ctrl-C,
    a hang-up or a ``kill`` of this process group never reaches it), its stdin a pipe
    whose only writer is this process, so it reads EOF the moment this process ends, by
    any route, SIGKILL included. Leaving the block writes ``done`` and closes the pipe
    (the watcher then has nothing to do) and reaps it. None when it cannot be started:
    the caller goes on without a watcher."""
    try:
        proc = subprocess.Popen(  # argv is built by envforge, never a shell string
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        yield None
        return
    try:
        yield proc
    finally:
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.write(b"done\n")
            proc.stdin.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


# --------------------------------------------------------------------------- process tree


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` that envforge uses."""

    pid: int
    state: str  # R, S, D, Z, T, ...
    ppid: int
    pgid: int
    sid: int
    #: Start time in clock ticks after boot: with the pid, it names a process uniquely.
    start: int

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(text: str) -> ProcStat | None:
    """Parse one ``/proc/PID/stat`` line; None when it is not one (the name may hold ``)``)."""
    head, sep, rest = text.rpartition(")")
    pid_text = head.split("(", 1)[0].strip()
    fields = rest.split()
    if not sep or not pid_text.isdigit() or len(fields) < 20:
        return None
    try:
        return ProcStat(
            pid=int(pid_text),
            state=fields[0],
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            sid=int(fields[3]),
            start=int(fields[19]),
        )
    except ValueError:
        return None


def read_stat(pid: int, root: Path = PROC) -> ProcStat | None:
    try:
        data = (root / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    return parse_stat(data.decode("ascii", errors="replace"))


def process_table(root: Path = PROC) -> dict[int, ProcStat]:
    """Every process visible in ``root`` (``/proc``); empty where there is none."""
    table: dict[int, ProcStat] = {}
    try:
        names = [entry.name for entry in os.scandir(root)]
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            stat = read_stat(int(name), root)
            if stat is not None:
                table[stat.pid] = stat
    return table


def descendants(pid: int, table: Mapping[int, ProcStat]) -> list[int]:
    """Every process below ``pid`` in ``table`` (children first, then theirs), zombies included."""
    children: dict[int, list[int]] = {}
    for stat in table.values():
        if stat.pid != stat.ppid:
            children.setdefault(stat.ppid, []).append(stat.pid)
    found: list[int] = []
    seen = {pid}
    todo = [pid]
    while todo:
        for child in sorted(children.get(todo.pop(0), ())):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def start_time(pid: int, root: Path = PROC) -> int | None:
    """The process's start time (clock ticks after boot), None when it is gone or unknown."""
    stat = read_stat(pid, root)
    return stat.start if stat is not None else None


def is_running(pid: int, start: int | None = None, root: Path = PROC) -> bool:
    """True while ``pid`` lives (not a zombie) and, if ``start`` is given, is that same process."""
    stat = read_stat(pid, root)
    if stat is None:
        if root.is_dir():
            return False
        try:  # no /proc here: ask the kernel
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return not stat.zombie and (start is None or stat.start == start)


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_pids(found: Iterable[int], table: Mapping[int, ProcStat], root: Path = PROC) -> list[int]:
    """Freeze (SIGSTOP) then SIGKILL ``found`` and everything born below them meanwhile.

    Freezing first means no process can fork or re-parent its children away while the
    tree is being collected. Returns the pids signalled (live ones only).
    """
    frozen: list[int] = []
    seen: set[int] = set()
    todo = [p for p in found if p in table and not table[p].zombie]
    for _ in range(TREE_ROUNDS):
        new = [p for p in todo if p not in seen and p != os.getpid()]
        if not new:
            break
        for pid in new:
            seen.add(pid)
            frozen.append(pid)
            _kill(pid, signal.SIGSTOP)
        table = process_table(root)
        todo = [
            p for pid in new for p in descendants(pid, table) if p in table and not table[p].zombie
        ]
    for pid in frozen:
        _kill(pid, signal.SIGKILL)
    return frozen


def kill_tree(pid: int, root: Path = PROC) -> list[int]:
    """SIGKILL every live descendant of ``pid`` (not ``pid`` itself); returns their pids.

    Only what is still below ``pid`` can be found: run it while ``pid`` lives (a
    sub-reaper keeps orphans below it), and use :func:`kill_marked` for the rest.
    """
    killed: list[int] = []
    for _ in range(5):  # anything that slipped in between two scans
        table = process_table(root)
        found = [p for p in descendants(pid, table) if not table[p].zombie and p not in killed]
        if not found:
            break
        killed.extend(kill_pids(found, table, root))
        time.sleep(0.01)
    return killed


def environ_has(pid: int, key: str, value: str, root: Path = PROC) -> bool:
    """True when process ``pid`` was started with ``key=value`` in its environment."""
    try:
        data = (root / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{key}={value}".encode() in data.split(b"\0")


def kill_marked(key: str, value: str, root: Path = PROC) -> list[int]:
    """SIGKILL every process started with ``key=value`` in its environment (and below it).

    A marker variable is inherited through setsid and double forks, so this finds
    what a worker left behind even after its parent died. Never this process.
    """
    killed: list[int] = []
    for _ in range(5):
        table = process_table(root)
        found = [
            p
            for p, stat in table.items()
            if p != os.getpid()
            and not stat.zombie
            and p not in killed
            and environ_has(p, key, value, root)
        ]
        if not found:
            break
        killed.extend(kill_pids(found, table, root))
        time.sleep(0.01)
    return killed
