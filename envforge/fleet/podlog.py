"""Kubernetes results: the reports framed in pod logs, imported as Slurm tasks' reports.

Each pod of a ``--engine k8s`` plan runs ``pod.py`` (``templates/fleet/k8s-pod.py``),
which runs the probe worker, records its event lines with their times, and prints one
frame to the pod's log: ``envforge-report-begin task=NNN plan=PLAN nonce=NONCE
framing=1``, ``envforge-report-data NNN BASE64`` lines, ``envforge-report-end task=NNN
sha256=HEX``. Anything before a marker on its line (``kubectl logs --timestamps`` or
``--prefix``) is ignored, and frames of several pods may interleave.

:func:`import_logs` reads a file or a folder of such logs and, for each frame that is
whole (its sha256 matches), of this plan (plan id and nonce) and of one of its tasks,
replays the events through envforge's runner (:func:`envforge.probe.runner.replay`: the
same deadlines and verdicts as a local run, with the spec rebuilt from the plan's recipe)
and writes the task's ``reports/NNN/probe.json`` and ``task.json``. The host facts are
the pod's: its kernel and machine, the node's name (the downward API's ``NODE_NAME``),
the GPU variables the device plugin set, and the device files envforge's detector reads
(materialised in a scratch root and read by :func:`envforge.probe.report.host_info`).
What the import writes is then checked like any Slurm task's report
(:mod:`envforge.fleet.outcome`, :mod:`envforge.evidence.genuine`). A frame is refused,
and nothing written for it, when it is cut or altered (no end, sha256 mismatch, not
base64 or JSON, a field of the wrong shape), of another plan or nonce, for a task the
plan has not, or when two different frames claim one task. The frame is not signed: like
the Slurm path, the nonce shows it was written for this plan, not by whom.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import re
import tempfile
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envforge.core.fsutil import make_dirs, read_limited, write_atomically
from envforge.core.jsonlimits import BadJSON, loads
from envforge.core.proc import signal_name
from envforge.core.sharing import sharing
from envforge.fleet.k8s import task_spec
from envforge.fleet.outcome import TASK_FILE
from envforge.fleet.plan import Plan, Task
from envforge.probe.report import ProbeReport, host_info
from envforge.version import __version__

FRAMING = 1
#: Bytes one log file may have; bytes one decoded frame may have.
MAX_LOG = 256 * 1024 * 1024
MAX_FRAME = 32 * 1024 * 1024
#: Log files one folder may hold.
MAX_FILES = 10000
_BEGIN = re.compile(
    r"envforge-report-begin task=(\d{1,4}) plan=(\S{1,64}) nonce=(\S{1,64}) framing=(\d{1,3})\s*$"
)
_DATA = re.compile(r"envforge-report-data (\d{1,4}) ([A-Za-z0-9+/=]{1,100000})\s*$")
_END = re.compile(r"envforge-report-end task=(\d{1,4}) sha256=([0-9a-f]{64})\s*$")
#: The device files a frame may carry (pod.py's FACTS and FOLDERS); ``*`` is one name.
HOST_FILES = (
    "proc/sys/kernel/osrelease",
    "sys/module/amdgpu/version",
    "sys/class/kfd/kfd/topology/nodes/*/properties",
    "sys/class/drm/card*/device/vendor",
    "sys/class/drm/card*/device/device",
    "sys/class/drm/card*/device/product_name",
    "proc/driver/nvidia/version",
    "proc/driver/nvidia/gpus/*/information",
    "etc/machine-id",
    "sys/bus/pci/devices/*/device",
)
#: The folders whose presence it may carry (as null).
HOST_FOLDERS = ("sys/module/amdgpu", "sys/class/drm/card*/device/drm/renderD*")


def _pattern(glob: str) -> re.Pattern[str]:
    parts = [re.escape(part).replace(r"\*", r"[A-Za-z0-9:._-]{0,64}") for part in glob.split("/")]
    return re.compile("/".join(parts))


_FILE_PATTERNS = tuple(_pattern(p) for p in HOST_FILES)
_FOLDER_PATTERNS = tuple(_pattern(p) for p in HOST_FOLDERS)
MAX_HOST_FILE = 65536
GRANT_VARIABLES = (
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
)
_INDEXES = re.compile(r"\d{1,3}(,\d{1,3}){0,63}")


@dataclass(frozen=True)
class Frame:
    """One whole frame of a log: its task, the plan and nonce it names, its record."""

    source: str
    task: int
    plan: str
    nonce: str
    digest: str
    record: Mapping[str, Any]


@dataclass(frozen=True)
class Imported:
    """What :func:`import_logs` did: the tasks written, and (source, why) refused."""

    written: tuple[int, ...]
    refused: tuple[tuple[str, str], ...]


# --------------------------------------------------------------------------- reading frames


def _decode(
    source: str, task: int, head: tuple[str, ...], chunks: list[str], digest: str
) -> Frame | str:
    plan, nonce, framing = head
    where = f"{source}: task {task:03d}"
    if framing != str(FRAMING):
        return f"{where}: framing {framing[:8]!r}, this envforge reads {FRAMING}"
    try:
        data = base64.b64decode("".join(chunks), validate=True)
    except (binascii.Error, ValueError):
        return f"{where}: the report's data is not base64 (the log was altered)"
    if len(data) > MAX_FRAME:
        return f"{where}: the report is larger than {MAX_FRAME} bytes"
    if hashlib.sha256(data).hexdigest() != digest:
        return f"{where}: the report does not match its sha256 (the log was altered or cut)"
    try:
        record = loads(data.decode("utf-8"), max_bytes=MAX_FRAME)
    except (BadJSON, UnicodeDecodeError) as exc:
        return f"{where}: the report is not JSON: {exc}"
    if not isinstance(record, Mapping):
        return f"{where}: the report is not a JSON object"
    return Frame(source, task, plan, nonce, digest, record)


def frames(text: str, source: str) -> tuple[list[Frame], list[tuple[str, str]]]:
    """The whole frames of one log's text, and (source, why) for each broken one."""
    found: list[Frame] = []
    refused: list[tuple[str, str]] = []
    open_frames: dict[int, tuple[tuple[str, ...], list[str]]] = {}
    for line in text.splitlines():
        if "envforge-report-" not in line:
            continue
        begin, data, end = _BEGIN.search(line), _DATA.search(line), _END.search(line)
        if begin:
            open_frames[int(begin.group(1))] = (begin.group(2, 3, 4), [])
        elif data and int(data.group(1)) in open_frames:
            open_frames[int(data.group(1))][1].append(data.group(2))
        elif end and int(end.group(1)) in open_frames:
            task = int(end.group(1))
            head, chunks = open_frames.pop(task)
            got = _decode(source, task, head, chunks, end.group(2))
            if isinstance(got, Frame):
                found.append(got)
            else:
                refused.append((source, got))
    refused.extend(
        (source, f"{source}: task {t:03d}: the report has no end line (the log was cut)")
        for t in open_frames
    )
    return found, refused


def log_files(path: Path) -> list[Path]:
    """``path`` itself, or the regular files below the folder ``path`` (sorted)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))[
        :MAX_FILES
    ]


# --------------------------------------------------------------------------- checking a record


def _text(value: Any, limit: int = 512) -> bool:
    return isinstance(value, str) and len(value) <= limit and value.isprintable()


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e7


def _host_problem(host: Any) -> str | None:
    if not isinstance(host, Mapping):
        return "host is not an object"
    if not all(_text(host.get(k)) for k in ("kernel", "machine", "node")):
        return "host.kernel, host.machine and host.node must be strings"
    granted = host.get("granted", {})
    if not isinstance(granted, Mapping) or not all(
        k in GRANT_VARIABLES and _text(v) for k, v in granted.items()
    ):
        return "host.granted is not the GPU variables"
    files = host.get("files", {})
    if not isinstance(files, Mapping) or len(files) > 2048:
        return "host.files is not an object of at most 2048 files"
    for name, text in files.items():
        patterns = _FOLDER_PATTERNS if text is None else _FILE_PATTERNS
        if (
            not isinstance(name, str)
            or {".", ".."} & set(name.split("/"))
            or not any(p.fullmatch(name) for p in patterns)
        ):
            return f"host.files names {str(name)[:60]!r}, not a file the detector reads"
        if text is not None and not (isinstance(text, str) and len(text) <= MAX_HOST_FILE):
            return f"host.files[{name[:60]!r}] is not a text of at most {MAX_HOST_FILE} characters"
    return None


def record_problem(frame: Frame) -> str | None:
    """Why a frame's record is not what pod.py prints (None: it is)."""
    record = frame.record
    if (record.get("plan"), record.get("nonce"), record.get("task")) != (
        frame.plan,
        frame.nonce,
        frame.task,
    ):
        return "its report names another plan, nonce or task than its frame"
    events = record.get("events")
    if not isinstance(events, list) or len(events) > 5000:
        return "events is not a list of at most 5000 events"
    if not all(
        isinstance(e, list) and len(e) == 2 and _number(e[0]) and isinstance(e[1], str)
        for e in events
    ):
        return "an event is not [seconds, line]"
    if [e[0] for e in events] != sorted(e[0] for e in events):
        return "its events are not in time order"
    stopped, code = record.get("stopped"), record.get("exit")
    if stopped is not None and not _number(stopped):
        return "stopped is not a time"
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        return "exit is not an exit status"
    if not isinstance(record.get("stderr", ""), str) or not _text(record.get("created"), 64):
        return "stderr or created is not a string"
    return _host_problem(record.get("host"))


# --------------------------------------------------------------------------- replaying


class Replay:
    """A :class:`~envforge.probe.target.WorkerHandle` over recorded events: the clock
    moves to each event's second; past the last one, the worker ended (its exit status)
    or was stopped (nothing more comes: the runner's deadline passes)."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.now = 0.0
        self._events = deque((float(t), str(line)) for t, line in record["events"])
        self._stopped = record.get("stopped") is not None
        self._code = record.get("exit")
        self._stderr = str(record.get("stderr", ""))

    def clock(self) -> float:
        return self.now

    def read_line(self, timeout: float) -> str | None:
        if self._events:
            when, line = self._events[0]
            if when <= self.now + timeout:
                self._events.popleft()
                self.now = max(self.now, when)
                return line
        elif not self._stopped:
            return ""
        self.now += timeout + 1e-6
        return None

    def stop(self) -> None:
        self._events.clear()
        self._stopped = True

    def exit_status(self) -> tuple[int | None, str | None]:
        code = self._code
        if isinstance(code, int) and code < 0:
            return None, signal_name(code)
        return code, None

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self._stderr.splitlines()[-lines:])


def _host(record: Mapping[str, Any], plan: Plan, task: Task) -> Any:
    facts = record["host"]
    with tempfile.TemporaryDirectory(prefix="envforge-pod-") as scratch:
        root = Path(scratch)
        for name, text in facts.get("files", {}).items():
            path = root / name
            if text is None:
                make_dirs(path)
            else:
                make_dirs(path.parent)
                path.write_text(text, encoding="utf-8")
        host = host_info(root, environ={})
    granted = facts.get("granted", {})
    return dataclasses.replace(
        host,
        kernel=facts["kernel"],
        machine=facts["machine"],
        node=facts["node"],
        granted=tuple((k, granted[k]) for k in GRANT_VARIABLES if k in granted),
        fleet=(("plan", plan.id), ("task", str(task.index)), ("nonce", plan.nonce)),
        site=sharing().site or None,  # the pod ran at this site: the collector's setting
    )


def report_of(plan: Plan, task: Task, record: Mapping[str, Any]) -> ProbeReport:
    """The task's probe report from a pod's record: its events replayed under the spec
    the plan's recipe gives (:func:`envforge.fleet.k8s.task_spec`)."""
    from envforge.probe.runner import replay  # noqa: PLC0415 - the runner, when used

    spec = task_spec(plan, task)
    handle = Replay(record)
    steps, snapshot = replay(spec, handle, handle.clock)
    events = record["events"]
    seconds = record.get("stopped") or (events[-1][0] if events else 0.0)
    return ProbeReport(
        steps=steps,
        level=spec.level,
        target=f"kubernetes pod {record['host'].get('pod', '')} ({task.image})".strip(),
        host=_host(record, plan, task),
        envforge_version=__version__,
        created=str(record["created"]),
        seconds=float(seconds),
        recipe_name=spec.recipe_name,
        recipe_hash=spec.recipe_hash,
        snapshot=snapshot,
    )


def _task_record(task: Task, report: ProbeReport, record: Mapping[str, Any], source: str) -> str:
    granted = dict(report.host.granted)
    first = next(((k, v) for k, v in granted.items() if _INDEXES.fullmatch(v)), None)
    node = report.host.node or ""
    code = record.get("exit")
    return (
        json.dumps(
            {
                "task": task.index,
                "recipe": task.recipe,
                "arch": task.arch,
                "exit": 1 if record.get("stopped") is not None else code,
                "node": node,
                "granted": {"variable": first[0], "gpus": first[1], "node": node, "job": ""}
                if first
                else {},
                "engine": "k8s",
                "log": source,
                "imported": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
                "started": report.created,
                "seconds": round(report.seconds, 3),
            },
            indent=2,
        )
        + "\n"
    )


def _refusal(plan: Plan, frame: Frame) -> str | None:
    where = f"{frame.source}: task {frame.task:03d}"
    if frame.plan != plan.id or frame.nonce != plan.nonce:
        return f"{where}: the report carries another plan's nonce: not written for this plan"
    if frame.task >= len(plan.tasks):
        return f"{where}: the plan has tasks 000-{len(plan.tasks) - 1:03d}"
    why = record_problem(frame)
    return f"{where}: {why}" if why else None


def _chosen(plan: Plan, found: Sequence[Frame], refused: list[tuple[str, str]]) -> list[Frame]:
    """The frames to import: this plan's, well formed, one per task."""
    by_task: dict[int, list[Frame]] = {}
    for frame in found:
        why = _refusal(plan, frame)
        if why:
            refused.append((frame.source, why))
        else:
            by_task.setdefault(frame.task, []).append(frame)
    chosen = []
    for task, group in sorted(by_task.items()):
        if len({f.digest for f in group}) > 1:
            names = ", ".join(sorted({f.source for f in group}))
            refused.append((names, f"task {task:03d}: different reports in {names}"))
        else:
            chosen.append(group[0])
    return chosen


def import_logs(plan: Plan, folder: Path, path: Path) -> Imported:
    """Import the frames of the logs at ``path`` (a file, or a folder of files) into the
    plan's ``reports/NNN/`` folders; see the module docstring for what is refused."""
    found: list[Frame] = []
    refused: list[tuple[str, str]] = []
    files = log_files(path)
    for log in files:
        text = read_limited(log, MAX_LOG).decode("utf-8", "replace")
        got, broken = frames(text, str(log))
        found.extend(got)
        refused.extend(broken)
    if not found and not refused:
        refused.append((str(path), f"{path}: no envforge report frame in {len(files)} file(s)"))
    written = []
    for frame in _chosen(plan, found, refused):
        task = plan.tasks[frame.task]
        report = report_of(plan, task, frame.record)
        target = folder / task.folder
        make_dirs(target)
        report.write(target)
        write_atomically(target / TASK_FILE, _task_record(task, report, frame.record, frame.source))
        written.append(task.index)
    return Imported(tuple(written), tuple(refused))
