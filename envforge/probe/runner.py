"""The host side of the probe: start the worker in a target, enforce deadlines, classify.

Targets
=======
The runner does not care where the worker runs. A *target* starts the worker (the source
of ``worker.py`` plus a JSON spec) somewhere and hands back a *handle* that streams the
worker's stdout line by line. Two implementations exist: :class:`LocalPythonTarget` here
(an interpreter on this host: the current one, or a virtualenv's) and the Docker backend's
container target (``envforge.backends.docker.probe_target``). A target must honour this contract:

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

import collections
import dataclasses
import os
import queue
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
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Any, Protocol

from envforge import __version__
from envforge.errors import Interrupted, Unavailable
from envforge.jsonlimits import BadJSON, loads
from envforge.probe.report import (
    ProbeReport,
    ReportHost,
    Status,
    StepResult,
    host_info,
    printable,
    utc_now,
)
from envforge.probe.spec import ProbeSpec
from envforge.proc import (
    is_running,
    kill_marked,
    kill_tree,
    signal_name,
    spawn,
    start_time,
    stop_group,
)

#: TERM → KILL grace for a hung worker; short, since a hung driver call rarely ends on TERM.
HANG_GRACE = 0.5
STDERR_KEEP = 200
#: The worker writes this, plus the step name, to stderr as each step starts.
STDERR_MARK = "[envforge-probe] step "
#: Statuses the worker itself reports; hang and crash come from the runner.
WORKER_STATUSES: tuple[Status, ...] = ("pass", "fail", "oom", "no-device", "skip")
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


class ProbeListener(Protocol):
    """Live progress: called as steps start and finish (the CLI's table)."""

    def step_started(self, step: str, deadline: float) -> None: ...

    def step_finished(self, result: StepResult) -> None: ...


def worker_source() -> str:
    """The worker file's text, to ship into any target."""
    return resources.files("envforge.probe").joinpath("worker.py").read_text(encoding="utf-8")


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


# --------------------------------------------------------------------------- local target


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
            target=self._pump, args=(proc.stderr, self._stderr.append, STDERR_LINE_MAX, None),
            name="probe-stderr", daemon=True,
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


def stale_folder(
    name: str, age: float, running: Callable[[int, int | None], bool]
) -> bool:
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


# --------------------------------------------------------------------------- runner


class _Run:
    """State of one probe run: which steps ended, which one is running."""

    def __init__(self, spec: ProbeSpec, listener: ProbeListener | None) -> None:
        self.spec = spec
        self.listener = listener
        self.results: dict[str, StepResult] = {}
        self.current: str | None = None
        self.current_started = 0.0
        self.snapshot: dict[str, Any] = {}
        self.hello = False
        self.done = False

    def next_step(self) -> str | None:
        for name in self.spec.steps:
            if name not in self.results and name != self.current:
                return name
        return None

    def finish(self, result: StepResult) -> None:
        if not result.detail.isprintable():
            result = dataclasses.replace(result, detail=printable(result.detail))
        self.results[result.name] = result
        if self.current == result.name:
            self.current = None
        if self.listener is not None:
            self.listener.step_finished(result)

    def start(self, step: str, deadline: float, now: float) -> None:
        self.current = step
        self.current_started = now
        if self.listener is not None:
            self.listener.step_started(step, deadline)


def run_probe(
    spec: ProbeSpec,
    target: ProbeTarget,
    *,
    listener: ProbeListener | None = None,
    host: ReportHost | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeReport:
    """Run the probe described by ``spec`` in ``target``; always returns a full report.

    Every step of ``spec.steps`` gets a result. Raises :class:`Interrupted` on Ctrl-C,
    after the target stopped everything it started; :class:`Unavailable` when the
    target cannot start.
    """
    created = utc_now()
    began = clock()
    run = _Run(spec, listener)
    try:
        with target.start(worker_source(), spec.worker_json(), spec.env_map) as handle:
            host = host if host is not None else host_info()
            _drive(run, handle, clock)
    except KeyboardInterrupt:
        raise Interrupted(
            "probe interrupted; the worker was stopped", hint="run envforge probe again"
        ) from None
    steps = tuple(run.results[name] for name in spec.steps)
    return ProbeReport(
        steps=steps,
        level=spec.level,
        target=target.description,
        host=host if host is not None else host_info(),
        envforge_version=__version__,
        created=created,
        seconds=clock() - began,
        recipe_name=spec.recipe_name,
        recipe_hash=spec.recipe_hash,
        snapshot=run.snapshot,
    )


def _drive(run: _Run, handle: WorkerHandle, clock: Callable[[], float]) -> None:
    spec = run.spec
    deadline_at = clock() + spec.startup_deadline
    waiting_for = "start"  # what the current deadline guards: start, step, gap, exit
    while True:
        line = handle.read_line(max(deadline_at - clock(), 0.0))
        if line is None:
            if clock() < deadline_at:
                continue
            _on_hang(run, handle, clock, waiting_for)
            return
        if line == "":
            _on_exit(run, handle, clock)
            return
        event = _parse(line)
        if event is None:
            continue  # not ours (nothing else should reach stdout; tolerate it)
        kind = event.get("event")
        now = clock()
        if kind == "hello":
            run.hello = True
            deadline_at = now + spec.startup_deadline
        elif kind == "start":
            step = str(event.get("step"))
            deadline = _float(event.get("deadline")) or spec.deadline(step)
            run.start(step, deadline, now)
            deadline_at = now + deadline
            waiting_for = "step"
        elif kind == "end":
            result = _end_result(event, now - run.current_started)
            if result.name == "env-snapshot" and isinstance(event.get("data"), dict):
                run.snapshot = dict(event["data"])
            run.finish(result)
            deadline_at = now + spec.step_timeout
            waiting_for = "gap"
        elif kind == "done":
            run.done = True
            deadline_at = now + EXIT_WAIT
            waiting_for = "exit"
    # not reached


#: Bytes one line of the worker's output may have to be read as a message.
MAX_LINE_BYTES = 4 * 1024 * 1024


def _parse(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = loads(line, max_bytes=MAX_LINE_BYTES)
    except BadJSON:  # what the image's worker printed: any shape, any depth
        return None
    return data if isinstance(data, dict) else None


def _float(value: object) -> float | None:
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    return None


def _end_result(event: Mapping[str, Any], measured: float) -> StepResult:
    raw = event.get("status")
    status: Status = "fail"
    for known in WORKER_STATUSES:
        if raw == known:
            status = known
    seconds = event.get("seconds")
    return StepResult(
        name=str(event.get("step")),
        status=status,
        seconds=float(seconds) if isinstance(seconds, (int, float)) else measured,
        detail=str(event.get("detail") or ""),
    )


def _skip_rest(run: _Run, why: str) -> None:
    for name in run.spec.steps:
        if name not in run.results:
            run.finish(StepResult(name=name, status="skip", seconds=0.0, detail=why))


def _on_hang(run: _Run, handle: WorkerHandle, clock: Callable[[], float], waiting_for: str) -> None:
    handle.stop()
    if waiting_for == "exit":
        # Every result is in; the worker only failed to exit (a runtime's teardown hung).
        _skip_rest(run, "skipped: worker did not finish")
        return
    now = clock()
    step = run.current or run.next_step()
    if step is not None:
        if run.current is not None:
            seconds = now - run.current_started
            detail = f"no result within the {run.spec.deadline(step):g}s deadline; worker stopped"
        elif not run.hello:
            seconds = 0.0
            detail = (
                f"worker did not start within {run.spec.startup_deadline:g}s; worker stopped"
            )
        else:
            seconds = 0.0
            detail = "worker stopped responding between steps; worker stopped"
        tail = _tail(handle)
        if tail:
            detail += f" | stderr: {tail}"
        run.finish(StepResult(name=step, status="hang", seconds=seconds, detail=detail))
        _skip_rest(run, f"skipped: {step} hung")
    else:
        _skip_rest(run, "skipped: worker hung")


def _on_exit(run: _Run, handle: WorkerHandle, clock: Callable[[], float]) -> None:
    code, sig = handle.exit_status()
    if run.done and run.current is None:
        _skip_rest(run, "skipped: the worker did not run this step")
        return
    step = run.current or run.next_step()
    if step is None:
        return
    tail = _tail(handle)
    status: Status = "crash"
    if not sig and code is not None and 128 < code < 128 + 65:
        # A wrapper (a shell, a PID 1 supervisor, a container runtime) reporting signal N
        # as exit code 128+N.
        sig = container_exit_status(code)[1]
        sig = f"{sig} (exit code {code})" if sig else None
    if sig:
        how = sig
        if sig.startswith("SIGKILL") and getattr(handle, "oom_killed", False):
            status, how = "oom", "SIGKILL (out of memory: killed by the kernel's OOM killer)"
        elif sig.startswith("SIGKILL"):
            how = "SIGKILL (killed from outside; the kernel's OOM killer does this)"
    elif code is None:
        how = "worker ended"
    else:
        how = f"worker exited with code {code}"
    if status == "crash" and "out of memory" in tail.lower():
        status = "oom"
    where = "" if run.current is not None else " before the step started"
    detail = f"{how}{where}" + (f": {tail}" if tail else "")
    seconds = clock() - run.current_started if run.current is not None else 0.0
    run.finish(StepResult(name=step, status=status, seconds=seconds, detail=detail))
    _skip_rest(run, f"skipped: worker {'crashed' if status == 'crash' else 'died'} in {step}")


def _tail(handle: WorkerHandle, lines: int = 8, limit: int = 600) -> str:
    """The useful end of the worker's stderr, on one line.

    After a fatal signal the worker's faulthandler prints a stack; keep the lines just
    before it (the runtime's own message), the "Fatal Python error" line and the innermost
    frame of the crashing thread instead of the whole dump.
    """
    text = handle.stderr_tail(STDERR_KEEP)
    all_lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    marks = [i for i, ln in enumerate(all_lines) if ln.startswith(STDERR_MARK)]
    if marks:  # only what the last step wrote
        all_lines = all_lines[marks[-1] + 1:]
    fatal = max((i for i, ln in enumerate(all_lines) if ln.startswith("Fatal Python error")),
                default=None)
    if fatal is None:
        kept = all_lines[-lines:]
    else:
        kept = all_lines[max(fatal - 3, 0):fatal + 1]
        for i in range(fatal + 1, len(all_lines)):
            if all_lines[i].startswith("Current thread"):
                frames = [ln for ln in all_lines[i + 1:] if ln.startswith("File ")]
                if frames:
                    kept.append("at " + frames[0])
                break
    joined = " | ".join(kept)
    if len(joined) > limit:
        joined = "..." + joined[-(limit - 3):]
    return joined
