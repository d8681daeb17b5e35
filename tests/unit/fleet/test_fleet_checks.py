"""The probe's GPU steps in fleet plans (issue 33 §7): ``fleet plan --health/--no-health,
--require-healthy, --collective/--no-collective`` stored in plan.json, settled per task
(health for a GPU recipe, the collective for a task of two or more GPUs), carried by each
engine's files and the task's command line, and checked on collect (a report without a
step the plan asked for is refused)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from envforge.cli import main
from envforge.errors import InvalidInput
from envforge.evidence.records import Redactor
from envforge.fleet import github, k8s, outcome, slurm
from envforge.fleet.nodes import Spot
from envforge.fleet.plan import Plan, PlanChecks
from envforge.fleet.planning import load_plan, plan_from_dict
from envforge.fleet.task import command
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP, GpuChecks
from tests.helpers.matrix_synth import corpus, make_report
from tests.unit.fleet.test_fleet import no_job, plan_of

__all__ = ["no_job"]  # the autouse fixture: no scheduler variables


def _flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.endswith(("health", "healthy", "collective"))]


# --------------------------------------------------------------------------- the plan


def test_defaults_by_recipe_and_gpu_count() -> None:
    spots = {"gfx942": (Spot("big", 8), Spot("small", 1))}
    plan = plan_of("gfx942", "cpu", checks=PlanChecks(), placement=spots)
    got = [(t.recipe, t.gpus, plan.task_checks(t)) for t in plan.tasks]
    assert got == [
        ("gfx942", 8, GpuChecks(health=True, collective=True)),  # --gpus all on 8 GPUs
        ("gfx942", 1, GpuChecks(health=True, collective=False)),
        ("cpu", 0, GpuChecks(health=False, collective=False)),  # a CPU recipe: neither
    ]
    two = plan_of("gfx942", gpus=2, checks=PlanChecks())
    assert two.task_checks(two.tasks[0]) == GpuChecks(health=True, collective=True)
    told = plan_of("gfx942", gpus=2, checks=PlanChecks(health=False, collective=False))
    assert told.task_checks(told.tasks[0]) == GpuChecks()


def test_the_task_command_says_every_choice() -> None:
    plan = plan_of("gfx942", "cpu", gpus=4, checks=PlanChecks(require_healthy=True))
    assert _flags(command(plan, plan.tasks[0], Path("/p"))) == [
        "--health",
        "--require-healthy",
        "--collective",
    ]
    assert _flags(command(plan, plan.tasks[1], Path("/p"))) == [
        "--health",  # --require-healthy implies it, for a CPU recipe too
        "--require-healthy",
        "--no-collective",
    ]
    plan = plan_of("gfx942", "cpu", checks=PlanChecks())
    assert _flags(command(plan, plan.tasks[0], Path("/p"))) == ["--health", "--no-collective"]
    assert _flags(command(plan, plan.tasks[1], Path("/p"))) == ["--no-health", "--no-collective"]


def test_a_plan_from_before_them_keeps_its_id_and_passes_no_flag() -> None:
    old = plan_of("gfx942")
    assert "checks" not in old.to_dict()
    assert old.task_checks(old.tasks[0]) is None
    assert _flags(command(old, old.tasks[0], Path("/p"))) == []
    again = plan_from_dict(json.loads(old.to_json()), "plan.json")
    assert (again.checks, again.id) == (None, old.id)
    new = plan_of("gfx942", checks=PlanChecks())
    assert new.to_dict()["checks"] == {"health": None, "require_healthy": False, "collective": None}


@pytest.mark.parametrize(
    "checks",
    [
        PlanChecks(),
        PlanChecks(health=True, require_healthy=True, collective=False),
        PlanChecks(health=False, collective=True),
    ],
)
def test_plan_json_round_trips_them(checks: PlanChecks) -> None:
    plan = plan_of("gfx942", checks=checks)
    again = plan_from_dict(json.loads(plan.to_json()), "plan.json")
    assert again.checks == checks
    assert again.id == plan.id


@pytest.mark.parametrize(
    ("checks", "message"),
    [
        ([], "key 'checks' is not an object"),
        ({"health": "yes"}, "key 'checks.health' is not true, false or null"),
        ({"require_healthy": None}, "key 'checks.require_healthy' is not true or false"),
        ({"collective": 1}, "key 'checks.collective' is not true, false or null"),
        ({"health": False, "require_healthy": True}, "contradict"),
    ],
)
def test_a_bad_checks_value_in_plan_json_is_named(checks: Any, message: str) -> None:
    data = json.loads(plan_of("cpu").to_json())
    data["checks"] = checks
    with pytest.raises(InvalidInput, match=message):
        plan_from_dict(data, "plan.json")


# --------------------------------------------------------------------------- fleet plan


def _plan_cli(tmp_path: Path, *args: str) -> int:
    return main(["fleet", "plan", "--recipe", "gfx942", "--recipe", "cpu", *args,
                 "-o", str(tmp_path / "p")])  # fmt: skip


def test_fleet_plan_stores_what_was_said(tmp_path: Path) -> None:
    argv = ["--engine", "slurm", "--backend", "venv", "--require-healthy", "--no-collective"]
    assert _plan_cli(tmp_path, *argv) == 0
    plan = load_plan(tmp_path / "p")
    assert plan.checks == PlanChecks(health=None, require_healthy=True, collective=False)
    stored = json.loads((tmp_path / "p" / "plan.json").read_text())["checks"]
    assert stored == {"health": None, "require_healthy": True, "collective": False}


def test_fleet_plan_without_them_settles_by_gpu_count(tmp_path: Path) -> None:
    assert _plan_cli(tmp_path, "--engine", "slurm", "--backend", "venv", "--gpus", "2") == 0
    plan = load_plan(tmp_path / "p")
    assert plan.checks == PlanChecks()
    assert [plan.task_checks(t) for t in plan.tasks] == [
        GpuChecks(health=True, collective=True),
        GpuChecks(health=False, collective=False),  # a CPU recipe's probe uses no GPU
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--engine", "slurm", "--no-health", "--require-healthy"), "contradict each other"),
        (("--engine", "k8s", "--health"), "--health: a Kubernetes pod runs envforge's worker"),
        (("--engine", "k8s", "--require-healthy"), "--require-healthy: a Kubernetes pod"),
    ],
)
def test_fleet_plan_refuses_what_cannot_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert _plan_cli(tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("error") == 1
    assert not (tmp_path / "p").exists()


# --------------------------------------------------------------------------- engines' files


def test_kubernetes_specs_carry_the_collective_and_never_the_health_step(tmp_path: Path) -> None:
    assert _plan_cli(tmp_path, "--engine", "k8s", "--gpus", "2") == 0
    plan = load_plan(tmp_path / "p")
    assert plan.checks == PlanChecks(health=False)
    spec = k8s.task_spec(plan, plan.tasks[0])
    assert spec.collective
    assert not spec.health
    assert not spec.audit
    assert COLLECTIVE_STEP in spec.worker_dict()["steps"]
    docs = list(yaml.safe_load_all((tmp_path / "p" / "jobs.yaml").read_text()))
    specs = [
        json.loads(text)
        for d in docs
        if d["kind"] == "ConfigMap"
        for name, text in d["data"].items()
        if name.startswith("spec-")
    ]
    assert [COLLECTIVE_STEP in s["steps"] for s in specs] == [True, False]  # gfx942, cpu
    one = plan_of("gfx942", engine="k8s", checks=PlanChecks(health=False))
    assert not k8s.task_spec(one, one.tasks[0]).collective


def test_kubernetes_gives_every_node_its_jobs_spec(tmp_path: Path) -> None:
    """Tasks of one recipe pinned to several nodes are a Job each, each with the spec."""
    spots = {"gfx942": (Spot("n1", 8), Spot("n2", 1))}
    plan = plan_of("gfx942", engine="k8s", checks=PlanChecks(health=False), placement=spots)
    docs = yaml.safe_load_all(k8s.files(plan, tmp_path)["jobs.yaml"])
    specs = {
        name: json.loads(text)
        for d in docs
        if d["kind"] == "ConfigMap"
        for name, text in d["data"].items()
        if name.startswith("spec-")
    }
    assert sorted(specs) == ["spec-000.json", "spec-001.json"]
    assert COLLECTIVE_STEP in specs["spec-000.json"]["steps"]  # eight GPUs
    assert COLLECTIVE_STEP not in specs["spec-001.json"]["steps"]  # one
    assert specs["spec-001.json"]["steps"][0] == "env-snapshot"  # a spec, not "{}"


def test_the_workflow_passes_each_tasks_flags(tmp_path: Path) -> None:
    plan = plan_of("gfx942", "cpu", archs=("gfx942",), engine="github", checks=PlanChecks())
    certify = github.workflow(plan)["jobs"]["certify"]
    include = certify["strategy"]["matrix"]["include"]
    assert [i["checks"] for i in include] == [
        "--health --no-collective",
        "--no-health --no-collective",
    ]
    assert certify["env"]["PROBE_CHECKS"] == "${{ matrix.checks }}"
    run = certify["steps"][2]["run"]
    assert run.startswith('read -r -a checks <<< "$PROBE_CHECKS"\n')
    assert run.rstrip().endswith('"${checks[@]}"')
    old = github.workflow(plan_of("cpu", engine="github"))["jobs"]["certify"]
    assert "checks" not in old["strategy"]["matrix"]["include"][0]
    assert "PROBE_CHECKS" not in old["env"]
    assert "checks" not in old["steps"][2]["run"]
    shellcheck = shutil.which("shellcheck")
    if shellcheck:  # the run script as a runner's bash reads it
        script = tmp_path / "run.sh"
        script.write_text("#!/bin/bash\n" + run)
        assert subprocess.run([shellcheck, str(script)], check=False).returncode == 0


def test_the_sbatch_script_names_the_tasks_flags(tmp_path: Path) -> None:
    plan = plan_of("gfx942", "cpu", archs=("gfx942",), checks=PlanChecks())
    (text,) = slurm.render(plan, tmp_path).values()
    assert "# Each task's probe (plan.json's \"checks\"): --health --no-collective | " in text
    assert "--no-health --no-collective\n" in text
    (old,) = slurm.render(plan_of("gfx942"), tmp_path).values()
    assert "Each task's probe" not in old


# --------------------------------------------------------------------------- collect


def _report(plan: Plan, steps: dict[str, str]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(make_report(corpus(1)[0]).to_json())
    report.update(status="pass")
    for step in report["steps"]:
        step["status"] = "pass"
    report["steps"] += [
        {"name": n, "status": s, "seconds": 0.1, "detail": ""} for n, s in steps.items()
    ]
    report["recipe"] = {"name": "cpu", "hash": plan.tasks[0].recipe_hash}
    report["host"]["fleet"] = {"plan": plan.id, "task": "0", "nonce": plan.nonce}
    return report


@pytest.mark.parametrize(
    ("checks", "steps", "state", "detail"),
    [
        (PlanChecks(health=True), {HEALTH_STEP: "pass"}, "passed", ""),
        (PlanChecks(health=True), {}, "refused", "no health step; the plan asks for it"),
        (PlanChecks(collective=True), {}, "refused", "no collective step; the plan asks"),
        (PlanChecks(collective=True), {COLLECTIVE_STEP: "pass"}, "passed", ""),
        (PlanChecks(require_healthy=True), {HEALTH_STEP: "warn"}, "refused", "only warned"),
        (PlanChecks(require_healthy=True), {HEALTH_STEP: "fail"}, "failed", "health fail"),
        (PlanChecks(health=True), {HEALTH_STEP: "warn"}, "passed", ""),
        (None, {}, "passed", ""),  # a plan from before them asks for neither
    ],
)
def test_collect_refuses_a_report_without_the_steps_asked_for(
    tmp_path: Path, checks: PlanChecks | None, steps: dict[str, str], state: str, detail: str
) -> None:
    plan = plan_of("cpu", checks=checks)
    out = tmp_path / "reports/000"
    out.mkdir(parents=True)
    report = _report(plan, steps)
    if any(s == "fail" for s in steps.values()):
        report["status"] = "fail"
    (out / "probe.json").write_text(json.dumps(report))
    (out / "task.json").write_text(json.dumps({"exit": 0, "node": "", "granted": {}}))
    (found,) = outcome.states(plan, tmp_path, {}, Redactor(()))
    assert found.state == state, found.detail
    assert detail in found.detail
