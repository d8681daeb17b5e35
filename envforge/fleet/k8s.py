"""Kubernetes: the plan as ``batch/v1`` Jobs, one per (recipe image x arch), and its results.

An Indexed Job has one pod template, so one image: the tasks of one (recipe, arch) pair
become one Job with ``completions`` = its node count, spread over distinct nodes
(``topologySpreadConstraints`` on ``kubernetes.io/hostname``). The pod *is* the image
under test; envforge's stdlib-only probe worker, the pod wrapper and the pair's spec come
from ConfigMaps (``python3 /envforge/pod.py /envforge/worker.py /envforge/spec-NNN.json
NNN``), so no Docker socket and no envforge install is needed in the pod. The objects:
:mod:`envforge.fleet.k8s_manifests`; node selection: :mod:`envforge.fleet.k8s_select`.

Results: each pod prints its report framed in its log; ``fleet collect DIR --from-logs
LOGS`` imports them (:mod:`envforge.fleet.podlog`) as Slurm tasks' reports. No cluster
is reached from envforge: ``kubectl`` is the site's. Checked here against the API schema
(kubernetes-validate) and by running the pod command locally; no API server runs here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from envforge.core.resources import templates_dir
from envforge.errors import InvalidInput, Unavailable
from envforge.fleet.base import yaml_text
from envforge.fleet.k8s_manifests import job, manifests
from envforge.fleet.k8s_select import (
    AMD_DEVICE_ID,
    NVIDIA_MAJOR,
    NVIDIA_MINOR,
    RESOURCE,
    dns_name,
    selector,
)
from envforge.fleet.plan import Plan, Task
from envforge.fleet.slurm_state import JobState
from envforge.knowledge.compiled import load_table
from envforge.probe.spec import ProbeSpec

__all__ = [
    "AMD_DEVICE_ID",
    "NVIDIA_MAJOR",
    "NVIDIA_MINOR",
    "RESOURCE",
    "check_backend",
    "dns_name",
    "files",
    "job",
    "manifests",
    "queued",
    "selector",
    "submit_plan",
    "task_spec",
]


# --------------------------------------------------------------------------- the engine


def check_backend(backend: str, *, images: bool) -> None:
    """The pod is the image under test: a backend that makes no image is refused."""
    if not images:
        raise InvalidInput(
            f"--engine k8s runs images: --backend {backend} is for Slurm and GitHub runners",
            hint="--backend docker",
        )


def task_spec(plan: Plan, task: Task) -> ProbeSpec:
    """The probe spec of a task: its recipe's, at the plan's level, with the collective
    step where the plan asks it of the task (:meth:`Plan.task_checks`), without the audit
    and the health step (they run on the host, with envforge: a pod has neither)."""
    from envforge.recipe.catalogue import Catalogue  # noqa: PLC0415 - the recipes, when used

    recipe = Catalogue.default().load(task.ref)
    level = plan.level if plan.level in ("quick", "full") else None
    spec = ProbeSpec.from_recipe(recipe, level=level)  # type: ignore[arg-type]
    checks = plan.task_checks(task)
    return dataclasses.replace(
        spec, audit=False, collective=checks is not None and checks.collective
    )


def pod_script() -> str:
    """``pod.py``: the pod wrapper (``templates/fleet/k8s-pod.py``)."""
    return (templates_dir() / "fleet" / "k8s-pod.py").read_text(encoding="utf-8")


def files(plan: Plan, folder: Path) -> dict[str, str]:
    """``jobs.yaml``: the ConfigMaps and the Jobs, one YAML document each."""
    from envforge.probe.runner import worker_source  # noqa: PLC0415 - the runner, when used

    table = load_table()
    specs: dict[int, str] = {}
    made: dict[tuple[str, bool], str] = {}
    seen: set[tuple[str, str, str]] = set()
    for task in plan.tasks:  # one spec per Job (recipe, arch, node): its first task's
        if (task.recipe, task.arch, task.node) not in seen:
            seen.add((task.recipe, task.arch, task.node))
            checks = plan.task_checks(task)
            key = (task.ref, checks is not None and checks.collective)
            if key not in made:  # a recipe is read once per collective choice
                made[key] = task_spec(plan, task).worker_json()
            specs[task.index] = made[key]

    def pci_ids(arch: str) -> list[int]:
        return [p.device_id for p in table.amd_pci_ids if p.arch == arch]

    docs = manifests(plan, worker_source(), specs, pci_ids, pod_script())
    return {"jobs.yaml": "".join("---\n" + yaml_text(d) for d in docs)}


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Not from here: ``kubectl`` is the site's own."""
    raise Unavailable(
        "no Kubernetes cluster is reached from envforge itself",
        hint=f"kubectl apply -f {folder / 'jobs.yaml'}; when the Jobs are done, "
        f"kubectl logs -n {plan.site.namespace} -l envforge.io/plan={plan.id} "
        f"--tail=-1 --max-log-requests=50 > {folder}/pods.log (or one file per pod in a "
        f"folder), then envforge fleet collect {folder} --from-logs {folder}/pods.log",
    )


def queued(plan: Plan, folder: Path) -> dict[int, JobState]:
    """No queue is read: a task without a report counts as missing."""
    return {}
