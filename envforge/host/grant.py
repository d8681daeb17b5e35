"""On a node: the GPUs the scheduler granted this job, read from its environment.

A job's GPUs have two numberings, and which one a consumer needs depends on where the
process that uses them lives:

- **The node's** (:data:`NODE_VIEW`): Slurm's GRES indexes in ``SLURM_STEP_GPUS`` and
  ``SLURM_JOB_GPUS``. Slurm orders GPUs by PCI bus id, as NVML (``nvidia-smi``) does, so
  these are the indexes the NVIDIA container toolkit's ``--gpus device=N`` and
  ``nvidia-ctk``'s CDI names (``nvidia.com/gpu=N``) take, and ``envforge detect``'s where
  it lists every GPU of the node (``/proc/driver/nvidia/gpus``, the KFD topology: neither
  is narrowed by a device cgroup). A container that a daemon starts (Docker, rootful
  Podman) is created outside the job's cgroup and needs this numbering.
- **The job's** (:data:`JOB_VIEW`): ``CUDA_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES`` as
  Slurm set them. With ``TaskPlugin=task/cgroup`` and ``ConstrainDevices=yes`` the job
  can open only its own device files, CUDA and ROCr enumerate only those, and Slurm
  numbers them from 0 (a job given ``/dev/nvidia1`` gets ``CUDA_VISIBLE_DEVICES=0`` while
  its Prolog sees ``1``); without it they equal the GRES indexes. Both lists follow the
  GRES index order, so they pair up position by position. A process of this job (the
  venv backend, ``probe``) needs this numbering: re-exporting ``2,3`` from
  ``SLURM_JOB_GPUS`` into ``CUDA_VISIBLE_DEVICES`` in a constrained job leaves CUDA no
  device. Sources: https://slurm.schedmd.com/gres.html#GPU_Management (the Prolog
  example, NVML's PCI bus order), https://slurm.schedmd.com/cgroup.conf.html
  (ConstrainDevices), Slurm's ``gres_use_local_device_index()`` in ``src/common/gres.c``
  and ``common_gres_set_env()`` in ``src/plugins/gres/common/gres_common.c`` (local
  indexes only with task/cgroup and ConstrainDevices; the local list is the device's
  UniqueId, e.g. a UUID, where gres.conf sets one). ROCr skips KFD nodes whose render
  node the cgroup denies (libhsakmt's ``topology_sysfs_check_node_supported``).
- **A Kubernetes pod** (:data:`POD_VARIABLE`): NVIDIA's device plugin lists the granted
  GPUs in ``NVIDIA_VISIBLE_DEVICES`` (node indexes, or UUIDs with
  ``deviceIDStrategy=uuid``); the container toolkit injects only those and masks
  ``/proc/driver/nvidia/gpus`` down to them (libnvidia-container's ``mount_procfs_gpu``),
  so inside the pod they are numbered from 0. Values: ``0,1``, ``GPU-…`` UUIDs, ``all``,
  ``none``, ``void`` (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/
  latest/docker-specialized.html); a path (the plugin's ``volume-mounts`` strategy) names
  no GPU.

:class:`Grant` keeps both numberings; :meth:`Grant.in_detected` says which one
``envforge detect``'s list follows, and :meth:`Grant.translate` turns a selection into the
node's numbers (for a daemon's container) and the job's (for this job's processes).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The node's numbering: a step's own GPUs first, then the job's.
NODE_VIEW = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
#: The job's numbering, as its processes see the GPUs (0..n-1 under device cgroups).
JOB_VIEW = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
#: Kubernetes: the GPUs NVIDIA's device plugin granted the pod (node indexes or UUIDs).
POD_VARIABLE = "NVIDIA_VISIBLE_DEVICES"
#: The variables a probe report records inside a job (:func:`node_facts`), in this order.
VARIABLES = (
    "SLURM_STEP_GPUS",
    "SLURM_JOB_GPUS",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    POD_VARIABLE,
)
_INDEXES = re.compile(r"^\d+(,\d+)*$")
#: What CUDA and ROCr accept in their visible-devices lists: indexes and (MIG) UUIDs.
_TOKENS = re.compile(r"^[0-9A-Za-z][0-9A-Za-z/_.:-]{0,99}(,[0-9A-Za-z][0-9A-Za-z/_.:-]{0,99})*$")
_NOT_DEVICES = ("all", "none", "void", "NoDevFiles")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(",")) if _INDEXES.match(text) else ()


def _value(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").replace(" ", "")


@dataclass(frozen=True)
class Grant:
    """What the scheduler granted: ``gpus`` as the node numbers them (Slurm's GRES
    indexes; where no variable gives the node's numbering, the job's) and the variable
    they came from, the node's name, the job (``JOBID_TASK`` for an array task), and
    ``visible``: the same GPUs, position by position, as this job's processes number them
    (``0,1`` under ``ConstrainDevices``; UUIDs where gres.conf sets them), with its
    variable. Reports written before ``visible`` existed have only the first four."""

    variable: str
    gpus: str
    node: str = ""
    job: str = ""
    visible: str = ""
    visible_variable: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "variable": self.variable,
            "gpus": self.gpus,
            "node": self.node,
            "job": self.job,
            "visible": self.visible,
            "visible_variable": self.visible_variable,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grant | None:
        """A grant as ``task.json`` recorded it (old records lack ``visible``); None
        when it is not one (its string fields only, each cut to 200 characters)."""
        fields = {k: data.get(k, "") for k in cls.__dataclass_fields__}
        if not all(isinstance(v, str) for v in fields.values()) or not fields["gpus"]:
            return None
        return cls(**{k: str(v)[:200] for k, v in fields.items()})

    @property
    def renumbered(self) -> bool:
        """The job numbers its GPUs otherwise than the node (device cgroups, a pod)."""
        return bool(self.visible) and self.visible != self.gpus

    def describe(self) -> str:
        """``SLURM_JOB_GPUS=2,3 (this job's 0,1: CUDA_VISIBLE_DEVICES) on n4``."""
        pod = self.visible_variable == POD_VARIABLE
        if pod and self.variable == POD_VARIABLE and not self.renumbered:
            text = f"the pod's GPU {self.gpus} ({POD_VARIABLE})"
        elif self.renumbered:
            whose = "this container's" if pod else "this job's"
            named = "" if pod else f": {self.visible_variable}"
            text = f"{self.variable}={self.gpus} ({whose} {self.visible}{named})"
        else:
            text = f"{self.variable}={self.gpus}"
        return f"{text} on {self.node or 'this node'}"

    def in_detected(self, count: int) -> tuple[int, ...] | None:
        """The granted GPUs in the numbering of a list of ``count`` GPUs (``envforge
        detect``'s, of the grant's vendor): the node's numbers when they fit (detect read
        every GPU of the node), else the job's (detect saw only the job's GPUs: a pod, or
        ``nvidia-smi`` alone in a device cgroup), else 0..n-1 when detect lists exactly the
        n granted GPUs (the job names them by UUID); None when neither fits."""
        for numbers in (_ints(self.gpus), _ints(self.visible)):
            if numbers and max(numbers) < count:
                return numbers
        granted_count = len(self.gpus.split(","))
        return tuple(range(count)) if granted_count == count else None

    def translate(
        self, ordinals: Sequence[int], count: int
    ) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
        """GPUs chosen in detect's numbering (``ordinals`` among ``count`` GPUs of a
        vendor) as (the node's numbers, for a container a daemon starts; this job's
        names for them, for its own processes: () when the job's numbering is not
        known). None when one of them is not granted (or the grant does not fit)."""
        detected = self.in_detected(count)
        if detected is None or any(o not in detected for o in ordinals):
            return None
        places = [detected.index(o) for o in ordinals]
        node, job = _ints(self.gpus), self.visible.split(",") if self.visible else []
        node_numbers = (
            tuple(node[p] for p in places) if len(node) == len(detected) else tuple(ordinals)
        )
        job_names = tuple(job[p] for p in places) if len(job) == len(detected) else ()
        return node_numbers, job_names


def _job(environ: Mapping[str, str]) -> str:
    array = environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        return f"{array}_{environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return environ.get("SLURM_JOB_ID", "")


def _first(environ: Mapping[str, str], names: Sequence[str], pattern: re.Pattern[str]) -> str:
    for name in names:
        value = _value(environ, name)
        if value and value not in _NOT_DEVICES and pattern.match(value):
            return name
    return ""


def granted(environ: Mapping[str, str]) -> Grant | None:
    """The scheduler's grant (both numberings, module docstring), or None outside a job
    (no Slurm job id, no pod) or when no variable lists the GPUs (``all``, ``none``,
    ``NoDevFiles`` and a device plugin's mount path list none)."""
    if not in_job(environ):
        return None
    node_name = _first(environ, NODE_VIEW, _INDEXES)
    job_name = _first(environ, JOB_VIEW, _TOKENS)
    visible = _value(environ, job_name) if job_name else ""
    pod = _value(environ, POD_VARIABLE)
    if not node_name and pod not in _NOT_DEVICES and _TOKENS.match(pod) and "/" not in pod:
        # The pod's GPUs as the node numbers them, or UUIDs; the container counts from 0.
        if _INDEXES.match(pod):
            node_name = POD_VARIABLE
        if not job_name:
            job_name = POD_VARIABLE
            visible = ",".join(str(n) for n in range(len(pod.split(","))))
    gpus = _value(environ, node_name) if node_name else ""
    if not gpus and _INDEXES.match(visible):
        node_name, gpus = job_name, visible
    if not gpus:
        return None
    if visible and len(visible.split(",")) != len(gpus.split(",")):
        visible, job_name = "", ""  # not the same GPUs: the job's numbering is not known
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    return Grant(node_name, gpus, node, _job(environ), visible, job_name)


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
