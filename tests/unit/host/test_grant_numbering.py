"""A job's GPUs in the node's numbering and in the job's (issue 33 §1): every consumer of
the scheduler's grant against job environments built from Slurm's and NVIDIA's
documentation (``tests/unit/fixtures/gpu-grants/jobs.json``, each case naming its source).

- this job's processes (venv backend, ``probe``, ``fleet node-check``): the job's numbering,
  0..n-1 under ``ConstrainDevices``;
- a container a daemon starts (Docker's ``--gpus device=N``, CDI names): the node's;
- ``envforge detect`` seeing every GPU of the node (procfs, sysfs: not narrowed by a
  device cgroup) or only the job's (``nvidia-smi`` alone in a cgroup, a pod): both work.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import envforge.cli.running
import envforge.host.detect
from envforge.cli import main
from envforge.cli.running import gpu_environ, pick_for
from envforge.container.devices import (
    DeviceFlags,
    GpuPick,
    device_flags,
    granted_spec,
    pick_gpus,
    select_devices,
    visible_env,
)
from envforge.errors import InvalidInput
from envforge.fleet.outcome import _seen
from envforge.host.detect import OVERRIDE_VARS, HostInfo, detect
from envforge.host.grant import Grant, granted, node_facts, seen
from tests.helpers import paths

CASES_FILE = paths.UNIT / "fixtures" / "gpu-grants" / "jobs.json"
DATA: dict[str, Any] = json.loads(CASES_FILE.read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in DATA["cases"]}
SYSFS = paths.TESTS / "fixtures" / "sysfs"
H100X2 = SYSFS / "h100x2"
MI300X = SYSFS / "mi300x"  # 8 AMD GPUs: the KFD topology lists all of them
H100 = "NVIDIA H100 80GB HBM3"
GRANT_VARS = (
    "SLURM_JOB_ID",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURMD_NODENAME",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "KUBERNETES_SERVICE_HOST",
    "NPROC_PER_NODE",
    "CUDA_DEVICE_ORDER",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*OVERRIDE_VARS, *GRANT_VARS, "ENVFORGE_RECIPE_PATH"):
        monkeypatch.delenv(name, raising=False)


def no_tools(_argv: Sequence[str]) -> str | None:
    return None


def smi(rows: int) -> Callable[[Sequence[str]], str | None]:
    """``nvidia-smi`` listing ``rows`` H100s (in a device cgroup: only the job's)."""

    def run(argv: Sequence[str]) -> str | None:
        return f"{H100}, 9.0, 550.54.15\n" * rows if argv[0] == "nvidia-smi" else None

    return run


def nvidia_node(root: Path, count: int) -> Path:
    """A node with ``count`` H100s in /proc/driver/nvidia (all of them, as in a job)."""
    proc = root / "proc" / "driver" / "nvidia"
    (proc / "gpus").mkdir(parents=True)
    shutil.copy(H100X2 / "proc" / "driver" / "nvidia" / "version", proc / "version")
    info = (H100X2 / "proc/driver/nvidia/gpus/0000:18:00.0/information").read_text()
    for minor in range(count):
        bus = proc / "gpus" / f"0000:{0x18 + 0x10 * minor:02x}:00.0"
        bus.mkdir()
        text = info.replace("Device Minor: \t 0", f"Device Minor: \t {minor}")
        (bus / "information").write_text(text, encoding="utf-8")
    (root / "dev").mkdir()
    (root / "dev" / "nvidiactl").write_text("", encoding="utf-8")
    return root


def host_for(case: Mapping[str, Any], view: str, tmp_path: Path) -> HostInfo:
    """What ``envforge detect`` sees in the case's job: the node's GPUs (``node``) or
    only the job's (``job``: nvidia-smi alone in a device cgroup, or inside a pod)."""
    if case["vendor"] == "amd":
        return detect(root=MI300X, environ={}, tools=no_tools)
    if view == "node":
        return detect(root=nvidia_node(tmp_path, case["node_gpus"]), environ={}, tools=no_tools)
    count = len(case["job"].split(","))
    if case["environ"].get("KUBERNETES_SERVICE_HOST"):  # the toolkit masks procfs
        return detect(root=nvidia_node(tmp_path, count), environ={}, tools=no_tools)
    return detect(root=tmp_path, environ={}, tools=smi(count))


def views(case: Mapping[str, Any]) -> list[str]:
    if case["vendor"] == "amd":
        return ["node"]
    if case["environ"].get("KUBERNETES_SERVICE_HOST"):
        return ["job"]  # inside the pod only its GPUs exist
    return ["node", "job"]


SCENARIOS = [(name, view) for name, case in CASES.items() for view in views(case)]


def pick_in_job(case: Mapping[str, Any], view: str, tmp_path: Path) -> tuple[Grant, GpuPick]:
    grant = granted(case["environ"])
    assert grant is not None
    host = host_for(case, view, tmp_path)
    spec = granted_spec(grant, host.gpus, case["vendor"])
    return grant, pick_gpus(spec, host.gpus, case["vendor"], grant=grant)


# --------------------------------------------------------------------------- the fixtures


def test_every_case_names_a_documented_source() -> None:
    for case in DATA["cases"]:
        assert case["source"] in DATA["sources"], case["name"]
        assert DATA["sources"][case["source"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_grant_keeps_both_numberings(name: str) -> None:
    case = CASES[name]
    grant = granted(case["environ"])
    assert grant is not None
    assert grant.visible == case["job"]
    if case["node"]:
        assert grant.gpus == case["node"]
    assert grant.renumbered == (case["node"] != case["job"] and bool(case["node"]))
    assert grant.job == case.get("job_id", case["environ"].get("SLURM_JOB_ID", ""))
    said = grant.describe()
    assert case["job"] in said
    if grant.renumbered:
        assert case["node"] in said
    if case["environ"].get("SLURMD_NODENAME"):
        assert said.endswith(f"on {case['environ']['SLURMD_NODENAME']}")


@pytest.mark.parametrize("name", [c["name"] for c in DATA["no_grant"]])
def test_no_grant_where_no_variable_lists_gpus(name: str) -> None:
    case = next(c for c in DATA["no_grant"] if c["name"] == name)
    assert granted(case["environ"]) is None


# --------------------------------------------------------------------------- consumers


@pytest.mark.parametrize(("name", "view"), SCENARIOS)
def test_this_jobs_processes_get_the_jobs_numbering(name: str, view: str, tmp_path: Path) -> None:
    """venv backend, ``probe --gpu``, ``fleet node-check``: the job's own numbers."""
    case = CASES[name]
    _grant, pick = pick_in_job(case, view, tmp_path)
    env = visible_env(pick, container=False)
    variable = "ROCR_VISIBLE_DEVICES" if case["vendor"] == "amd" else "CUDA_VISIBLE_DEVICES"
    assert env[variable] == case["job"]
    assert env["NPROC_PER_NODE"] == str(len(case["job"].split(",")))


@pytest.mark.parametrize(("name", "view"), [(n, v) for n, v in SCENARIOS if CASES[n]["daemon"]])
def test_a_daemons_container_gets_the_nodes_numbering(name: str, view: str, tmp_path: Path) -> None:
    """Docker / rootful Podman start the container outside the job's cgroup: the device
    request and CDI names use the node's numbers, the container counts from 0."""
    case = CASES[name]
    _grant, pick = pick_in_job(case, view, tmp_path)
    node = case["node"].split(",")
    inside = ",".join(str(i) for i in range(len(node)))
    if case["vendor"] == "amd":
        dev = MI300X / "dev"
        flags = select_devices(
            device_flags("amd", dev_root=dev, proc_root=MI300X / "proc"), pick, dev_root=dev
        )
        minors = [128 + 8 * int(n) for n in node]  # the fixture's render node of each GPU
        assert flags.devices[1:] == tuple(str(dev / "dri" / f"renderD{m}") for m in minors)
        assert dict(flags.env)["ROCR_VISIBLE_DEVICES"] == inside
        return
    request = select_devices(DeviceFlags(vendor="nvidia", gpu_request=True), pick)
    assert request.device_ids == tuple(node)
    assert request.cli_args()[-1] == f'"device={case["node"]}"'
    assert dict(request.env)["CUDA_VISIBLE_DEVICES"] == inside
    cdi = DeviceFlags(vendor="nvidia", cdi_devices=("nvidia.com/gpu=all",), path="cdi")
    assert select_devices(cdi, pick).cdi_devices == tuple(f"nvidia.com/gpu={n}" for n in node)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_report_records_the_node_and_both_numberings(name: str) -> None:
    case = CASES[name]
    environ = case["environ"]
    node, variables = node_facts(environ)
    assert node == environ.get("SLURMD_NODENAME", node)
    recorded = dict(variables)
    for variable in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        if variable in environ:
            assert recorded[variable] == environ[variable]
    grant = granted(environ)
    assert grant is not None
    assert Grant.from_dict(json.loads(json.dumps(grant.to_dict()))) == grant


def test_task_json_seen_and_status_name_the_jobs_and_the_nodes_numbers() -> None:
    record = {"seen": seen(CASES["slurm-constrained-two-of-eight"]["environ"])}
    assert _seen(record) == {
        "node": "gpu-n04",
        "job": "0,1",
        "job_variable": "CUDA_VISIBLE_DEVICES",
        "node_indexes": "2,3",
        "node_indexes_variable": "SLURM_JOB_GPUS",
    }


def test_a_grant_recorded_before_the_jobs_numbering_still_reads() -> None:
    old = {"variable": "SLURM_JOB_GPUS", "gpus": "1,3", "node": "n4", "job": "7_2"}
    grant = Grant.from_dict(old)
    assert grant == Grant("SLURM_JOB_GPUS", "1,3", "n4", "7_2")
    assert grant is not None
    assert not grant.renumbered
    assert Grant.from_dict({"gpus": 3}) is None
    assert Grant.from_dict({}) is None


# --------------------------------------------------------------------------- refusals


def test_a_gpu_the_constrained_job_cannot_open_is_refused(tmp_path: Path) -> None:
    case = CASES["slurm-constrained-two-of-eight"]
    grant = granted(case["environ"])
    host = host_for(case, "node", tmp_path)
    with pytest.raises(InvalidInput) as err:
        pick_gpus("5", host.gpus, "nvidia", grant=grant)
    assert "--gpu 5: not among the GPUs the scheduler granted this job" in err.value.message
    assert "SLURM_JOB_GPUS=2,3 (this job's 0,1: CUDA_VISIBLE_DEVICES)" in err.value.message
    # Without device cgroups another GPU can still be opened: the old behaviour stays.
    loose = granted(CASES["slurm-unconstrained-two-of-eight"]["environ"])
    assert pick_gpus("5", host.gpus, "nvidia", grant=loose).ordinals == (5,)


def test_a_grant_detect_cannot_number_is_one_error(tmp_path: Path) -> None:
    grant = granted({"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "6,7", "CUDA_VISIBLE_DEVICES": "4,5"})
    assert grant is not None
    host = detect(root=tmp_path, environ={}, tools=smi(1))
    with pytest.raises(InvalidInput, match="envforge detect sees 1 nvidia GPU"):
        granted_spec(grant, host.gpus, "nvidia")


def test_nvidia_smi_in_a_cgroup_does_not_rename_the_nodes_other_gpus(tmp_path: Path) -> None:
    """procfs lists the node's 8 GPUs, nvidia-smi the job's 2: rows match by name."""
    host = detect(root=nvidia_node(tmp_path, 8), environ={}, tools=smi(2))
    assert [g.arch for g in host.gpus] == ["sm_90"] * 8
    assert any("nvidia-smi lists 2 of the 8 NVIDIA GPUs" in n for n in host.notes)


# --------------------------------------------------------------------------- commands


def _on_node(monkeypatch: pytest.MonkeyPatch, root: Path, environ: Mapping[str, str]) -> None:
    node = functools.partial(detect, root=root, tools=no_tools)
    monkeypatch.setattr(envforge.host.detect, "detect", node)
    monkeypatch.setattr(envforge.cli.running, "detect", node)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)


def test_build_in_a_constrained_job_says_both_numberings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _on_node(
        monkeypatch, nvidia_node(tmp_path, 8), CASES["slurm-constrained-two-of-eight"]["environ"]
    )
    # --tag stops a venv build before any work: only the selection is said
    assert main(["build", "auto", "--backend", "venv", "--tag", "x:y"]) == 2
    err = capsys.readouterr().err
    assert (
        "--gpu 2,3: the GPUs the scheduler granted "
        "(SLURM_JOB_GPUS=2,3 (this job's 0,1: CUDA_VISIBLE_DEVICES) on gpu-n04)"
    ) in err
    assert "GPU 2,3 (sm_90), NPROC_PER_NODE=2; this job numbers them 0,1" in err


def test_node_check_and_venv_get_the_jobs_numbers_the_prolog_the_nodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``fleet node-check`` runs as the Prolog (outside the cgroup: the node's numbers in
    both variables) or inside a job (the job's numbers)."""
    root = nvidia_node(tmp_path, 4)
    _on_node(monkeypatch, root, CASES["slurm-constrained-one-gpu"]["environ"])
    env = gpu_environ(pick_for(None, None, from_grant=True))
    assert env is not None
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("0", "PCI_BUS_ID")
    _on_node(monkeypatch, root, CASES["slurm-prolog-one-gpu"]["environ"])
    env = gpu_environ(pick_for(None, None, from_grant=True))
    assert env is not None
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert pick_for(None, None) is None  # without --gpu and not asked: the job's own env


def test_probe_in_a_constrained_job_gives_the_worker_the_jobs_numbers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _on_node(
        monkeypatch,
        nvidia_node(tmp_path / "node", 8),
        CASES["slurm-constrained-two-of-eight"]["environ"],
    )
    check = tmp_path / "check_env.py"
    check.write_text(
        "import os\n"
        "seen = os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('NPROC_PER_NODE')\n"
        "assert seen == ('1', '1'), seen\n",
        encoding="utf-8",
    )
    code = main(["probe", "--level", "quick", "--gpu", "3", "--check", str(check), "--json"])
    captured = capsys.readouterr()
    assert "--gpu 3: GPU 3 (sm_90), NPROC_PER_NODE=1; this job numbers them 1" in captured.err
    steps = {s["name"]: s for s in json.loads(captured.out)["steps"]}
    check_step = next(s for name, s in steps.items() if "check_env" in name)
    assert check_step["status"] == "pass", check_step
    assert code in (0, 1)  # the CPU-only machine decides the other steps
    assert main(["probe", "--level", "quick", "--gpu", "5"]) == 2
    assert "not among the GPUs the scheduler granted this job" in capsys.readouterr().err
