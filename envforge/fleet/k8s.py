"""Kubernetes: the plan as ``batch/v1`` Jobs, one per (recipe image x arch).

An Indexed Job has one pod template, so one image: the tasks of one (recipe, arch) pair
become one Job with ``completions`` = its node count, spread over distinct nodes
(``topologySpreadConstraints`` on ``kubernetes.io/hostname``). The pod *is* the image
under test; envforge's stdlib-only probe worker and the task's spec come from a ConfigMap
(``python3 /envforge/worker.py /envforge/spec-NNN.json``), so no Docker socket and no
envforge install is needed in the pod; its event lines go to the pod's log.

GPUs are asked for in ``limits`` only (``amd.com/gpu``/``nvidia.com/gpu``). Nodes are
chosen by the vendors' labellers: NVIDIA GPU feature discovery's
``nvidia.com/gpu.compute.major``/``.minor`` (``sm_90`` -> 9, 0); AMD's node labeller has no
gfx label, so ``amd.com/gpu.device-id`` is matched against the compatibility table's PCI
ids for the arch (``gfx942`` -> ``74a1``, ``74a0``). An arch the table has no PCI id for,
or any arch when the site names one (``--arch-label``), is selected by that site label.
Checked here against the API schema only (kubernetes-validate): no API server runs here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envforge.errors import InvalidInput, Unavailable
from envforge.fleet.base import yaml_text
from envforge.fleet.plan import CPU, Plan, Task, vendor_of
from envforge.fleet.slurm_state import JobState

NVIDIA_MAJOR = "nvidia.com/gpu.compute.major"
NVIDIA_MINOR = "nvidia.com/gpu.compute.minor"
AMD_DEVICE_ID = "amd.com/gpu.device-id"
RESOURCE = {"amd": "amd.com/gpu", "nvidia": "nvidia.com/gpu"}
_SM = re.compile(r"^sm_(\d+)(\d)$")
_DNS = re.compile(r"[^a-z0-9-]+")


def dns_name(*parts: str) -> str:
    """A DNS-1123 label (lower case, digits, dashes, at most 63 characters)."""
    text = _DNS.sub("-", "-".join(parts).lower()).strip("-")
    return text[:63].rstrip("-")


def selector(arch: str, plan: Plan, pci_ids: Callable[[str], Sequence[int]]) -> dict[str, Any]:
    """The pod spec's node selection for ``arch`` (``nodeSelector`` or ``affinity``)."""
    site_label = plan.site.arch_label
    if arch == CPU:
        return {}
    if site_label:
        return {"nodeSelector": {site_label: arch}}
    sm = _SM.match(arch)
    if sm:
        return {"nodeSelector": {NVIDIA_MAJOR: sm.group(1), NVIDIA_MINOR: sm.group(2)}}
    ids = [f"{i:04x}" for i in pci_ids(arch)]
    if not ids:
        raise InvalidInput(
            f"--arch {arch}: the compatibility table has no PCI device id for it, and AMD's "
            "node labeller has no arch label",
            hint=f"label the nodes by hand and pass --arch-label (kubectl label node N "
            f"envforge.io/gpu-arch={arch}; --arch-label envforge.io/gpu-arch)",
        )
    term = {"matchExpressions": [{"key": AMD_DEVICE_ID, "operator": "In", "values": ids}]}
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }


def _limits(task: Task) -> dict[str, str]:
    vendor = task.vendor if task.vendor != "none" else vendor_of(task.arch)
    if not task.gpus or vendor not in RESOURCE:
        return {}
    return {RESOURCE[vendor]: str(task.gpus)}


def config_map(plan: Plan, worker: str, specs: dict[int, str]) -> dict[str, Any]:
    data = {"worker.py": worker}
    data.update({f"spec-{i:03d}.json": text for i, text in specs.items()})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": dns_name("envforge-probe", plan.id), "namespace": plan.site.namespace},
        "data": data,
    }


def job(
    plan: Plan, tasks: Sequence[Task], pci_ids: Callable[[str], Sequence[int]]
) -> dict[str, Any]:
    """One Job for the tasks of one (recipe, arch) pair."""
    first = tasks[0]
    name = dns_name("envforge", plan.id, first.recipe, first.arch)
    labels = {"app.kubernetes.io/name": "envforge", "envforge.io/plan": plan.id}
    container: dict[str, Any] = {
        "name": "probe",
        "image": first.image,
        "command": ["python3", "/envforge/worker.py", f"/envforge/spec-{first.index:03d}.json"],
        "volumeMounts": [{"name": "envforge", "mountPath": "/envforge", "readOnly": True}],
    }
    limits = _limits(first)
    if limits:
        container["resources"] = {"limits": limits}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [
            {"name": "envforge", "configMap": {"name": dns_name("envforge-probe", plan.id)}}
        ],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
            }
        ],
        **selector(first.arch, plan, pci_ids),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": plan.site.namespace,
            "labels": {
                **labels,
                "envforge.io/recipe": dns_name(first.recipe),
                "envforge.io/arch": dns_name(first.arch),
            },
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": len(tasks),
            "parallelism": len(tasks),
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def manifests(
    plan: Plan, worker: str, specs: dict[int, str], pci_ids: Callable[[str], Sequence[int]]
) -> list[dict[str, Any]]:
    """The ConfigMap, then one Job per (recipe, arch) pair in plan order."""
    pairs: dict[tuple[str, str], list[Task]] = {}
    for task in plan.tasks:
        pairs.setdefault((task.recipe, task.arch), []).append(task)
    return [
        config_map(plan, worker, specs),
        *(job(plan, tasks, pci_ids) for tasks in pairs.values()),
    ]


# --------------------------------------------------------------------------- the engine


def check_backend(backend: str, *, images: bool) -> None:
    """The pod is the image under test: a backend that makes no image is refused."""
    if not images:
        raise InvalidInput(
            f"--engine k8s runs images: --backend {backend} is for Slurm and GitHub runners",
            hint="--backend docker",
        )


def files(plan: Plan, folder: Path) -> dict[str, str]:
    """``jobs.yaml``: the ConfigMap and the Jobs, one YAML document each."""
    from envforge.knowledge.compiled import load_table  # noqa: PLC0415 - only for Kubernetes
    from envforge.probe.runner import worker_source  # noqa: PLC0415 - as above
    from envforge.probe.spec import ProbeSpec  # noqa: PLC0415 - as above
    from envforge.recipe.catalogue import Catalogue  # noqa: PLC0415 - as above

    table = load_table()
    catalogue = Catalogue.default()
    specs = {}
    for task in plan.tasks:
        recipe = catalogue.load(task.ref)
        level = plan.level if plan.level in ("quick", "full") else None
        specs[task.index] = ProbeSpec.from_recipe(recipe, level=level).worker_json()  # type: ignore[arg-type]

    def pci_ids(arch: str) -> list[int]:
        return [p.device_id for p in table.amd_pci_ids if p.arch == arch]

    docs = manifests(plan, worker_source(), specs, pci_ids)
    return {"jobs.yaml": "".join("---\n" + yaml_text(d) for d in docs)}


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Not from here: ``kubectl apply`` is the site's own."""
    raise Unavailable(
        "no Kubernetes cluster is reached from envforge itself",
        hint=f"kubectl apply -f {folder / 'jobs.yaml'}, then put each pod's log "
        f"into {folder}/reports/NNN/ for `fleet collect`",
    )


def queued(plan: Plan, folder: Path) -> dict[int, JobState]:
    """No queue is read: a task without a report counts as missing."""
    return {}
