"""Each task's state, from its report folder and the queue; what ``fleet collect`` checks.

A task is ``queued``/``running`` while the scheduler lists it as waiting, ``blocked``
when it is pending for a reason that never clears by waiting (``PartitionTimeLimit``:
:data:`~envforge.fleet.slurm_state.BLOCKED`); then ``passed`` (its report passed and is
about the planned environment), ``failed`` (its report did not pass, or the task ended
without one: ``task.json``'s exit status, or the scheduler's state, ``CANCELLED``,
``TIMEOUT``, ``NODE_FAIL``, ``OUT_OF_MEMORY``, ``PREEMPTED``, says how) or ``missing`` (no
``task.json`` and the scheduler no longer knows it: never ran, or lost with its node).
A report that is no evidence for the plan is ``refused``, with the reason, and never
counted or imported:
about another recipe hash or image than planned, not shaped like a real probe run
(:mod:`envforge.evidence.genuine`: the steps of its level, the schema), not at the plan's
level, without the plan's nonce for this task (``host.fleet``, recorded by the probe run
the task started: :mod:`envforge.host.grant`), or with host facts that contradict the
task (another node than ``task.json`` names; no GPU of the planned arch for a GPU recipe),
or without the health or collective step the plan asks of the task (or with a health step
that only warned where the plan requires healthy GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from envforge.core.fsutil import read_limited
from envforge.core.jsonlimits import loads
from envforge.evidence.genuine import document_problem
from envforge.evidence.kinds import signed_probe
from envforge.evidence.records import Evidence, EvidenceError, parse_document
from envforge.fleet.plan import Plan, Task
from envforge.fleet.slurm_state import JobState
from envforge.host.grant import Grant
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP

State = Literal["queued", "running", "blocked", "passed", "failed", "missing", "refused"]
STATES: tuple[State, ...] = (
    "passed",
    "failed",
    "refused",
    "missing",
    "blocked",
    "queued",
    "running",
)
#: Report files in the order they are preferred (a certificate names the image digest).
REPORT_FILES = ("certificate.json", "certified.json", "probe.signed.json", "probe.json")
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
    #: What the scheduler says of it (None: nothing).
    job: JobState | None = None

    def to_dict(self) -> dict[str, Any]:
        granted = dict(self.node or {}).get("granted")
        # The node's numbering (``gpus``), and the job's (``visible``, empty in a task.json
        # from before it was recorded): envforge.host.grant.
        grant = Grant.from_dict(granted) if isinstance(granted, Mapping) else None
        return {
            "task": self.task.index,
            "recipe": self.task.recipe,
            "arch": self.task.arch,
            "state": self.state,
            "detail": self.detail,
            "node": dict(self.node or {}).get("node", ""),
            "gpus": grant.gpus if grant else "",
            "visible": grant.visible if grant else "",
            "pinned": self.task.node,
            "seen": _seen(self.node),
            "report": self.source,
            "slurm": {
                "state": self.job.state,
                "reason": self.job.reason,
                "restarts": self.job.restarts,
                "source": self.job.source,
            }
            if self.job
            else None,
        }


def gpus_text(task: Mapping[str, Any]) -> str:
    """`` GPU 2,3 (the job's 0,1)`` for ``fleet status`` from :meth:`TaskState.to_dict`:
    the node's numbering, and the job's where it differs; "" without a grant."""
    gpus, visible = task.get("gpus", ""), task.get("visible", "")
    if not gpus:
        return ""
    return f" GPU {gpus}" + (f" (the job's {visible})" if visible and visible != gpus else "")


_SEEN_KEYS = ("node", "job", "job_variable", "node_indexes", "node_indexes_variable")


def _seen(node: Mapping[str, Any] | None) -> dict[str, str]:
    """``task.json``'s ``seen`` (the node and the GPUs the job saw), its known string
    fields only, each cut to 64 characters (the node wrote it)."""
    found = dict(node or {}).get("seen")
    if not isinstance(found, Mapping):
        return {}
    return {k: found[k][:64] for k in _SEEN_KEYS if isinstance(found.get(k), str)}


def _read_json(path: Path) -> Any:
    return loads(read_limited(path, MAX_REPORT), max_bytes=MAX_REPORT)


def _mismatch(task: Task, record: Evidence) -> str:
    if record.recipe and record.recipe != task.recipe:
        return f"its report is about recipe {record.recipe!r}, planned {task.recipe!r}"
    if record.recipe_hash and record.recipe_hash != task.recipe_hash:
        return (
            f"its report is about recipe hash {record.recipe_hash[:12]}, planned "
            f"{task.recipe_hash[:12]} (the recipe changed since planning)"
        )
    if not record.recipe_hash:
        return "its report names no recipe hash: not evidence for the plan"
    return ""


def _host_of(doc: Any) -> Mapping[str, Any]:
    if signed_probe.recognises(doc):  # parsed before: its signed report is there
        doc = signed_probe.report_of(doc)
    report = doc.get("report") if "report" in doc else doc
    host = report.get("host") if isinstance(report, Mapping) else None
    return host if isinstance(host, Mapping) else {}


def _fleet_problem(plan: Plan, task: Task, host: Mapping[str, Any]) -> str:
    """Why the report was not written by a probe run of this plan's task (its nonce)."""
    if not plan.nonce:
        return "the plan has no nonce (planned by an older envforge): plan again"
    facts = host.get("fleet")
    if not isinstance(facts, Mapping):
        return "its report carries no fleet task (not written by `fleet task` of this plan)"
    if facts.get("nonce") != plan.nonce or facts.get("plan") != plan.id:
        return "its report carries another plan's nonce: not written for this plan"
    if facts.get("task") != str(task.index):
        return f"its report was written for task {str(facts.get('task'))[:8]!r}, not this one"
    return ""


def _host_problem(
    task: Task, record: Evidence, host: Mapping[str, Any], node: Mapping[str, Any]
) -> str:
    ran_on, said = host.get("node"), node.get("node")
    if isinstance(ran_on, str) and isinstance(said, str) and said and ran_on != said:
        return f"its report ran on node {ran_on[:40]!r}, task.json says {said[:40]!r}"
    if task.node and isinstance(ran_on, str) and ran_on != task.node:
        return f"the task is pinned to node {task.node!r}, its report ran on {ran_on[:40]!r}"
    if record.outcome == "pass" and task.vendor != "none":
        listed = host.get("gpus")
        gpus: list[Any] = listed if isinstance(listed, list) else []
        if not any(
            isinstance(g, Mapping)
            and g.get("vendor") == task.vendor
            and g.get("arch") in (None, task.arch)
            for g in gpus
        ):
            return f"its report passed without a {task.vendor} GPU of arch {task.arch}"
    return ""


def refusal(plan: Plan, task: Task, record: Evidence, doc: Any, node: Mapping[str, Any]) -> str:
    """Why a task's report is no evidence for the plan ("" when it is)."""
    why = _mismatch(task, record) or document_problem(doc) or ""
    if why:
        return why
    if plan.level and record.level != plan.level:
        return f"its report is a {record.level} probe, the plan asks for {plan.level}"
    host = _host_of(doc)
    return (
        _fleet_problem(plan, task, host)
        or _host_problem(task, record, host, node)
        or _checks_problem(plan, task, record)
    )


def _checks_problem(plan: Plan, task: Task, record: Evidence) -> str:
    """Why the report is not of the probe the plan asked of the task: a health or
    collective step it lacks, a health step that only warned where healthy GPUs were
    required ("" when it is, and for plans from before these choices)."""
    checks = plan.task_checks(task)
    if checks is None:
        return ""
    ran = {step.name: step for step in record.steps}
    for step, asked in ((HEALTH_STEP, checks.health), (COLLECTIVE_STEP, checks.collective)):
        if asked and step not in ran:
            return f"its report has no {step} step; the plan asks for it"
    health = ran.get(HEALTH_STEP)
    if checks.require_healthy and health is not None and health.status == "warn":
        return "its health step only warned; the plan requires healthy GPUs"
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


def _finished(
    plan: Plan, task: Task, folder: Path, node: Mapping[str, Any], redact: Callable[[str], str]
) -> TaskState:
    found = _report(folder, redact)
    code = node.get("exit", "?")
    if isinstance(found, str):
        why = found or f"ended with exit {code} and no report"
        return TaskState(task, "failed", why, node=node)
    record, doc, source = found
    wrong = refusal(plan, task, record, doc, node)
    if wrong:  # neither counted nor imported
        return TaskState(task, "refused", f"{source}: {wrong}", source=source, node=node)
    if record.outcome != "pass":
        step = record.first_problem
        why = f"{step.name} {step.status}" if step is not None else record.outcome
        return TaskState(task, "failed", why, record, doc, source, node)
    return TaskState(task, "passed", "", record, doc, source, node)


def _unreported(task: Task, job: JobState | None) -> TaskState:
    """A task without ``task.json``: waiting, blocked, ended as Slurm says, or missing."""
    if job is not None and job.waiting:
        if job.blocked:
            return TaskState(task, "blocked", job.describe(), job=job)
        state: State = "running" if job.state in ("RUNNING", "COMPLETING") else "queued"
        return TaskState(task, state, job.describe(), job=job)
    if job is not None:
        return TaskState(task, "failed", f"{job.describe()}; no task.json", job=job)
    return TaskState(
        task, "missing", "not in the queue and no task.json: it never ran or its node was lost"
    )


def task_state(
    plan: Plan,
    task: Task,
    folder: Path,
    queued: JobState | str | None,
    redact: Callable[[str], str],
) -> TaskState:
    """One task's state: ``queued`` is what the scheduler says of it (None: nothing; a
    string: its state alone). ``folder``: the run's."""
    job = JobState(queued) if isinstance(queued, str) else queued
    task_file = folder / task.folder / TASK_FILE
    if (job is not None and job.waiting) or not task_file.is_file():
        return _unreported(task, job)
    try:
        node = _read_json(task_file)
    except (OSError, ValueError) as exc:
        return TaskState(task, "failed", f"{task_file}: cannot read: {exc}", job=job)
    if not isinstance(node, Mapping):
        node = {}
    found = _finished(plan, task, folder / task.folder, node, redact)
    return replace(found, job=job)


def states(
    plan: Plan,
    folder: Path,
    queue: Mapping[int, JobState] | Mapping[int, str],
    redact: Callable[[str], str],
) -> tuple[TaskState, ...]:
    return tuple(task_state(plan, t, folder, queue.get(t.index), redact) for t in plan.tasks)


def counts(found: tuple[TaskState, ...]) -> dict[str, int]:
    result: dict[str, int] = dict.fromkeys(STATES, 0)
    for item in found:
        result[item.state] += 1
    return result
