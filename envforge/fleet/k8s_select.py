"""Kubernetes node selection for an arch, and object names (:mod:`envforge.fleet.k8s`).

Nodes are chosen by the vendors' labellers: NVIDIA GPU feature discovery's
``nvidia.com/gpu.compute.major``/``.minor`` (``sm_90`` -> 9, 0); AMD's node labeller has no
gfx label, so ``amd.com/gpu.device-id`` is matched against the compatibility table's PCI
ids for the arch (``gfx942`` -> ``74a1``, ``74a0``). An arch the table has no PCI id for,
or any arch when the site names one (``--arch-label``), is selected by that site label.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from envforge.errors import InvalidInput
from envforge.fleet.plan import CPU, Plan

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


#: The node's own name, as node affinity's ``matchFields`` reads it. The
#: ``kubernetes.io/hostname`` label is not always the node's name (some clouds set it to
#: the VM's host name), and the names come from ``kubectl get nodes`` or ``--node``.
NODE_NAME = "metadata.name"


def pinned(selection: dict[str, Any], node: str) -> dict[str, Any]:
    """``selection`` (from :func:`selector`) narrowed to one node by required node
    affinity on the node's name (a ``matchFields`` term on :data:`NODE_NAME`, added to each
    of its terms); as is for no node."""
    if not node:
        return selection
    name = {"key": NODE_NAME, "operator": "In", "values": [node]}
    required = (
        selection.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    terms = [{**t, "matchFields": [name]} for t in required.get("nodeSelectorTerms", [])] or [
        {"matchFields": [name]}
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    return {**selection, "affinity": affinity}
