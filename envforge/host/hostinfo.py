"""What host detection finds, as frozen values: :class:`GpuInfo` per GPU and the
:class:`HostInfo` of the machine (:func:`envforge.host.detect.detect` computes them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from envforge.knowledge.platforms import platform_of
from envforge.knowledge.table import CompatTable

GpuVendor = Literal["amd", "nvidia"]

AMD_PCI_VENDOR = 0x1002
NVIDIA_PCI_VENDOR = 0x10DE
INTEL_PCI_VENDOR = 0x8086

#: The most GPUs ``ENVFORGE_GPU_COUNT`` may assume (the largest hosts have 16).
MAX_GPU_COUNT = 256
#: The largest device minor number used in a device path (Linux minors are 20 bits).
MAX_DEVICE_MINOR = (1 << 20) - 1

#: Seconds each detection tool may run before its whole process group is stopped.
TOOL_TIMEOUT = 10.0

#: Override variables (documented in docs/venv-and-host.md).
OVERRIDE_VARS: dict[str, str] = {
    "ENVFORGE_GPU_ARCH": "arch to assume, e.g. gfx1031 or sm_90 (replaces detection)",
    "ENVFORGE_GPU_VENDOR": "amd, nvidia or none (default: inferred from the arch; none = no GPU)",
    "ENVFORGE_GPU_COUNT": "how many such GPUs to assume (default 1)",
    "ENVFORGE_GPU_PRODUCT": "product name to report (default: derived from the arch)",
    "ENVFORGE_DRIVER_VERSION": "driver version to assume (also applies to detected GPUs)",
}

#: Product and PCI-id tables live in the compatibility table (``amd_pci_ids``,
#: ``nvidia_model_names`` in envforge/data/compat.yaml); :func:`detect` takes a
#: :class:`CompatTable` or loads the shipped one when it needs a lookup.
TableSource = Callable[[], CompatTable]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the host sees it."""

    vendor: GpuVendor
    product: str
    #: ``gfx1031``, ``sm_90``; None when no source could tell.
    arch: str | None
    driver_version: str | None
    #: Device nodes a process needs to use this GPU (``/dev/kfd``, ``/dev/dri/renderD128``).
    device_nodes: tuple[str, ...]
    #: Where the arch came from: ``sysfs``, ``rocminfo``, ``nvidia-smi``, ``override``…
    source: str
    pci_id: str | None = None
    index: int = 0
    #: The arch was inferred from a product name or PCI id table, not stated by the
    #: driver, sysfs or a tool (not part of ``to_dict``).
    arch_guessed: bool = False
    #: APU graphics (an iGPU), per the table's ``amd_archs``: a discrete GPU beside it
    #: is the one ``auto`` chooses for.
    integrated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "vendor": self.vendor,
            "product": self.product,
            "arch": self.arch,
            "driver_version": self.driver_version,
            "device_nodes": list(self.device_nodes),
            "pci_id": self.pci_id,
            "source": self.source,
            "integrated": self.integrated,
        }


@dataclass(frozen=True)
class HostInfo:
    """What :func:`detect` found: the GPUs, plus notes on what it could not tell."""

    gpus: tuple[GpuInfo, ...]
    kernel: str
    machine: str
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def platform(self) -> str:
        """The host's wheel/image platform (``linux/amd64``, ``linux/arm64``)."""
        return platform_of(self.machine)

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def archs(self) -> tuple[str, ...]:
        """Distinct archs in device order."""
        seen: list[str] = []
        for gpu in self.gpus:
            if gpu.arch and gpu.arch not in seen:
                seen.append(gpu.arch)
        return tuple(seen)

    @property
    def primary(self) -> GpuInfo | None:
        """The GPU a recipe is chosen for: the first discrete one with a known arch, else
        the first with a known arch (an iGPU beside a discrete GPU is passed over:
        pytorch/pytorch#119637)."""
        known = [g for g in self.gpus if g.arch]
        for gpu in known:
            if not gpu.integrated:
                return gpu
        if known:
            return known[0]
        return self.gpus[0] if self.gpus else None

    @property
    def passed_over(self) -> tuple[GpuInfo, ...]:
        """Integrated GPUs with a known arch that :attr:`primary` was chosen over."""
        chosen = self.primary
        if chosen is None or chosen.integrated:
            return ()
        return tuple(g for g in self.gpus if g.arch and g.integrated)

    def by_arch(self) -> tuple[tuple[str, tuple[GpuInfo, ...]], ...]:
        """(arch, its GPUs) for each distinct known arch, in device order."""
        return tuple((arch, tuple(g for g in self.gpus if g.arch == arch)) for arch in self.archs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "gpus": [g.to_dict() for g in self.gpus],
            "archs": list(self.archs),
            "kernel": self.kernel,
            "machine": self.machine,
            "platform": self.platform,
            "sources": list(self.sources),
            "notes": list(self.notes),
        }


#: Runs a tool: argv → stdout, or None when it is missing, fails or times out.
ToolRunner = Callable[[Sequence[str]], "str | None"]
