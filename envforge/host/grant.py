"""On a node: the GPUs the scheduler granted this job, read from its environment.

Slurm sets ``SLURM_JOB_GPUS`` (and, since 22.05, ``CUDA_VISIBLE_DEVICES``,
``ROCR_VISIBLE_DEVICES`` and ``GPU_DEVICE_ORDINAL`` together, numbered by the GRES index);
a Kubernetes device plugin sets ``NVIDIA_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES``.
:func:`granted` turns the first one set into ``--gpu``'s form (``0,1``), so that a task
uses what it was given. Whether the scheduler's numbering equals ``envforge detect``'s on
a real multi-GPU node is not verified (no GPU node was available): the variables are
named in what envforge says, so a mismatch shows.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

#: The variables read, first set wins.
VARIABLES = (
    "SLURM_JOB_GPUS",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)
_INDEXES = re.compile(r"^\d+(,\d+)*$")


@dataclass(frozen=True)
class Grant:
    """What the scheduler granted: the variable it came from, the GPU indexes (``0,1``),
    the node's name and the job (``JOBID_TASK`` for an array task)."""

    variable: str
    gpus: str
    node: str = ""
    job: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"variable": self.variable, "gpus": self.gpus, "node": self.node, "job": self.job}


def _job(environ: Mapping[str, str]) -> str:
    array = environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        return f"{array}_{environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return environ.get("SLURM_JOB_ID", "")


def granted(environ: Mapping[str, str]) -> Grant | None:
    """The scheduler's grant, or None outside a job (no Slurm job id, no pod) or when no
    variable holds plain indexes (``all``, UUIDs and ``NoDevFiles`` are not used)."""
    if not in_job(environ):
        return None
    for name in VARIABLES:
        value = environ.get(name, "").replace(" ", "")
        if value and _INDEXES.match(value):
            node = environ.get("SLURMD_NODENAME") or socket.gethostname()
            return Grant(name, value, node, _job(environ))
    return None


#: The variables that number GPUs as the job's processes see them, first set wins: with
#: ``ConstrainDevices=yes`` Slurm renumbers a job's GPUs from 0 in these, while
#: :data:`NODE_VIEW` keeps the node's GRES indexes.
JOB_VIEW = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
NODE_VIEW = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def seen(environ: Mapping[str, str]) -> dict[str, str]:
    """The node and the GPUs this job sees, for ``task.json``: ``job`` numbered as the job
    sees them (:data:`JOB_VIEW`; 0..n-1 under device cgroups), ``node_indexes`` as the
    node numbers them (:data:`NODE_VIEW`), each with the variable it came from; {} outside
    a job. Only plain index lists are taken (``all``, UUIDs and ``NoDevFiles`` are not)."""
    if not in_job(environ):
        return {}
    found = {"node": environ.get("SLURMD_NODENAME") or socket.gethostname()}
    for key, names in (("job", JOB_VIEW), ("node_indexes", NODE_VIEW)):
        for name in names:
            value = environ.get(name, "").replace(" ", "")
            if value and _INDEXES.match(value):
                found[key], found[f"{key}_variable"] = value, name
                break
    return found


def in_job(environ: Mapping[str, str]) -> bool:
    """Inside a Slurm job or a Kubernetes pod."""
    return bool(environ.get("SLURM_JOB_ID")) or bool(environ.get("KUBERNETES_SERVICE_HOST"))


def node_facts(environ: Mapping[str, str]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """What a probe report records inside a job (see :class:`envforge.probe.report.ReportHost`):
    the node's name (``SLURMD_NODENAME``, else the host name) and the grant variables
    (:data:`VARIABLES`) as seen, set ones only, whatever their form (``all``, UUIDs); outside
    a job ``(None, ())``."""
    if not in_job(environ):
        return None, ()
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    seen = tuple((name, environ[name]) for name in VARIABLES if environ.get(name))
    return node, seen


#: Set by ``fleet task`` for its child: ``PLAN_ID:TASK:NONCE`` (:attr:`Plan.nonce`).
FLEET_VARIABLE = "ENVFORGE_FLEET_TASK"
_FLEET = re.compile(r"^([0-9a-f]{10}):([0-9]{1,4}):([0-9a-f]{32})$")


def fleet_facts(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What a probe report records of the fleet task it ran for (``plan``, ``task``,
    ``nonce``), from :data:`FLEET_VARIABLE`; ``()`` when unset or malformed."""
    found = _FLEET.match(environ.get(FLEET_VARIABLE, ""))
    if found is None:
        return ()
    return (("plan", found.group(1)), ("task", str(int(found.group(2)))), ("nonce", found.group(3)))
