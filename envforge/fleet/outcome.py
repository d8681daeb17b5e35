"""Each task's state, from its report folder and the queue; what ``fleet collect`` checks.

A task is ``queued``/``running`` while the scheduler lists it; then ``passed`` (its
report passed and is about the planned environment), ``failed`` (its report did not pass,
or the task ended without one: ``task.json``'s exit status says how) or ``missing`` (no
longer queued, no ``task.json``: never ran, or lost with its node). A report about another
recipe hash or image than planned is ``failed`` too: it is no evidence for the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envforge.core.fsutil import read_limited
from envforge.core.jsonlimits import loads
from envforge.evidence.records import Evidence, EvidenceError, parse_document
from envforge.fleet.plan import Plan, Task

State = Literal["queued", "running", "passed", "failed", "missing"]
#: Report files in the order they are preferred (a certificate names the image digest).
REPORT_FILES = ("certificate.json", "certified.json", "probe.json")
TASK_FILE = "task.json"
#: Largest report file read.
MAX_REPORT = 32 * 1024 * 1024


@dataclass(frozen=True)
class TaskState:
    task: Task
    state: State
    #: One line: why (the failed step, the exit status, the mismatch).
    detail: str = ""
    record: Evidence | None = None
    #: The decoded report document (kept whole for the evidence store).
    document: Any = None
    source: str = ""
    #: ``task.json`` as the node wrote it (node, granted GPUs, exit status), or {}.
    node: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.index, "recipe": self.task.recipe, "arch": self.task.arch,
            "state": self.state, "detail": self.detail,
            "node": dict(self.node or {}).get("node", ""),
            "gpus": dict(self.node or {}).get("granted", {}).get("gpus", "")
            if isinstance(dict(self.node or {}).get("granted"), Mapping) else "",
            "report": self.source,
        }


def _read_json(path: Path) -> Any:
    return loads(read_limited(path, MAX_REPORT), max_bytes=MAX_REPORT)


def _mismatch(task: Task, record: Evidence) -> str:
    if record.recipe and record.recipe != task.recipe:
        return f"its report is about recipe {record.recipe!r}, planned {task.recipe!r}"
    if record.recipe_hash and record.recipe_hash != task.recipe_hash:
        return (f"its report is about recipe hash {record.recipe_hash[:12]}, planned "
                f"{task.recipe_hash[:12]} (the recipe changed since planning)")
    if not record.recipe_hash:
        return "its report names no recipe hash: not evidence for the plan"
    return ""


def _report(folder: Path, redact: Callable[[str], str]) -> tuple[Evidence, Any, str] | str:
    """(record, document, file) of the folder's preferred report, else why there is none."""
    for name in REPORT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            doc = _read_json(path)
            return parse_document(doc, redact, signatures=True), doc, str(path)
        except EvidenceError as exc:
            return f"{path}: {exc.message}"
        except (OSError, ValueError) as exc:
            return f"{path}: cannot read: {exc}"
    return ""


def _finished(task: Task, folder: Path, node: Mapping[str, Any],
              redact: Callable[[str], str]) -> TaskState:
    found = _report(folder, redact)
    code = node.get("exit", "?")
    if isinstance(found, str):
        why = found or f"ended with exit {code} and no report"
        return TaskState(task, "failed", why, node=node)
    record, doc, source = found
    wrong = _mismatch(task, record)
    if wrong:
        return TaskState(task, "failed", wrong, record, doc, source, node)
    if record.outcome != "pass":
        step = record.first_problem
        why = f"{step.name} {step.status}" if step is not None else record.outcome
        return TaskState(task, "failed", why, record, doc, source, node)
    return TaskState(task, "passed", "", record, doc, source, node)


def task_state(task: Task, folder: Path, queued: str | None,
               redact: Callable[[str], str]) -> TaskState:
    """One task's state: ``queued`` is its queue state (None: not in the queue)."""
    if queued is not None:
        return TaskState(task, "running" if queued == "RUNNING" else "queued", queued)
    task_file = folder / task.folder / TASK_FILE
    if not task_file.is_file():
        return TaskState(task, "missing", "not in the queue and no task.json: it never ran "
                         "or its node was lost")
    try:
        node = _read_json(task_file)
    except (OSError, ValueError) as exc:
        return TaskState(task, "failed", f"{task_file}: cannot read: {exc}")
    if not isinstance(node, Mapping):
        node = {}
    return _finished(task, folder / task.folder, node, redact)


def states(plan: Plan, folder: Path, queue: Mapping[int, str],
           redact: Callable[[str], str]) -> tuple[TaskState, ...]:
    return tuple(task_state(t, folder, queue.get(t.index), redact) for t in plan.tasks)


def counts(found: tuple[TaskState, ...]) -> dict[str, int]:
    result = dict.fromkeys(("passed", "failed", "missing", "queued", "running"), 0)
    for item in found:
        result[item.state] += 1
    return result
