"""Slurm's own word on each array task: its state (``CANCELLED``, ``TIMEOUT``,
``NODE_FAIL``, ``OUT_OF_MEMORY``, ``PREEMPTED``, a requeue), and why a pending one waits.

Three sources, tried in order (:func:`job_states`): ``sacct`` where the site keeps
accounting (slurmdbd), else ``scontrol show job`` (the controller keeps a finished job
for ``MinJobAge``, 300 s by default), else ``squeue`` (only what is still queued). The
source that answered is named in each :class:`JobState`. Parsing is pure (the tests feed
it output captured from a real cluster) and the names are Slurm's, as its documentation
spells them (JOB STATE CODES and JOB REASON CODES of ``squeue(1)``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: States that mean "not finished yet".
WAITING = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "STAGE_OUT",
        "SIGNALING",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)
#: Ended states: what each means, as ``fleet status`` says it.
ENDED: Mapping[str, str] = {
    "CANCELLED": "cancelled (scancel, or an administrator)",
    "TIMEOUT": "ran past its time limit (--time)",
    "NODE_FAIL": "its node failed",
    "OUT_OF_MEMORY": "killed for using more memory than granted (--mem)",
    "PREEMPTED": "preempted by a job of higher priority",
    "BOOT_FAIL": "its node failed to boot",
    "DEADLINE": "reached its deadline before it could run",
    "FAILED": "ended with an error",
    "COMPLETED": "completed",
}
#: Pending reasons that never clear by waiting: the job cannot start as submitted.
BLOCKED: Mapping[str, str] = {
    "PartitionTimeLimit": "its --time exceeds the partition's MaxTime",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionConfig": "it asks for more than the partition is configured with",
    "BadConstraints": "no node can satisfy its constraints (--constraint, --gres, --mem)",
    "InvalidAccount": "its account is invalid",
    "InvalidQOS": "its QOS is invalid",
    "QOSMaxWallDurationPerJobLimit": "its --time exceeds the QOS's MaxWall",
    "AssocMaxWallDurationPerJobLimit": "its --time exceeds the association's MaxWall",
    "QOSMaxGRESPerJob": "it asks for more GPUs than the QOS allows",
    "AssocMaxJobsLimit": "the association allows no jobs",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
    "JobHeldAdmin": "an administrator holds it (scontrol release)",
    "JobHeldUser": "it is held (scontrol release)",
}
_FIELD = re.compile(r"(?:^|\s)(\w+)=(\S*)")
#: sacct's "CANCELLED by 1000" and the like: the first word is the state.
_WORD = re.compile(r"[A-Z_]+")


@dataclass(frozen=True)
class JobState:
    """One array task as Slurm reports it."""

    state: str
    #: Why it is pending (``Resources``, ``PartitionTimeLimit``), "" or ``None`` otherwise.
    reason: str = ""
    #: How often Slurm requeued it (scontrol's ``Restarts``).
    restarts: int = 0
    #: Who said so: sacct, scontrol or squeue.
    source: str = ""

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    @property
    def blocked(self) -> str:
        """Why this pending task can never start as submitted ("" when it can)."""
        if self.state != "PENDING":
            return ""
        return BLOCKED.get(self.reason, "")

    def describe(self) -> str:
        """One line: ``PENDING (Resources)``, ``CANCELLED: cancelled (...)``, requeues."""
        text = self.state
        if self.reason and self.reason not in ("None", "(null)"):
            text += f" ({self.reason})"
        meaning = self.blocked or (ENDED.get(self.state, "") if not self.waiting else "")
        if meaning:
            text += f": {meaning}"
        if self.restarts:
            text += f", requeued {self.restarts} time{'' if self.restarts == 1 else 's'}"
        if self.source:
            text += f" [{self.source}]"
        return text


def task_ids(text: str) -> list[int]:
    """Array task ids of ``0``, ``0-3,7``, ``[0-3%2]`` (a throttle after ``%``)."""
    text = text.strip().strip("[]").split("%", 1)[0]
    found: list[int] = []
    for part in text.split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            return []
        end = int(last) if last else int(first)
        if end - int(first) > 100_000:
            return []
        found.extend(range(int(first), end + 1))
    return found


def _state_word(text: str) -> str:
    word = _WORD.match(text.strip())
    return word.group(0) if word else ""


def parse_scontrol(text: str, source: str = "scontrol") -> dict[int, JobState]:
    """``scontrol show job -o JOB`` (one line per record): array task -> state."""
    found: dict[int, JobState] = {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        ids = task_ids(fields.get("ArrayTaskId", ""))
        state = _state_word(fields.get("JobState", ""))
        if not ids or not state:
            continue
        restarts = fields.get("Restarts", "0")
        entry = JobState(
            state,
            fields.get("Reason", ""),
            int(restarts) if restarts.isdigit() else 0,
            source,
        )
        found.update(dict.fromkeys(ids, entry))
    return found


def parse_sacct(text: str) -> dict[int, JobState]:
    """``sacct -n -P -X -o JobID,State,Reason``: array task -> state (the last record of a
    task wins: a requeued task is listed once per try)."""
    found: dict[int, JobState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or "_" not in parts[0]:
            continue
        state = _state_word(parts[1])
        ids = task_ids(parts[0].split("_", 1)[1])
        if state and ids:
            reason = parts[2] if len(parts) > 2 else ""
            found.update(dict.fromkeys(ids, JobState(state, reason, 0, "sacct")))
    return found


def parse_squeue(text: str) -> dict[int, JobState]:
    """``squeue -h -r -o %i|%T|%r``: array task -> state."""
    found: dict[int, JobState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or "_" not in parts[0]:
            continue
        ids = task_ids(parts[0].rsplit("_", 1)[1])
        found.update(dict.fromkeys(ids, JobState(parts[1], parts[2], 0, "squeue")))
    return found


#: (argv, environ) -> (exit status, stdout, stderr), or None when the command is not there.
Runner = Callable[[Sequence[str]], "tuple[int, str, str] | None"]


def _sacct(jobs: Sequence[str], run: Runner) -> dict[int, JobState] | None:
    done = run(["sacct", "-n", "-P", "-X", "-j", ",".join(jobs), "-o", "JobID,State,Reason"])
    if done is None or done[0] != 0:
        return None  # no accounting (AccountingStorageType=none), or no sacct
    return parse_sacct(done[1])


def _scontrol(jobs: Sequence[str], run: Runner) -> dict[int, JobState] | None:
    found: dict[int, JobState] = {}
    for job in jobs:
        done = run(["scontrol", "show", "job", "-o", job])
        if done is None:
            return None
        if done[0] == 0:
            found.update(parse_scontrol(done[1]))
    return found


def job_states(jobs: Sequence[str], run: Runner) -> dict[int, JobState]:
    """Each array task of ``jobs`` Slurm still knows: sacct, else scontrol, else squeue
    (see the module docstring); ``run`` calls a command (:func:`envforge.fleet.slurm`)."""
    if not jobs:
        return {}
    found = _sacct(jobs, run)
    if found is None:
        found = _scontrol(jobs, run)
    if found is None or len(found) == 0:
        done = run(["squeue", "-h", "-r", "-j", ",".join(jobs), "-o", "%i|%T|%r"])
        queued = parse_squeue(done[1]) if done is not None and done[0] == 0 else {}
        found = {**queued, **(found or {})}
    return found
