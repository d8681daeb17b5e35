"""The Kubernetes objects of a plan (:mod:`envforge.fleet.k8s` writes them as ``jobs.yaml``).

One ConfigMap holds the probe worker and the pod wrapper (``worker.py``, ``pod.py``:
``templates/fleet/k8s-pod.py``); then, per (recipe, arch) pair, a ConfigMap holding that
pair's spec and an Indexed Job whose pods mount both (a projected volume at
``/envforge``). Every object stays small whatever the plan's size (a worker of about
60 KB, one spec per Job), far below the 256 KiB ``kubectl.kubernetes.io/
last-applied-configuration`` annotation that client-side ``kubectl apply`` writes.

Pods: GPUs in ``limits``; CPU and memory requested and limited alike (``--cpu``,
``--mem``: with the GPUs, Guaranteed QoS, not the first evicted); the site's tolerations
(``--toleration``); ``activeDeadlineSeconds`` on the Job (``--time``, else the spec's
step timeouts plus :data:`PULL_SECONDS` for the image pull) and
``ttlSecondsAfterFinished`` (``--ttl``: long enough to read the logs); a restricted
``securityContext`` (non-root :data:`POD_USER`, no privilege escalation, all
capabilities dropped, the runtime's seccomp profile), with ``--pod-group`` GIDs as
supplementary groups (AMD's ``/dev/kfd`` and ``/dev/dri/renderD*`` belong to the host's
render/video groups; NVIDIA's device nodes are world read-write). The image by digest
when ``--image REPO[:TAG]@sha256:...`` names it (pulled if not present), else by tag,
pulled ``Always`` (no stale local copy is certified).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envforge.core.jsonlimits import BadJSON, loads
from envforge.fleet import values
from envforge.fleet.k8s_select import RESOURCE, dns_name, pinned, selector
from envforge.fleet.plan import Plan, Task, vendor_of

#: The user the pods run as (not root; the distroless "nonroot" id).
POD_USER = 65532
#: Seconds a Job's deadline allows for pulling its image, beyond the steps' timeouts.
PULL_SECONDS = 900
#: Bytes of a spec read for its steps.
MAX_SPEC = 4 * 1024 * 1024
#: Steps and step timeout assumed for a spec that does not say (a test's "{}").
_STEPS, _STEP_TIMEOUT = 20, 60.0


def _limits(task: Task) -> dict[str, str]:
    vendor = task.vendor if task.vendor != "none" else vendor_of(task.arch)
    if not task.gpus or vendor not in RESOURCE:
        return {}
    return {RESOURCE[vendor]: str(task.gpus)}


def image_ref(plan: Plan, task: Task) -> tuple[str, str]:
    """(image, imagePullPolicy): by digest when ``--image`` names one for the task's
    repository (and tag, when it gives one), else the tag pulled ``Always``."""
    repo, _, tag = task.image.rpartition(":")
    if "/" in tag or not repo:  # no tag
        repo, tag = task.image, ""
    for given in plan.site.digests:
        found = values.digest_ref(given)
        if found and found[0] == repo and found[1] in ("", tag):
            return f"{repo}@{found[2]}", "IfNotPresent"
    return task.image, "Always"


def deadline(plan: Plan, spec: str) -> int:
    """The Job's ``activeDeadlineSeconds``: ``--time``, else every step at its timeout
    (and the startup) plus the image pull."""
    if plan.site.deadline:
        return plan.site.deadline
    try:
        data = loads(spec, max_bytes=MAX_SPEC)
    except BadJSON:
        data = {}
    data = data if isinstance(data, Mapping) else {}
    steps = data.get("steps")
    count = len(steps) if isinstance(steps, list) and steps else _STEPS
    timeout = data.get("step_timeout")
    step = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else _STEP_TIMEOUT
    return int((count + 2) * max(step, 30.0)) + PULL_SECONDS


def _security(plan: Plan) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": POD_USER,
        "runAsGroup": POD_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if plan.site.groups:
        pod["supplementalGroups"] = list(plan.site.groups)
    return pod


def container(plan: Plan, first: Task) -> dict[str, Any]:
    image, policy = image_ref(plan, first)
    limits = {"cpu": plan.site.cpu, "memory": values.k8s_mem(plan.site.mem), **_limits(first)}
    requests = {k: v for k, v in limits.items() if k in ("cpu", "memory")}
    return {
        "name": "probe",
        "image": image,
        "imagePullPolicy": policy,
        "command": [
            "python3",
            "/envforge/pod.py",
            "/envforge/worker.py",
            f"/envforge/spec-{first.index:03d}.json",
            str(first.index),
        ],
        "env": [
            {"name": "ENVFORGE_PLAN", "value": f"{plan.id}:{plan.nonce}"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"requests": requests, "limits": limits},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "envforge", "mountPath": "/envforge", "readOnly": True}],
    }


def config_map(plan: Plan, name: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": plan.site.namespace,
            "labels": {"app.kubernetes.io/name": "envforge", "envforge.io/plan": plan.id},
        },
        "data": dict(data),
    }


def worker_map_name(plan: Plan) -> str:
    return dns_name("envforge-probe", plan.id)


def spec_map_name(plan: Plan, first: Task) -> str:
    return dns_name("envforge-spec", plan.id, f"{first.index:03d}")


def job(
    plan: Plan, tasks: Sequence[Task], pci_ids: Callable[[str], Sequence[int]], spec: str = "{}"
) -> dict[str, Any]:
    """One Job for the tasks of one (recipe, arch) pair."""
    first = tasks[0]
    name = dns_name("envforge", plan.id, f"{first.index:03d}", first.recipe, first.arch)
    labels = {"app.kubernetes.io/name": "envforge", "envforge.io/plan": plan.id}
    job_labels = {**labels, "envforge.io/job": f"{first.index:03d}"}
    sources = [
        {"configMap": {"name": worker_map_name(plan)}},
        {"configMap": {"name": spec_map_name(plan, first)}},
    ]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": _security(plan),
        "containers": [container(plan, first)],
        "volumes": [{"name": "envforge", "projected": {"sources": sources}}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": job_labels},
            }
        ],
        **pinned(selector(first.arch, plan, pci_ids), first.node),
    }
    if plan.site.tolerations:
        pod["tolerations"] = [values.toleration(t) for t in plan.site.tolerations]
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
            "activeDeadlineSeconds": deadline(plan, spec),
            "ttlSecondsAfterFinished": plan.site.ttl,
            "template": {"metadata": {"labels": job_labels}, "spec": pod},
        },
    }


def manifests(
    plan: Plan,
    worker: str,
    specs: Mapping[int, str],
    pci_ids: Callable[[str], Sequence[int]],
    pod_script: str = "",
) -> list[dict[str, Any]]:
    """The worker's ConfigMap, then per (recipe, arch, node) in plan order its spec's
    ConfigMap and its Job. ``specs``: task index -> spec JSON (a pair's first task's is
    used: every task of a pair has the same)."""
    pairs: dict[tuple[str, str, str], list[Task]] = {}
    for task in plan.tasks:  # a task pinned to a node is a Job of its own
        pairs.setdefault((task.recipe, task.arch, task.node), []).append(task)
    docs = [config_map(plan, worker_map_name(plan), {"worker.py": worker, "pod.py": pod_script})]
    for tasks in pairs.values():
        first = tasks[0]
        spec = specs.get(first.index, "{}")
        docs.append(
            config_map(plan, spec_map_name(plan, first), {f"spec-{first.index:03d}.json": spec})
        )
        docs.append(job(plan, tasks, pci_ids, spec))
    return docs
