"""Runs of a Slurm plan (issue 33 §3) and Slurm's states through ``fleet status`` (§2):
each submit is a new run folder; status/collect read the newest unless ``--run N``; a job
sbatch accepted is recorded before the next call; a task that cannot start ends --wait
with exit 4. sbatch/scontrol are faked at the process boundary (the real ones:
tests/acceptance/test_fleet_slurm.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from envforge.cli import main
from envforge.core import proc
from envforge.fleet import runs


class Slurm:
    """sbatch hands out job ids (refusing scripts named in ``refuse``); scontrol reports
    ``state`` (with ``reason``) for every array task; sacct has no accounting."""

    def __init__(self) -> None:
        self.next_job = 40
        self.refuse: set[str] = set()
        self.state = "PENDING"
        self.reason = "Resources"
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], **_: Any) -> proc.Completed:
        self.calls.append(list(argv))
        if argv[0] == "sbatch":
            if any(Path(a).name in self.refuse for a in argv):
                return _done(argv, 1, "", "sbatch: error: Invalid feature")
            self.next_job += 1
            return _done(argv, 0, f"{self.next_job}\n", "")
        if argv[0] == "scontrol":
            line = (
                f"JobId=9 ArrayJobId={argv[-1]} ArrayTaskId=0-9 JobState={self.state} "
                f"Reason={self.reason} Restarts=0"
            )
            return _done(argv, 0, line + "\n", "")
        return _done(argv, 1, "", "Slurm accounting storage is disabled")


def _done(argv: Sequence[str], code: int, out: str, err: str) -> proc.Completed:
    return proc.Completed(tuple(argv), code, out, err, 0.01, timed_out=False)


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> Slurm:
    fake = Slurm()
    monkeypatch.setattr(proc, "run", fake)
    return fake


def _plan(out: Path, *archs: str) -> None:
    args = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--backend", "venv"]
    for arch in archs:
        args += ["--arch", arch]
    assert main([*args, "-o", str(out)]) == 0


def _status(out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = main(["fleet", "status", str(out), "--json", *extra])
    return code, json.loads(capsys.readouterr().out or "null")


def test_each_submit_is_a_new_run_and_status_reads_the_newest(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    _plan(out)
    assert main(["fleet", "submit", str(out)]) == 0
    assert main(["fleet", "submit", str(out)]) == 0  # a double submit: both tracked
    assert runs.numbers(out) == [1, 2]
    assert runs.jobs(out / "runs" / "001") == ["41"]
    assert runs.jobs(out / "runs" / "002") == ["42"]
    sbatch = [c for c in slurm.calls if c[0] == "sbatch"]
    assert sbatch[1][2] == f"--output={out.resolve()}/runs/002/logs/%A_%a.out"
    assert sbatch[1][-1] == "2"  # the run number: the script's argument
    code, got = _status(out, capsys)
    assert (code, got["run"]) == (1, 2)
    assert got["tasks"][0]["state"] == "queued"
    assert got["tasks"][0]["slurm"]["source"] == "scontrol"
    assert [c[-1] for c in slurm.calls if c[0] == "scontrol"][-1] == "42"
    code, got = _status(out, capsys, "--run", "1")
    assert got["run"] == 1
    assert [c[-1] for c in slurm.calls if c[0] == "scontrol"][-1] == "41"
    assert main(["fleet", "status", str(out), "--run", "3"]) == 2


def test_a_partial_submit_keeps_the_job_sbatch_accepted(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    _plan(out, "cpu", "gfx942")
    slurm.refuse = {"certify-gfx942-gpu1.sbatch"}
    assert main(["fleet", "submit", str(out)]) == 4
    assert "keeps job 41" in capsys.readouterr().err
    assert runs.jobs(out / "runs" / "001") == ["41"]


def test_a_task_that_cannot_start_ends_the_wait_with_exit_4(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    _plan(out)
    assert main(["fleet", "submit", str(out)]) == 0
    slurm.reason = "PartitionTimeLimit"
    code, got = _status(out, capsys, "--wait")
    assert code == 4
    assert got["tasks"][0]["state"] == "blocked"
    capsys.readouterr()
    assert main(["fleet", "status", str(out), "--wait"]) == 4
    assert "PartitionTimeLimit" in capsys.readouterr().err


def test_cancelled_without_task_json_is_failed_and_named(
    slurm: Slurm, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    _plan(out)
    assert main(["fleet", "submit", str(out)]) == 0
    slurm.state, slurm.reason = "CANCELLED", "None"
    code, got = _status(out, capsys)
    assert code == 1
    assert got["tasks"][0]["state"] == "failed"
    assert got["tasks"][0]["detail"].startswith("CANCELLED")


def test_wait_has_a_default_timeout(tmp_path: Path) -> None:
    from envforge.cli.fleet import DEFAULT_WAIT, status_cmd

    timeout = next(p for p in status_cmd.params if p.name == "timeout")
    assert timeout.default == DEFAULT_WAIT
    assert 0 < DEFAULT_WAIT < float("inf")


# --------------------------------------------------------------------------- site plumbing


def test_site_options_reach_the_script_and_the_nodes_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envforge.fleet.planning import load_plan
    from envforge.fleet.task import command

    preamble = tmp_path / "site.sh"
    preamble.write_text("module load python/3.11\nsource /etc/profile\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    out = tmp_path / "plan"
    args = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--backend", "venv"]
    site = ["--qos", "high", "--reservation", "maint", "--mem", "64G", "--cpus-per-task", "8"]
    site += ["--sbatch-arg=--exclusive", "--sbatch-arg=--comment=two words"]
    site += ["--preamble", str(preamble), "--ca-bundle", str(ca), "--set", "env.OMP_NUM_THREADS=8"]
    assert main([*args, *site, "-o", str(out)]) == 0
    lines = (out / "certify-cpu-gpu0.sbatch").read_text().splitlines()
    for line in (
        "#SBATCH --qos=high",
        "#SBATCH --reservation=maint",
        "#SBATCH --mem=64G",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --exclusive",
        '#SBATCH --comment="two words"',
    ):
        assert line in lines
    exec_at = next(i for i, ln in enumerate(lines) if ln.startswith("exec "))
    assert lines[exec_at - 2 : exec_at] == ["module load python/3.11", "source /etc/profile"]
    plan = load_plan(out)
    argv = command(plan, plan.tasks[0], out)
    assert argv[argv.index("--ca-bundle") + 1] == str(ca.resolve())
    assert argv[argv.index("--set") + 1] == "env.OMP_NUM_THREADS=8"
    assert plan.tasks[0].recipe_hash != load_plan_hash_without_set(tmp_path)


def load_plan_hash_without_set(tmp_path: Path) -> str:
    from envforge.fleet.planning import load_plan

    out = tmp_path / "plain"
    args = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--backend", "venv"]
    assert main([*args, "-o", str(out)]) == 0
    return load_plan(out).tasks[0].recipe_hash


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (["--sbatch-arg", "--array=0-9"], "envforge's to set"),
        (["--sbatch-arg", "--partition=x"], "envforge's to set"),
        (["--sbatch-arg", "-N 2"], "long sbatch option"),
        (["--sbatch-arg", "--comment=a\nb"], "control character"),
        (["--mem", "lots"], "memory size"),
        (["--qos", "a b"], "--qos"),
        (["--reservation", "r\n#SBATCH"], "--reservation"),
        (["--cpus-per-task", "-1"], "--cpus-per-task"),
        (["--set", "no-equals"], "KEY.PATH=VALUE"),
    ],
)
def test_site_values_are_refused_before_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], words: str
) -> None:
    out = tmp_path / "plan"
    args = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--backend", "venv"]
    assert main([*args, *option, "-o", str(out)]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_a_preamble_with_an_sbatch_line_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preamble = tmp_path / "site.sh"
    preamble.write_text("module load x\n#SBATCH --wrap=id\n")
    args = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--backend", "venv"]
    assert main([*args, "--preamble", str(preamble), "-o", str(tmp_path / "p")]) == 2
    assert "#SBATCH line" in capsys.readouterr().err


def test_a_plan_without_site_options_keeps_the_id_it_had_before_them() -> None:
    from tests.unit.fleet.test_fleet import plan_of

    data = plan_of("cpu", backend="venv").to_dict()
    later = ("qos", "reservation", "mem", "cpus_per_task", "sbatch_args", "preamble")
    assert not set(later) & set(data["site"])
    assert "ca_bundle" not in data
    assert "overrides" not in data
