"""The host side of the probe: start the worker in a target, enforce deadlines, classify.

Targets (:mod:`envforge.probe.target`: the contract; :mod:`envforge.probe.local`: a local
interpreter; ``envforge.backends.docker.probe_target``: a container) start the worker and
stream its events; :func:`run_probe` reads them under each step's deadline and turns
them, a hang, a crash or an early exit into a :class:`ProbeReport` with every step.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from envforge.core.jsonlimits import BadJSON, loads
from envforge.core.lazy import LazyModule
from envforge.errors import Interrupted
from envforge.host.gpumem import probe_holders
from envforge.probe.bundle import worker_source
from envforge.probe.health import health_step
from envforge.probe.local import (
    EXIT_WAIT,
    STDERR_KEEP,
    LocalPythonTarget,
    folder_prefix,
    stale_folder,
    sweep_stale_folders,
)
from envforge.probe.report import (
    ProbeReport,
    ReportHost,
    Status,
    StepResult,
    host_info,
    printable,
    utc_now,
)
from envforge.probe.spec import AUDIT_STEP, HEALTH_STEP, HOST_STEPS, ProbeSpec
from envforge.probe.target import LineQueue, ProbeTarget, WorkerHandle, container_exit_status
from envforge.version import __version__

#: The audit step reads every ELF file of the environment (pyelftools): loaded when it runs.
_audit = LazyModule("envforge.probe.audit_step")

__all__ = [  # the local target and the target contract, importable from here as before
    "LineQueue",
    "LocalPythonTarget",
    "ProbeListener",
    "ProbeTarget",
    "WorkerHandle",
    "container_exit_status",
    "folder_prefix",
    "replay",
    "run_probe",
    "stale_folder",
    "sweep_stale_folders",
    "worker_source",
]

#: The worker writes this, plus the step name, to stderr as each step starts.
STDERR_MARK = "[envforge-probe] step "
#: Statuses the worker itself reports; hang and crash come from the runner.
WORKER_STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "oom", "no-device", "skip")


class ProbeListener(Protocol):
    """Live progress: called as steps start and finish (the CLI's table)."""

    def step_started(self, step: str, deadline: float) -> None: ...

    def step_finished(self, result: StepResult) -> None: ...


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

    @property
    def worker_steps(self) -> tuple[str, ...]:
        """The steps the worker runs (the audit runs here, after it)."""
        return tuple(s for s in self.spec.steps if s not in HOST_STEPS)

    def next_step(self) -> str | None:
        for name in self.worker_steps:
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
    health: dict[str, Any] = {}
    try:
        with target.start(worker_source(), spec.worker_json(), spec.env_map) as handle:
            host = host if host is not None else host_info()
            _drive(run, handle, clock)
        if HEALTH_STEP in spec.steps:  # after the worker: what the GPUs say of themselves
            health = _health(run, spec, clock)
        if AUDIT_STEP in spec.steps:  # after the worker: the same audit as envforge audit
            run.start(AUDIT_STEP, spec.deadline(AUDIT_STEP), clock())
            run.finish(_audit.audit_step(spec, target))
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
        health=health,
    )


def _health(run: _Run, spec: ProbeSpec, clock: Callable[[], float]) -> dict[str, Any]:
    """Run the host's ``health`` step; the facts for the report."""
    run.start(HEALTH_STEP, spec.deadline(HEALTH_STEP), clock())
    result, facts = health_step(spec.require_healthy)
    run.finish(result)
    return facts.to_dict()


def replay(
    spec: ProbeSpec, handle: WorkerHandle, clock: Callable[[], float]
) -> tuple[tuple[StepResult, ...], dict[str, Any]]:
    """Every step of ``spec`` and the worker's snapshot, read from ``handle`` under
    ``clock`` exactly as :func:`run_probe` reads a live worker: for a worker that ran
    elsewhere and whose events were recorded with their times (a Kubernetes pod,
    :mod:`envforge.fleet.podlog`). The audit, which runs on the host, is skipped."""
    run = _Run(spec, None)
    _drive(run, handle, clock)
    for name in spec.steps:
        if name not in run.results:
            run.finish(StepResult(name=name, status="skip", seconds=0.0, detail="not run here"))
    return tuple(run.results[name] for name in spec.steps), run.snapshot


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
            if result.name == "memory" and result.status in ("warn", "fail"):
                result = _named_holders(result, event.get("data"))
                now = clock()  # the tools' time is not the next step's
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


def _named_holders(result: StepResult, data: object) -> StepResult:
    """A memory step that found a GPU held by others names who holds it: here, on the host,
    where the driver's tools and ``/proc`` see every process (a container sees its own)."""
    named = probe_holders(data) if isinstance(data, dict) else ""
    return (
        dataclasses.replace(result, detail=f"{result.detail}; held by {named}") if named else result
    )


def _skip_rest(run: _Run, why: str) -> None:
    for name in run.worker_steps:
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
            detail = f"worker did not start within {run.spec.startup_deadline:g}s; worker stopped"
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
        all_lines = all_lines[marks[-1] + 1 :]
    fatal = max(
        (i for i, ln in enumerate(all_lines) if ln.startswith("Fatal Python error")), default=None
    )
    if fatal is None:
        kept = all_lines[-lines:]
    else:
        kept = all_lines[max(fatal - 3, 0) : fatal + 1]
        for i in range(fatal + 1, len(all_lines)):
            if all_lines[i].startswith("Current thread"):
                frames = [ln for ln in all_lines[i + 1 :] if ln.startswith("File ")]
                if frames:
                    kept.append("at " + frames[0])
                break
    joined = " | ".join(kept)
    if len(joined) > limit:
        joined = "..." + joined[-(limit - 3) :]
    return joined
