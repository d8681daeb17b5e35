"""Preflight: envforge's quick probe on a node before a job lands on it, and what to do
when it fails (``envforge fleet preflight --engine slurm|kubernetes``).

Slurm: ``envforge-preflight.sh`` (``templates/fleet/preflight.sh.j2``), set as the
site's ``Prolog`` and ``Epilog``. It runs ``envforge fleet node-check``: the recipe's
quick probe of the job's environment (``--python``) on the GPUs Slurm granted the job
(``SLURM_JOB_GPUS``), with the ``health`` step, under an overall limit. On a failure it
drains the node with envforge's reason, ``envforge: STEP: one line`` (:func:`drain_reason`),
and a prolog exits 1 so that Slurm requeues the job elsewhere: slurmctld writes its own
"Prolog error" only on a node that is not drained already (``validate_node_specs`` in
``src/slurmctld/node_mgr.c``), so envforge's reason stays. envforge failing to run at all
(not installed on the node, a bad option: exit 2, 3, 127) drains nothing: that is the
site's setup, not the node's hardware.

Kubernetes: ``preflight.yaml``, a ConfigMap (the stdlib-only worker, the pod wrapper,
``preflight.py`` from ``templates/fleet/k8s-preflight.py`` and the quick spec) and an
example Job whose pod starts with the ``envforge-preflight`` init container, run in the
job's own image. On a failure the init container exits 1 with the reason as its
termination message (``kubectl describe pod``), so the job's containers never start; it
prints the ``kubectl taint`` command that keeps other pods off the node (a pod cannot
taint its node without RBAC the site would have to grant).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from envforge.fleet.base import yaml_text
from envforge.fleet.k8s_manifests import POD_USER
from envforge.fleet.k8s_select import dns_name
from envforge.probe.report import ProbeReport, printable
from envforge.probe.spec import ProbeSpec
from envforge.render.templates import render_template

#: Characters of a drain reason (Slurm keeps more; a reason is read in ``sinfo -R``).
REASON_MAX = 200
#: The taint a failed preflight asks for (the kubectl command the init container prints).
TAINT = "envforge.io/preflight=failed:NoSchedule"
SCRIPT = "envforge-preflight.sh"
MANIFEST = "preflight.yaml"
#: Seconds the whole node check may take beyond its steps' deadlines (interpreter start,
#: the health tools), for the script's ``timeout`` backstop.
SLACK = 60


def drain_reason(report: ProbeReport) -> str | None:
    """``envforge: STEP: one line`` for a report that did not pass; None for one that did."""
    if report.passed:
        return None
    problem = report.first_problem or next((s for s in report.steps if s.status != "pass"), None)
    step, detail = (problem.name, problem.detail) if problem else ("probe", "no steps ran")
    if problem is not None and problem.status not in ("fail", "pass", "warn"):
        detail = f"{problem.status}: {detail}"
    text = printable(" ".join(f"envforge: {step}: {detail}".split())).replace('"', "'")
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


@dataclass(frozen=True)
class Preflight:
    """What the preflight files run: the recipe, the environment's interpreter, envforge."""

    recipe: str
    #: The job environment's Python on the nodes (Slurm); None: the one running envforge.
    python: str | None
    #: How the nodes run envforge (``/path/python3 -m envforge``).
    envforge: tuple[str, ...]
    reports: str = "/var/log/envforge-preflight"
    step_timeout: float = 60.0
    require_healthy: bool = False
    #: Add the all-reduce across the job's GPUs (``--collective``).
    collective: bool = False
    #: Kubernetes: the job's image (the environment under test).
    image: str = ""
    namespace: str = "default"
    gpus: int = 1
    gpu_resource: str = "nvidia.com/gpu"


def node_check_argv(pre: Preflight) -> list[str]:
    """The node check the Slurm script runs (``envforge fleet node-check ...``)."""
    argv = [*pre.envforge, "fleet", "node-check", "--recipe", pre.recipe]
    argv += ["--step-timeout", f"{pre.step_timeout:g}"]
    if pre.python:
        argv += ["--python", pre.python]
    if pre.require_healthy:
        argv.append("--require-healthy")
    if pre.collective:
        argv.append("--collective")
    return argv


def limit_seconds(spec: ProbeSpec) -> int:
    """The script's overall backstop: every step at its deadline, the startup, the slack."""
    return int(len(spec.steps) * spec.step_timeout + spec.startup_deadline) + SLACK


def slurm_files(pre: Preflight, spec: ProbeSpec, limit: int | None = None) -> dict[str, str]:
    """``envforge-preflight.sh``; ``limit``: the overall seconds (default :func:`limit_seconds`)."""
    script = render_template(
        "fleet/preflight.sh.j2",
        recipe=pre.recipe,
        check=shlex.join(node_check_argv(pre)),
        reports=shlex.quote(pre.reports),
        limit=limit if limit is not None else limit_seconds(spec),
    )
    return {SCRIPT: script}


def preflight_spec(spec: ProbeSpec, collective: bool = False) -> ProbeSpec:
    """The recipe's probe at level quick, without the audit (it reads the environment's
    files, not the node's health: ``envforge certify`` runs it); ``collective``: with
    the all-reduce across the GPUs."""
    return replace(spec, level="quick", audit=False, collective=collective)


def k8s_files(
    pre: Preflight, spec: ProbeSpec, worker: str, pod: str, script: str
) -> dict[str, str]:
    """``preflight.yaml``: the ConfigMap and an example Job with the init container."""
    name = dns_name("envforge-preflight", pre.recipe)
    labels = {"app.kubernetes.io/name": "envforge", "envforge.io/preflight": dns_name(pre.recipe)}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": pre.namespace, "labels": labels},
        "data": {
            "worker.py": worker,
            "pod.py": pod,
            "preflight.py": script,
            "spec.json": json.dumps(spec.worker_dict(), sort_keys=True),
        },
    }
    gpus = {pre.gpu_resource: str(pre.gpus)} if pre.gpus else {}
    init = {
        "name": "envforge-preflight",
        "image": pre.image,
        "command": [
            "python3",
            "/envforge/preflight.py",
            "/envforge/worker.py",
            "/envforge/spec.json",
        ],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "ENVFORGE_TAINT", "value": TAINT},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"limits": dict(gpus)} if gpus else {},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": "envforge-preflight", "mountPath": "/envforge", "readOnly": True}
        ],
    }
    job_box = {
        "name": "job",
        "image": pre.image,
        "command": ["python3", "-c", "print('envforge preflight passed: the job runs here')"],
        "resources": {"limits": dict(gpus)} if gpus else {},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    template: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": POD_USER,
            "runAsGroup": POD_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [init],
        "containers": [job_box],
        "volumes": [{"name": "envforge-preflight", "configMap": {"name": name}}],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": dns_name(name, "example"),
            "namespace": pre.namespace,
            "labels": labels,
        },
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": template}},
    }
    return {MANIFEST: "".join("---\n" + yaml_text(d) for d in (config, job))}


def taint_command(node: str) -> Sequence[str]:
    """What an admin runs to keep pods off a node whose preflight failed."""
    return ("kubectl", "taint", "nodes", node, TAINT, "--overwrite")
