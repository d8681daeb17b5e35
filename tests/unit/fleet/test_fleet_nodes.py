"""Issue 33 §1, nodes by name: reading the nodes from sinfo/scontrol/kubectl, one task per
node pinned with ``--nodelist`` (Slurm) or node-name affinity (Kubernetes), ``--gpus all``,
``--exclusive``, the GPUs a job sees, and each visible GPU probed by the worker.

Fixtures: the sinfo lines follow sinfo's documented output (one line per node and
partition with ``-N``, the default partition suffixed ``*``, ``(null)`` for none;
https://slurm.schedmd.com/sinfo.html), the feature lists are those a real site documents
for its nodes (``AvailableFeatures=nvidia-gpu,nvidia-t4,t4,512GiB`` on r1t00,
https://docs.hpc.udel.edu/technical/slurm/darwin/synth_features), the GRES strings the
forms of https://slurm.schedmd.com/gres.conf.html (``gpu:tesla:2``), and the renumbering of
a job's GPUs under ``ConstrainDevices`` is https://slurm.schedmd.com/gres.html ("GPU
Management": CUDA_VISIBLE_DEVICES counts from 0 within the job's cgroup).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
import yaml

from envforge.cli import main
from envforge.errors import InvalidInput, Unavailable
from envforge.evidence.records import Redactor
from envforge.fleet import k8s, nodes, outcome, slurm
from envforge.fleet.plan import Plan
from envforge.fleet.planning import load_plan, plan_from_dict
from envforge.host.grant import seen
from tests.helpers.matrix_synth import corpus, make_report
from tests.unit.fleet.test_fleet import _write_task, plan_of
from tests.unit.fleet.test_fleet_k8s_schema import VERSION
from tests.unit.probe.worker.test_probe_worker import _load_worker

#: ``sinfo -h -N -o '%N %P %f %G'`` on a site of three nodes: r1n00 (no GPU) in the
#: default partition standard, r1t00 (2 T4) and r2v00 (4 V100) in gpu and, r1t00, also in
#: standard: r1t00 is listed once per partition.
SINFO = """\
r1n00 standard* standard,512GiB (null)
r1t00 standard* nvidia-gpu,nvidia-t4,t4,512GiB gpu:t4:2
r1t00 gpu nvidia-gpu,nvidia-t4,t4,512GiB gpu:t4:2
r2v00 gpu nvidia-gpu,nvidia-v100,v100,768GiB gpu:tesla:4(S:0-1)
"""

#: ``scontrol show nodes --oneliner``, the same nodes (fields cut to those read and some
#: with spaces in their values, as OS= and Reason= have).
SCONTROL = """\
NodeName=r1n00 Arch=x86_64 CoresPerSocket=32 AvailableFeatures=standard,512GiB ActiveFeatures=standard,512GiB Gres=(null) OS=Linux 5.14.0 #1 SMP Partitions=standard State=IDLE
NodeName=r1t00 Arch=x86_64 AvailableFeatures=nvidia-gpu,nvidia-t4,t4,512GiB ActiveFeatures=nvidia-gpu,nvidia-t4,t4,512GiB Gres=gpu:t4:2 Partitions=standard,gpu State=MIXED Reason=being tested [root@2026-11-28T04:00:00]
NodeName=r2v00 Arch=x86_64 AvailableFeatures=nvidia-gpu,nvidia-v100,v100,768GiB ActiveFeatures=nvidia-gpu,nvidia-v100,v100,768GiB Gres=gpu:tesla:4(S:0-1) Partitions=gpu State=IDLE
"""  # noqa: E501 - one node a line, as scontrol prints it


def test_sinfo_and_scontrol_give_the_same_nodes_each_once() -> None:
    for found in (nodes.parse_sinfo(SINFO), nodes.parse_scontrol(SCONTROL)):
        assert [n.name for n in found] == ["r1n00", "r1t00", "r2v00"]
        by = {n.name: n for n in found}
        assert set(by["r1t00"].partitions) == {"standard", "gpu"}
        assert by["r1n00"].features == {"standard", "512GiB"}
        assert [by[n].gpus for n in ("r1n00", "r1t00", "r2v00")] == [0, 2, 4]


def test_gres_counts_gpus_only() -> None:
    assert nodes.gres_gpus("gpu:tesla:4(S:0-1),nic:1") == 4
    assert nodes.gres_gpus("gpu:2") == 2
    assert nodes.gres_gpus("gpu:a100:4,gpu:v100:2") == 6
    assert nodes.gres_gpus("gpu") == 1
    assert nodes.gres_gpus("(null)") == 0
    assert nodes.gres_gpus("mps:100") == 0


def test_nodes_of_a_partition_with_a_feature_expression() -> None:
    found = nodes.parse_sinfo(SINFO)

    def named(partition: str = "", *features: str) -> list[str]:
        return [n.name for n in nodes.choose(found, partition=partition, features=features)]

    assert named() == ["r1n00", "r1t00"]  # the default partition's, where sbatch puts jobs
    assert named("gpu") == ["r1t00", "r2v00"]
    assert named("standard") == ["r1n00", "r1t00"]
    assert named("", "t4") == ["r1t00"]
    assert named("gpu", "t4|v100") == ["r1t00", "r2v00"]
    assert named("gpu", "nvidia-gpu&768GiB") == ["r2v00"]
    every = nodes.parse_scontrol(SCONTROL)  # no default partition named: every node
    assert [n.name for n in nodes.choose(every, features=["nvidia-gpu"])] == ["r1t00", "r2v00"]
    assert named("standard", "v100") == []
    assert nodes.expression_problem("[t4|v100]*2") is not None
    assert nodes.expression_problem("t4|v100&768GiB") is None


def test_a_job_s_gpus_are_named_as_it_sees_them_under_constrain_devices() -> None:
    job = {
        "SLURM_JOB_ID": "41",
        "SLURMD_NODENAME": "r2v00",
        "SLURM_JOB_GPUS": "2,3",  # the node's GRES indexes
        "CUDA_VISIBLE_DEVICES": "0,1",  # the job's cgroup, renumbered from 0
    }
    assert seen(job) == {
        "node": "r2v00",
        "job": "0,1",
        "job_variable": "CUDA_VISIBLE_DEVICES",
        "node_indexes": "2,3",
        "node_indexes_variable": "SLURM_JOB_GPUS",
    }
    step = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_STEP_GPUS": "1",
            "ROCR_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "1,5"}  # fmt: skip
    assert seen(step)["node_indexes"] == "1"  # the step's own GPUs first
    assert seen(step)["job_variable"] == "ROCR_VISIBLE_DEVICES"
    assert seen({"CUDA_VISIBLE_DEVICES": "0"}) == {}  # not in a job
    assert "job" not in seen({"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "GPU-3f9b"})


# --------------------------------------------------------------------------- plans


def _placed(**kw: Any) -> Plan:
    spots = (nodes.Spot("r1t00", 2), nodes.Spot("r2v00", 4))
    return plan_of("cpu", backend="venv", placement={"cpu": spots}, **kw)


def test_one_task_per_node_pinned_with_nodelist_and_all_its_gpus(tmp_path: Path) -> None:
    plan = _placed(exclusive=True, workdir="$TMPDIR")
    assert [(t.node, t.gpus) for t in plan.tasks] == [("r1t00", 2), ("r2v00", 4)]
    files = slurm.render(plan, tmp_path)
    assert sorted(files) == ["certify-cpu-gpu2-r1t00.sbatch", "certify-cpu-gpu4-r2v00.sbatch"]
    script = files["certify-cpu-gpu4-r2v00.sbatch"]
    assert "#SBATCH --nodelist=r2v00\n" in script
    assert "#SBATCH --exclusive\n" in script
    assert "#SBATCH --gres=gpu:4\n" in script
    assert "#SBATCH --array=1\n" in script
    again = plan_from_dict(json.loads(plan.to_json()), "plan.json")
    assert again == plan
    assert again.id == plan.id


def test_a_plan_without_nodes_keeps_its_json_and_id() -> None:
    plan = plan_of("cpu", backend="venv")
    data = plan.to_dict()
    assert "node" not in data["tasks"][0]
    assert not {"workdir", "cache_dir", "exclusive"} & set(data)
    assert "--nodelist" not in "".join(slurm.render(plan, Path("/p")).values())


def test_a_hostile_node_name_in_plan_json_is_refused() -> None:
    data = json.loads(_placed().to_json())
    data["tasks"][0]["node"] = "../x\n#SBATCH --uid=0"
    with pytest.raises(InvalidInput, match=r"tasks\[0\]: key 'node'"):
        plan_from_dict(data, "plan.json")
    data = json.loads(_placed().to_json())
    data["workdir"] = "relative/path"
    with pytest.raises(InvalidInput, match="key 'workdir'"):
        plan_from_dict(data, "plan.json")


def test_kubernetes_one_job_per_node_by_node_name_affinity() -> None:
    spots = (nodes.Spot("gpu-a"), nodes.Spot("gpu-b"))
    plan = plan_of("gfx942", engine="k8s", placement={"gfx942": spots})
    docs = k8s.manifests(plan, "", {}, lambda arch: [0x74A1])
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert len(jobs) == 2
    for job, node in zip(jobs, ("gpu-a", "gpu-b"), strict=True):
        assert job["spec"]["completions"] == 1
        terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms == [
            {
                "matchExpressions": [
                    {"key": "amd.com/gpu.device-id", "operator": "In", "values": ["74a1"]}
                ],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}],
            }
        ]


def test_kubectl_nodes_are_matched_against_the_arch_selection() -> None:
    listed = json.dumps(
        {
            "items": [
                {
                    "metadata": {"name": "mi300-1", "labels": {"amd.com/gpu.device-id": "74a1"}},
                    "status": {"allocatable": {"amd.com/gpu": "8"}},
                },
                {
                    "metadata": {"name": "h100-1", "labels": {"nvidia.com/gpu.compute.major": "9"}},
                    "status": {"allocatable": {"nvidia.com/gpu": "4"}},
                },
            ]
        }
    )
    found = nodes.parse_kubectl(listed, ["amd.com/gpu", "nvidia.com/gpu"])
    assert [(n.name, n.gpus) for n in found] == [("mi300-1", 8), ("h100-1", 4)]
    selection = k8s.selector("gfx942", plan_of("gfx942", engine="k8s"), lambda a: [0x74A1])
    assert [n.name for n in found if nodes.selected(n, selection)] == ["mi300-1"]


# --------------------------------------------------------------------------- the CLI


def _tool(folder: Path, name: str, text: str, code: int = 0) -> None:
    (folder / f"{name}.out").write_text(text)
    path = folder / name
    path.write_text(
        f'#!/bin/sh\necho "$@" >> {folder}/{name}.args\ncat {folder}/{name}.out\nexit {code}\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def _plan(tmp_path: Path, *args: str) -> int:
    return main(["fleet", "plan", "--recipe", "cpu", "--backend", "venv", *args,
                 "-o", str(tmp_path / "p")])  # fmt: skip


def test_every_node_of_a_partition_from_sinfo(tools: Path, tmp_path: Path) -> None:
    _tool(tools, "sinfo", SINFO)
    assert _plan(tmp_path, "--engine", "slurm", "--every-node", "--partition", "gpu") == 0
    plan = load_plan(tmp_path / "p")
    assert [t.node for t in plan.tasks] == ["r1t00", "r2v00"]
    assert plan.workdir == "$TMPDIR"  # node-local by default
    assert "-h -N -o %N %P %f %G" in (tools / "sinfo.args").read_text()


def test_every_node_with_a_bare_feature_and_all_gpus(tools: Path, tmp_path: Path) -> None:
    _tool(tools, "sinfo", SINFO)
    code = _plan(tmp_path, "--engine", "slurm", "--every-node", "--feature", "nvidia-gpu",
                 "--gpus", "all", "--partition", "gpu")  # fmt: skip
    assert code == 0
    plan = load_plan(tmp_path / "p")
    assert [(t.node, t.gpus) for t in plan.tasks] == [("r1t00", 2), ("r2v00", 4)]
    assert plan.exclusive  # the whole node, all its GPUs


def test_scontrol_answers_when_sinfo_fails(tools: Path, tmp_path: Path) -> None:
    _tool(tools, "sinfo", "", code=1)
    _tool(tools, "scontrol", SCONTROL)
    assert _plan(tmp_path, "--engine", "slurm", "--every-node", "--partition", "standard") == 0
    assert [t.node for t in load_plan(tmp_path / "p").tasks] == ["r1n00", "r1t00"]


def test_no_node_or_no_scheduler_is_one_line(
    tools: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tool(tools, "sinfo", SINFO)
    assert _plan(tmp_path, "--engine", "slurm", "--every-node", "--partition", "nope") == 2
    assert "--every-node: no node for arch cpu" in capsys.readouterr().err
    _tool(tools, "sinfo", "", code=1)
    _tool(tools, "scontrol", "", code=1)
    assert _plan(tmp_path, "--engine", "slurm", "--every-node") == Unavailable.exit_code
    assert not (tmp_path / "p").exists()


def test_nodelist_exclusive_and_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _plan(tmp_path, "--engine", "slurm", "--nodelist", "n1,n2", "--node", "n3",
                 "--exclusive", "--workdir", "/scratch", "--cache-dir", "/shared/uv")  # fmt: skip
    assert code == 0
    plan = load_plan(tmp_path / "p")
    assert [t.node for t in plan.tasks] == ["n1", "n2", "n3"]
    assert (plan.exclusive, plan.workdir, plan.cache_dir) == (True, "/scratch", "/shared/uv")
    for args, said in (
        (("--engine", "slurm", "--nodelist", "n[1-4]"), "--nodelist 'n[1-4]'"),
        (("--engine", "slurm", "--gpus", "all"), "--gpus all: needs nodes by name"),
        (("--engine", "github", "--nodelist", "n1"), "places no task on a named node"),
        (("--engine", "slurm", "--workdir", "scratch"), "--workdir 'scratch': not an absolute"),
        (("--engine", "k8s", "--exclusive"), "--exclusive: Slurm only"),
        (("--engine", "slurm", "--sbatch-arg=--nodelist=n1"), "--nodelist or --every-node"),
    ):
        capsys.readouterr()
        assert _plan(tmp_path / "x", *args) == 2, args
        assert said in capsys.readouterr().err


def test_kubernetes_every_node_reads_kubectl(tools: Path, tmp_path: Path) -> None:
    listed = {"items": [{"metadata": {"name": "cpu-1", "labels": {}}, "status": {}}]}
    _tool(tools, "kubectl", json.dumps(listed))
    code = main(["fleet", "plan", "--engine", "k8s", "--recipe", "cpu", "--every-node",
                 "-o", str(tmp_path / "k")])  # fmt: skip
    assert code == 0
    assert [t.node for t in load_plan(tmp_path / "k").tasks] == ["cpu-1"]
    docs = list(yaml.safe_load_all((tmp_path / "k" / "jobs.yaml").read_text()))
    assert '"key": "metadata.name"' in json.dumps(docs[-1])
    for doc in docs:  # the pinned Job is one the API takes
        kubernetes_validate.validate(doc, VERSION, strict=True)


# --------------------------------------------------------------------------- the worker


class _Tensor:
    def __init__(self, where: str, log: list[str]) -> None:
        self.where, self.log = where, log

    def __mul__(self, other: float) -> _Tensor:
        return self

    def sum(self) -> Any:
        return SimpleNamespace(
            item=lambda: 0.0 if self.where == "cuda:1" and "bad" in self.log else 200.0
        )


def _torch(count: int, log: list[str]) -> Any:
    def ones(*shape: int, device: str) -> _Tensor:
        log.append(device)
        return _Tensor(device, log)

    cuda = SimpleNamespace(device_count=lambda: count, synchronize=lambda: None)
    return SimpleNamespace(ones=ones, cuda=cuda)


def test_the_worker_probes_each_visible_gpu() -> None:
    worker = _load_worker()
    log: list[str] = []
    ctx = worker.Context({"vendor": "nvidia"})
    ctx.torch, ctx.device = _torch(3, log), "cuda"
    status, detail, _ = worker.call_step(ctx, "small-tensor", worker.step_small_tensor)
    assert (status, log) == ("pass", ["cuda:0", "cuda:1", "cuda:2"])
    assert detail == "10x10 tensor on each of 3 devices (cuda:0, cuda:1, cuda:2)"
    log[:] = ["bad"]
    status, detail, _ = worker.call_step(ctx, "small-tensor", worker.step_small_tensor)
    assert status == "fail"
    assert "on cuda:1" in detail
    one: list[str] = []
    ctx.torch = _torch(1, one)
    assert (
        worker.call_step(ctx, "small-tensor", worker.step_small_tensor)[1] == "10x10 tensor on cuda"
    )
    assert one == ["cuda"]


def test_a_pinned_task_s_report_from_another_node_is_refused(tmp_path: Path) -> None:
    plan = plan_of("cpu", placement={"cpu": (nodes.Spot("n1"), nodes.Spot("n2"))})
    good = json.loads(make_report(corpus(1)[0]).to_json())
    good.update(status="pass")
    for step in good["steps"]:
        step["status"] = "pass"
    good["recipe"] = {"name": "cpu", "hash": plan.tasks[0].recipe_hash}
    good["host"]["node"] = "n1"
    for task in plan.tasks:
        good["host"]["fleet"] = {"plan": plan.id, "task": str(task.index), "nonce": plan.nonce}
        _write_task(tmp_path, task.index, good, 0)  # task.json: node n1, as the report
    found = outcome.states(plan, tmp_path, {}, Redactor(()))
    assert [s.state for s in found] == ["passed", "refused"]
    assert "pinned to node 'n2', its report ran on 'n1'" in found[1].detail
    assert found[1].to_dict()["pinned"] == "n2"
