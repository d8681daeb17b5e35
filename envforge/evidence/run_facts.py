"""What a probe report says about its run, as :mod:`envforge.evidence.records` keeps it:
the runtime and stack it saw, the GPU it ran on, and the key that identifies the run."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envforge.host.detect import nvidia_arch_for_product
from envforge.probe.report import ProbeReport

if TYPE_CHECKING:
    from envforge.knowledge.table import CompatTable


@dataclass(frozen=True)
class Gpu:
    """The GPU a report ran on: ``vendor`` amd/nvidia/none, ``arch`` (``cpu`` for none,
    ``unknown`` when the report does not say), the product name (empty for none)."""

    vendor: str
    arch: str
    product: str

    @property
    def row_key(self) -> str:
        return f"{self.vendor}:{self.arch}"


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def runtime_of(snapshot: Mapping[str, Any]) -> tuple[str, str]:
    """(``ROCm 5.2`` / ``CUDA 12.8`` / ``cpu`` / ``""``, the stack's variant part)."""
    hip, cuda = _str(snapshot.get("hip")), _str(snapshot.get("cuda"))
    if hip:
        return f"HIP {hip}", "rocm" + major_minor(hip)
    if cuda:
        return f"CUDA {cuda}", "cu" + major_minor(cuda).replace(".", "")
    if snapshot.get("torch"):
        return "cpu", "cpu"
    return "", ""


def stack_name(torch: str, variant: str, python: str) -> str:
    """``torch<version>-<rocmX.Y|cuNNN|cpu>-py<X.Y>`` as the Docker backend tags it."""
    if not torch:
        return ""
    parts = ["torch" + torch.split("+", 1)[0]]
    if variant:
        parts.append(variant)
    if python:
        parts.append("py" + major_minor(python))
    return "-".join(parts)


def gpu_of(report: ProbeReport, recipe: str, table: CompatTable | None = None) -> Gpu:
    """The GPU the run used: one whose arch names the recipe, else the first with an
    arch, else the first; ``Gpu("none", "cpu", "")`` when the host has none."""
    gpus = report.host.gpus
    if not gpus:
        return Gpu("none", "cpu", "")
    chosen = (
        next((g for g in gpus if g.arch and _str(g.arch) == recipe), None)
        or next((g for g in gpus if g.arch), None)
        or gpus[0]
    )
    vendor = _str(chosen.vendor).lower() or "unknown"
    product = " ".join(_str(chosen.name).split())
    arch = _str(chosen.arch)
    if not arch and vendor == "nvidia":
        arch = nvidia_arch_for_product(product, table) or ""
    return Gpu(vendor, arch or "unknown", product)


def pci_of(report: ProbeReport, gpu: Gpu) -> str:
    for g in report.host.gpus:
        if " ".join(_str(g.name).split()) == gpu.product and g.pci_id:
            return _str(g.pci_id)
    return ""


def run_key(report: ProbeReport) -> str:
    """What identifies a probe run: everything in its report but the environment snapshot
    (equal for equal runs; the JSON form's key order differs between a ``probe.json`` and
    a certificate, so the parsed values are hashed, not the text)."""
    host = report.host
    identity = (
        report.created,
        report.level,
        report.target,
        report.seconds,
        report.recipe_name,
        report.recipe_hash,
        report.envforge_version,
        host.kernel,
        host.machine,
        host.driver,
        tuple((g.name, g.arch, g.vendor) for g in host.gpus),
        tuple((s.name, s.status, s.seconds, s.detail) for s in report.steps),
    )
    return hashlib.sha256(repr(identity).encode("utf-8", "surrogatepass")).hexdigest()
