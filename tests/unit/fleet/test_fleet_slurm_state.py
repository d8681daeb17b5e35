"""Slurm's own states for a fleet run: parsing sacct/scontrol/squeue output (fixtures
captured from the real one-node cluster, or written from sacct(1)), the order of the
sources, and what ``fleet status`` makes of each state."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from envforge.core import proc
from envforge.errors import Unavailable
from envforge.evidence.records import Redactor
from envforge.fleet import outcome, slurm, slurm_state
from envforge.fleet.slurm_state import JobState, job_states, parse_sacct, parse_scontrol
from tests.helpers import paths

from .test_fleet import plan_of

FIXTURES = paths.UNIT / "fixtures" / "slurm"


def test_scontrol_of_the_real_cluster_names_each_task_state() -> None:
    text = (FIXTURES / "scontrol-show-job-22.05.txt").read_text()
    lines = text.splitlines()
    first = parse_scontrol("\n".join(lines[:3]))
    assert {i: s.state for i, s in first.items()} == {
        0: "COMPLETED",
        1: "CANCELLED",
        2: "COMPLETED",
    }
    cancelled_pending = parse_scontrol(lines[3])  # one record for a whole pending array
    assert sorted(cancelled_pending) == [0, 1, 2]
    assert cancelled_pending[1].state == "CANCELLED"
    timed = parse_scontrol("\n".join(lines[4:6]))
    assert timed[1].state == "TIMEOUT"
    assert "time limit" in timed[1].describe()
    assert (timed[0].state, timed[0].reason, timed[0].restarts) == ("PENDING", "Resources", 1)
    assert "requeued 1 time" in timed[0].describe()
    assert timed[0].source == "scontrol"


def test_sacct_states_as_documented_the_last_try_wins() -> None:
    found = parse_sacct((FIXTURES / "sacct-parsable.txt").read_text())
    assert {i: s.state for i, s in found.items()} == {
        0: "COMPLETED",
        1: "CANCELLED",
        2: "TIMEOUT",
        3: "NODE_FAIL",
        4: "OUT_OF_MEMORY",
        5: "PREEMPTED",
        6: "FAILED",
        7: "PENDING",
        8: "PENDING",
        9: "PENDING",
        10: "PENDING",
    }
    assert found[8].blocked  # PartitionTimeLimit never clears
    assert not found[10].blocked  # Resources does
    assert found[3].source == "sacct"


@pytest.mark.parametrize(
    ("text", "ids"),
    [("3", [3]), ("0-2,7", [0, 1, 2, 7]), ("[4-5%2]", [4, 5]), ("x", []), ("1-", [])],
)
def test_array_task_ids(text: str, ids: list[int]) -> None:
    assert slurm_state.task_ids(text) == ids


def _runner(answers: dict[str, tuple[int, str, str] | None]) -> slurm_state.Runner:
    calls: list[str] = []

    def run(argv: Sequence[str]) -> tuple[int, str, str] | None:
        calls.append(argv[0])
        return answers[argv[0]]

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_sources_sacct_first_then_scontrol_then_squeue() -> None:
    sacct = (0, "5_0|CANCELLED by 0|None\n", "")
    scontrol = (0, "JobId=6 ArrayJobId=5 ArrayTaskId=0 JobState=TIMEOUT Reason=TimeLimit", "")
    squeue = (0, "5_0|RUNNING|None\n", "")
    off = (1, "", "Slurm accounting storage is disabled")
    got = job_states(["5"], _runner({"sacct": sacct, "scontrol": scontrol, "squeue": squeue}))
    assert got[0] == JobState("CANCELLED", "None", 0, "sacct")
    got = job_states(["5"], _runner({"sacct": off, "scontrol": scontrol, "squeue": squeue}))
    assert got[0].state == "TIMEOUT"
    assert got[0].source == "scontrol"
    got = job_states(["5"], _runner({"sacct": None, "scontrol": None, "squeue": squeue}))
    assert got[0] == JobState("RUNNING", "None", 0, "squeue")
    assert job_states([], _runner({})) == {}


def test_a_controller_that_does_not_answer_is_exit_4(monkeypatch: pytest.MonkeyPatch) -> None:
    class Done:
        ok = False
        returncode = 1
        stdout = ""
        stderr = "slurm_load_jobs error: Unable to contact slurm controller"
        timed_out = False

    monkeypatch.setattr(proc, "run", lambda argv, **kw: Done())
    with pytest.raises(Unavailable, match="Unable to contact"):
        slurm.states(["5"])


@pytest.mark.parametrize(
    ("job", "state", "words"),
    [
        (JobState("CANCELLED", "None", 0, "scontrol"), "failed", "cancelled"),
        (JobState("TIMEOUT", "TimeLimit", 0, "scontrol"), "failed", "time limit"),
        (JobState("NODE_FAIL", "", 0, "sacct"), "failed", "node failed"),
        (JobState("OUT_OF_MEMORY", "", 0, "sacct"), "failed", "memory"),
        (JobState("PREEMPTED", "", 0, "sacct"), "failed", "preempted"),
        (JobState("PENDING", "BeginTime", 1, "scontrol"), "queued", "requeued 1 time"),
        (JobState("PENDING", "PartitionTimeLimit", 0, "squeue"), "blocked", "MaxTime"),
        (JobState("PENDING", "BadConstraints", 0, "squeue"), "blocked", "constraints"),
        (JobState("RUNNING", "None", 0, "scontrol"), "running", "RUNNING"),
    ],
)
def test_status_names_each_slurm_state(
    tmp_path: Path, job: JobState, state: str, words: str
) -> None:
    plan = plan_of("cpu")
    found = outcome.states(plan, tmp_path, {0: job}, Redactor(()))[0]
    assert found.state == state
    assert words in found.detail
    assert job.state in found.detail
    assert found.to_dict()["slurm"]["source"] == job.source
