"""Fleet planning (issue 21): pure plans, the engines' files, task states, the CLI's
refusals, and the scheduler's grant as the default ``--gpu``. The real Slurm cycle is
tests/acceptance/test_fleet_slurm.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from envforge.backends import BACKENDS
from envforge.cli import main
from envforge.cli.fleet import _print
from envforge.errors import InvalidInput
from envforge.evidence.records import Redactor
from envforge.fleet import github, k8s, outcome, slurm
from envforge.fleet.plan import Plan, Site
from envforge.fleet.planning import load_plan, make_plan, plan_from_dict
from envforge.host.grant import granted
from envforge.recipe.catalogue import Catalogue
from tests.helpers.fleet_args import plan_args
from tests.helpers.matrix_synth import corpus, make_report

CAT = Catalogue.default({})


def recipes(*names: str) -> list[tuple[str, object]]:
    return [(n, CAT.load(n)) for n in names]


def plan_of(*names: str, **kw: object) -> Plan:
    engine = kw.pop("engine", "slurm")
    kw.setdefault("images", BACKENDS[str(kw.get("backend", "docker"))].runs_images())
    return make_plan(engine, recipes(*names), **kw)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SLURM_JOB_ID",
        "SLURM_JOB_GPUS",
        "KUBERNETES_SERVICE_HOST",
        "ROCR_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "ENVFORGE_RECIPE_PATH",
    ):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- plan


def test_each_recipe_on_its_own_arch_and_nodes_tasks_each() -> None:
    plan = plan_of("gfx942", "sm_90", "cpu", nodes=2)
    assert [(t.index, t.recipe, t.arch, t.gpus) for t in plan.tasks] == [
        (0, "gfx942", "gfx942", 1),
        (1, "gfx942", "gfx942", 1),
        (2, "sm_90", "sm_90", 1),
        (3, "sm_90", "sm_90", 1),
        (4, "cpu", "cpu", 0),
        (5, "cpu", "cpu", 0),
    ]
    assert plan.tasks[0].image.startswith("envforge/gfx942:torch")
    assert plan.tasks[0].recipe_hash == CAT.load("gfx942").hash


def test_given_archs_pair_a_cpu_recipe_with_each_and_refuse_a_gpu_recipe_off_its_arch() -> None:
    plan = plan_of("cpu", "gfx942", archs=("gfx942", "sm_90"), backend="venv")
    assert [(t.recipe, t.arch, t.gpus, t.image) for t in plan.tasks] == [
        ("cpu", "gfx942", 1, ""),
        ("cpu", "sm_90", 1, ""),
        ("gfx942", "gfx942", 1, ""),
    ]
    with pytest.raises(InvalidInput, match="--recipe sm_90: its GPU arch sm_90 is not among"):
        plan_of("sm_90", archs=("gfx942",))
    with pytest.raises(InvalidInput, match="--nodes 0"):
        plan_of("cpu", nodes=0)
    with pytest.raises(InvalidInput, match="--backend venv is for Slurm"):
        plan_of("cpu", engine="k8s", backend="venv")


def test_plan_json_round_trips_and_its_id_follows_its_content(tmp_path: Path) -> None:
    plan = plan_of("cpu", "gfx942", site=Site(partition="gpu", features=(("gfx942", "mi300"),)))
    (tmp_path / "plan.json").write_text(plan.to_json())
    assert load_plan(tmp_path) == plan
    assert plan_of("cpu").id != plan_of("cpu", nodes=2).id
    broken = json.loads(plan.to_json())
    del broken["tasks"][1]["recipe_hash"]
    with pytest.raises(InvalidInput, match=r"plan.json: tasks\[1\] lacks key 'recipe_hash'"):
        plan_from_dict(broken, "plan.json")
    with pytest.raises(InvalidInput, match="no such file"):
        load_plan(tmp_path / "nowhere")


# --------------------------------------------------------------------------- slurm


def test_one_sbatch_array_per_arch_with_gres_constraint_and_site_options(tmp_path: Path) -> None:
    site = Site(partition="gpu", account="lab", time="01:00:00", features=(("gfx942", "mi300x"),))
    plan = plan_of(
        "gfx942", "sm_90", "cpu", nodes=2, site=site, envforge=("/x/python", "-m", "envforge")
    )
    files = slurm.render(plan, tmp_path / "my plan")
    assert sorted(files) == [
        "certify-cpu-gpu0.sbatch",
        "certify-gfx942-gpu1.sbatch",
        "certify-sm_90-gpu1.sbatch",
    ]
    amd = files["certify-gfx942-gpu1.sbatch"].splitlines()
    assert "#SBATCH --array=0-1" in amd
    assert "#SBATCH --gres=gpu:1" in amd
    assert "#SBATCH --constraint=mi300x" in amd  # the site's feature name
    assert "#SBATCH --partition=gpu" in amd
    assert "#SBATCH --account=lab" in amd
    assert "#SBATCH --time=01:00:00" in amd
    assert amd[-1] == (
        f"exec /x/python -m envforge fleet task '{tmp_path}/my plan' \"$SLURM_ARRAY_TASK_ID\""
        ' ${1:+--run "$1"}'  # the run fleet submit started: the script's argument
    )
    assert "#SBATCH --constraint=sm_90" in files["certify-sm_90-gpu1.sbatch"]
    cpu = files["certify-cpu-gpu0.sbatch"]
    assert "#SBATCH --array=4-5" in cpu
    assert "--gres" not in cpu
    assert "--constraint" not in cpu


def test_array_ranges() -> None:
    assert slurm._ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert slurm._ranges([3]) == "3"


# --------------------------------------------------------------------------- kubernetes


def _pci(arch: str) -> list[int]:
    return {"gfx942": [0x74A1, 0x74A0]}.get(arch, [])


def test_jobs_ask_for_gpus_in_limits_and_select_nodes_by_the_vendor_labels() -> None:
    plan = plan_of("gfx942", "sm_90", nodes=3, site=Site(registry="127.0.0.1:5000/lab"))
    docs = k8s.manifests(plan, "print('worker')", {t.index: "{}" for t in plan.tasks}, _pci)
    assert [d["kind"] for d in docs] == ["ConfigMap", "ConfigMap", "Job", "ConfigMap", "Job"]
    amd, nvidia = docs[2], docs[4]
    pod = amd["spec"]["template"]["spec"]
    assert amd["spec"]["completions"] == 3
    assert amd["spec"]["completionMode"] == "Indexed"
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "2", "memory": "16Gi"},
        "limits": {"cpu": "2", "memory": "16Gi", "amd.com/gpu": "1"},
    }
    # where `envforge publish --registry 127.0.0.1:5000/lab` pushes it
    assert pod["containers"][0]["image"].startswith("127.0.0.1:5000/lab/gfx942:")
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1", "74a0"]}
    ]
    npod = nvidia["spec"]["template"]["spec"]
    assert npod["nodeSelector"] == {
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
    }
    assert npod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert docs[0]["data"]["worker.py"] == "print('worker')"


def test_an_amd_arch_without_pci_ids_needs_a_site_label() -> None:
    plan = plan_of("gfx1100")
    with pytest.raises(InvalidInput) as refused:
        k8s.manifests(plan, "", {0: "{}"}, lambda _a: [])
    assert "no PCI device id" in refused.value.message
    assert "--arch-label envforge.io/gpu-arch" in str(refused.value.hint)
    labelled = plan_of("gfx1100", site=Site(arch_label="envforge.io/gpu-arch"))
    job = k8s.manifests(labelled, "", {0: "{}"}, lambda _a: [])[2]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"envforge.io/gpu-arch": "gfx1100"}
    assert k8s.selector("sm_120", plan, _pci) == {
        "nodeSelector": {"nvidia.com/gpu.compute.major": "12", "nvidia.com/gpu.compute.minor": "0"}
    }


# --------------------------------------------------------------------------- github


def test_workflow_matrix_runs_each_task_on_its_arch_label() -> None:
    plan = plan_of("gfx942", "cpu", archs=("gfx942",), backend="venv", engine="github")
    flow = github.workflow(plan)
    certify = flow["jobs"]["certify"]
    assert certify["runs-on"] == ["self-hosted", "gpu", "${{ matrix.arch }}"]
    assert certify["strategy"]["fail-fast"] is False
    assert certify["strategy"]["matrix"]["include"] == [
        {"task": "000", "recipe": "gfx942", "arch": "gfx942"},
        {"task": "001", "recipe": "cpu", "arch": "gfx942"},
    ]
    assert "--backend venv" in certify["steps"][2]["run"]
    assert github.actionlint_config(plan) == {"self-hosted-runner": {"labels": ["gfx942", "gpu"]}}


def test_workflow_carries_recipe_files_and_the_wheel_folder_and_pins_actions(
    tmp_path: Path,
) -> None:
    """A recipe file reaches the runner (copied beside the workflow, named under
    .github/envforge/), --wheelhouse is passed on, and every action is pinned by a commit."""
    text = Catalogue.default().resolve("cpu").read_text().replace("name: cpu\n", "name: my-cpu\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    wheels = tmp_path / "wheels dir"
    wheels.mkdir()
    out = tmp_path / "plan"
    argv = ["fleet", "plan", "--engine", "github", "--recipe", str(mine), "--recipe", "gfx942"]
    argv += ["--arch", "gfx942", "--backend", "venv", "--wheelhouse", str(wheels), "-o", str(out)]
    assert main(argv) == 0
    assert (out / "recipe-my-cpu.yaml").read_text() == text
    flow = yaml.safe_load((out / "workflow.yml").read_text())
    include = flow["jobs"]["certify"]["strategy"]["matrix"]["include"]
    assert [i["recipe"] for i in include] == [".github/envforge/recipe-my-cpu.yaml", "gfx942"]
    assert f"--wheelhouse '{wheels}'" in flow["jobs"]["certify"]["steps"][2]["run"]
    uses = [
        ln.split("uses: ", 1)[1]
        for ln in (out / "workflow.yml").read_text().splitlines()
        if "uses: " in ln
    ]
    assert len(uses) == 5
    assert all(re.fullmatch(r"actions/[a-z-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+", u) for u in uses), (
        uses
    )
    lint = shutil.which("actionlint")
    if lint:
        config = str(out / "actionlint.yaml")
        done = subprocess.run(
            [lint, "-config-file", config, str(out / "workflow.yml")], check=False
        )
        assert done.returncode == 0


# --------------------------------------------------------------------------- states


def _write_task(folder: Path, index: int, report: dict[str, object] | None, code: int) -> None:
    out = folder / f"reports/{index:03d}"
    out.mkdir(parents=True)
    if report is not None:
        (out / "probe.json").write_text(json.dumps(report))
    (out / "task.json").write_text(
        json.dumps({"exit": code, "node": "n1", "granted": {"gpus": "1"}})
    )


def test_task_states_passed_failed_missing_queued_and_a_foreign_report(tmp_path: Path) -> None:
    plan = plan_of("cpu", nodes=5)
    spec = corpus(1)[0]
    good = json.loads(make_report(spec).to_json())
    good.update(status="pass")
    for step in good["steps"]:
        step["status"] = "pass"
    good["recipe"] = {"name": "cpu", "hash": plan.tasks[0].recipe_hash}
    good["host"]["fleet"] = {"plan": plan.id, "task": "0", "nonce": plan.nonce}
    foreign = dict(good, recipe={"name": "cpu", "hash": "0" * 64})
    _write_task(tmp_path, 0, good, 0)
    _write_task(tmp_path, 1, foreign, 0)
    _write_task(tmp_path, 2, None, 3)
    found = outcome.states(plan, tmp_path, {4: "PENDING"}, Redactor(()))
    got = [(s.state, s.detail) for s in found]
    assert got[0] == ("passed", "")
    assert got[1][0] == "refused"  # no evidence for the plan: neither counted nor imported
    assert "recipe hash 000000000000" in got[1][1]
    assert found[1].record is None
    assert found[1].document is None
    assert got[2] == ("failed", "ended with exit 3 and no report")
    assert got[3][0] == "missing"
    assert got[4] == ("queued", "PENDING")
    assert found[0].to_dict()["node"] == "n1"
    assert found[0].to_dict()["gpus"] == "1"
    assert outcome.counts(found) == {
        "passed": 1,
        "failed": 1,
        "refused": 1,
        "missing": 1,
        "blocked": 0,
        "queued": 1,
        "running": 0,
    }


def test_status_names_the_nodes_gpus_and_the_jobs_and_reads_an_old_task_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """task.json's ``granted`` since issue 33 carries the job's numbering (``visible``);
    one from before has the node's only and still reads."""
    task = plan_of("cpu", nodes=2).tasks[0]
    new = {"variable": "SLURM_JOB_GPUS", "gpus": "2,3", "node": "n4", "job": "9"}
    new |= {"visible": "0,1", "visible_variable": "CUDA_VISIBLE_DEVICES"}
    old = {"variable": "SLURM_JOB_GPUS", "gpus": "2,3", "node": "n4", "job": "9"}
    states = [
        outcome.TaskState(task, "failed", node={"node": "n4", "granted": g}) for g in (new, old)
    ]
    assert [(s.to_dict()["gpus"], s.to_dict()["visible"]) for s in states] == [
        ("2,3", "0,1"),
        ("2,3", ""),
    ]
    _print(tuple(states))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("failed on n4 GPU 2,3 (the job's 0,1)")
    assert lines[1].endswith("failed on n4 GPU 2,3")


# --------------------------------------------------------------------------- node


def test_granted_reads_the_scheduler_variables_only_inside_a_job() -> None:
    assert granted({"CUDA_VISIBLE_DEVICES": "0"}) is None  # not a job: the user's own
    grant = granted(
        {
            "SLURM_JOB_ID": "7",
            "SLURM_ARRAY_JOB_ID": "7",
            "SLURM_ARRAY_TASK_ID": "2",
            "SLURM_JOB_GPUS": "1,3",
            "SLURMD_NODENAME": "n4",
        }
    )
    assert grant is not None
    assert (grant.variable, grant.gpus, grant.node, grant.job) == (
        "SLURM_JOB_GPUS",
        "1,3",
        "n4",
        "7_2",
    )
    pod = granted(
        {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "NVIDIA_VISIBLE_DEVICES": "all",
            "CUDA_VISIBLE_DEVICES": "0",
        }
    )
    assert pod is not None
    assert (pod.variable, pod.gpus) == ("CUDA_VISIBLE_DEVICES", "0")


def test_build_in_a_slurm_job_takes_the_granted_gpu_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_VENDOR", "amd")
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1100")
    monkeypatch.setenv("ENVFORGE_GPU_COUNT", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_JOB_GPUS", "1")
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    # --tag stops a venv build before any work: only the selection is said
    assert main(["build", "gfx1100", "--backend", "venv", "--tag", "x:y"]) == 2
    err = capsys.readouterr().err
    assert "--gpu 1: the GPUs the scheduler granted (SLURM_JOB_GPUS=1 on node7)" in err
    assert "--gpu 1: GPU 1 (gfx1100)" in err
    assert main(["build", "cpu", "--backend", "venv", "--tag", "x:y"]) == 2
    assert "not used, the recipe needs none" in capsys.readouterr().err


# --------------------------------------------------------------------------- CLI


def test_cli_plan_writes_the_files_and_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert main(plan_args(out, "--arch", "gfx942", engine="github")) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "actionlint.yaml",
        "logs",
        "plan.json",
        "workflow.yml",
    ]
    text = (out / "workflow.yml").read_text()
    assert "\non:\n  workflow_dispatch: null\n" in text  # a bare key, as Actions reads it
    assert yaml.safe_load(text)["jobs"]["certify"]["strategy"]["matrix"]["include"]
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert main(plan_args(bad, "--feature", "gfx942")) == 2
    err = capsys.readouterr().err
    assert err.count("error") == 1
    assert "--feature 'gfx942': expected ARCH=NAME" in err
    assert not bad.exists()  # nothing half-written
    assert main(["fleet", "status", str(tmp_path / "nowhere")]) == 2
    assert main(["fleet", "submit", str(out)]) == 2  # a workflow is committed, not submitted
    assert "workflow_dispatch" in capsys.readouterr().err
