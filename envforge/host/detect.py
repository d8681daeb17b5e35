"""Host detection: which GPUs this machine has, their arch, driver and device nodes.

Sources, most reliable first (the first that knows a fact wins):

1. **sysfs / procfs** under ``root`` (a parameter, ``/`` on a real host, a fixture tree in
   tests): ``sys/class/kfd/kfd/topology/nodes/*/properties`` (AMD: ``gfx_target_version``,
   ``vendor_id``, ``device_id``, ``drm_render_minor``; ``simd_count > 0`` marks a GPU node),
   ``sys/module/amdgpu/version``, ``sys/class/drm/card*/device/{vendor,device}``,
   ``proc/driver/nvidia/version`` and ``proc/driver/nvidia/gpus/*/information``.
2. **tools**, when present on ``PATH``: ``rocminfo``, ``rocm_agent_enumerator`` and
   ``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``, each
   run through :func:`envforge.core.proc.run` under a short deadline (a hung driver must not hang
   ``envforge detect``). They fill in what sysfs cannot say (NVIDIA compute capability,
   marketing names) or stand in when sysfs is not mounted.
3. **override variables**, for build machines without the GPU (see :data:`OVERRIDE_VARS`).
   When ``ENVFORGE_GPU_ARCH`` or ``ENVFORGE_GPU_VENDOR`` is set it *replaces* what was
   detected (an explicit request beats a guess; the detected GPUs are kept in ``notes``).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from envforge.core import proc
from envforge.host.detect_parse import (
    RocmAgent,
    SmiRow,
    nvidia_arch_for_product,
    overridden,
    parse_kfd_properties,
    parse_nvidia_information,
    parse_nvidia_smi_csv,
    parse_nvidia_version,
    parse_rocm_agent_enumerator,
    parse_rocminfo,
    printable,
)
from envforge.host.hostfs import host_int, numeric_name, read_host_text
from envforge.host.hostinfo import (
    AMD_PCI_VENDOR,
    INTEL_PCI_VENDOR,
    MAX_DEVICE_MINOR,
    MAX_GPU_COUNT,
    NVIDIA_PCI_VENDOR,
    OVERRIDE_VARS,
    TOOL_TIMEOUT,
    GpuInfo,
    GpuVendor,
    HostInfo,
    TableSource,
    ToolRunner,
)
from envforge.knowledge.arch import (
    gfx_from_target_version,
    parse_gfx,
)
from envforge.knowledge.compiled import load_table
from envforge.knowledge.table import CompatTable

__all__ = [
    "AMD_PCI_VENDOR",
    "INTEL_PCI_VENDOR",
    "MAX_DEVICE_MINOR",
    "MAX_GPU_COUNT",
    "NVIDIA_PCI_VENDOR",
    "OVERRIDE_VARS",
    "TOOL_TIMEOUT",
    "GpuInfo",
    "GpuVendor",
    "HostInfo",
    "RocmAgent",
    "SmiRow",
    "TableSource",
    "ToolRunner",
    "detect",
    "no_tools",
    "nvidia_arch_for_product",
    "parse_kfd_properties",
    "parse_nvidia_information",
    "parse_nvidia_smi_csv",
    "parse_nvidia_version",
    "parse_rocm_agent_enumerator",
    "parse_rocminfo",
    "system_tools",
]


def system_tools(environ: Mapping[str, str] | None = None) -> ToolRunner:
    """A :data:`ToolRunner` for the real host: looks tools up on ``PATH``, runs them timed."""
    env = dict(os.environ if environ is None else environ)

    def run_tool(argv: Sequence[str]) -> str | None:
        exe = shutil.which(argv[0], path=env.get("PATH"))
        if exe is None:
            return None
        try:
            done = proc.run([exe, *argv[1:]], timeout=TOOL_TIMEOUT, env=env)
        except OSError:
            return None
        return done.stdout if done.ok else None

    return run_tool


def no_tools(argv: Sequence[str]) -> str | None:
    """A :data:`ToolRunner` for fixture trees: no tool is present."""
    return None


# --------------------------------------------------------------------------- parsers


# --------------------------------------------------------------------------- sources


_read = read_host_text


def _read_hex(path: Path) -> int | None:
    """A PCI id file (``0x1002``): 16 bits, else None."""
    text = _read(path)
    return None if text is None else host_int(text, base=16, maximum=0xFFFF)


def _numeric_dirs(folder: Path) -> list[Path]:
    try:
        entries = [(n, p) for p in folder.iterdir() if (n := numeric_name(p.name)) is not None]
    except OSError:
        return []
    return [p for _n, p in sorted(entries)]


def _amd_driver(root: Path, kernel: str) -> str | None:
    version = _read(root / "sys/module/amdgpu/version")
    if version and version.strip():
        return version.strip()
    if (root / "sys/module/amdgpu").is_dir():
        # The in-kernel driver has no version file: its version is the kernel's.
        return f"in-kernel ({kernel})" if kernel else "in-kernel"
    return None


def _amd_from_kfd(root: Path, kernel: str, table: TableSource) -> list[GpuInfo]:
    nodes_dir = root / "sys/class/kfd/kfd/topology/nodes"
    driver = _amd_driver(root, kernel)
    gpus: list[GpuInfo] = []
    for node in _numeric_dirs(nodes_dir):
        text = _read(node / "properties")
        if text is None:
            continue
        props = parse_kfd_properties(text)
        if props.get("simd_count", 0) <= 0:
            continue
        arch = gfx_from_target_version(props.get("gfx_target_version", 0))
        device_id = props.get("device_id")
        if device_id is not None and not 0 <= device_id <= 0xFFFF:
            device_id = None
        known = table().amd_pci_product(device_id) if device_id else None
        product = (
            known.product if known else (f"AMD GPU 0x{device_id:04x}" if device_id else "AMD GPU")
        )
        nodes = ["/dev/kfd"]
        minor = props.get("drm_render_minor")
        if minor and 0 < minor <= MAX_DEVICE_MINOR:
            nodes.append(f"/dev/dri/renderD{minor}")
        gpus.append(
            GpuInfo(
                vendor="amd",
                product=product,
                arch=arch or (known.arch if known else None),
                driver_version=driver,
                device_nodes=tuple(nodes),
                source="sysfs:kfd",
                pci_id=f"1002:{device_id:04x}" if device_id else None,
                index=len(gpus),
                arch_guessed=arch is None and known is not None,
            )
        )
    return gpus


@dataclass(frozen=True)
class DrmCard:
    """A DRM card with a PCI device (``sys/class/drm/cardN``)."""

    name: str
    vendor: int
    device: int | None
    #: ``/dev/dri/renderD128``, when the card has a render node.
    render: str | None
    #: ``device/product_name`` (amdgpu writes the marketing name there on some cards).
    product_name: str | None


def _drm_cards(root: Path) -> list[DrmCard]:
    """Each DRM card with a PCI vendor, in card order."""
    out: list[DrmCard] = []
    drm = root / "sys/class/drm"
    try:
        cards = sorted(
            (p for p in drm.iterdir() if re.fullmatch(r"card[0-9]{1,6}", p.name, re.ASCII)),
            key=lambda p: int(p.name[4:]),
        )
    except OSError:
        return out
    for card in cards:
        vendor = _read_hex(card / "device/vendor")
        if vendor is None:
            continue
        render: str | None = None
        try:
            renders = sorted(
                p.name for p in (card / "device/drm").iterdir() if p.name.startswith("renderD")
            )
        except OSError:
            renders = []
        if renders:
            render = f"/dev/dri/{renders[0]}"
        product = (_read(card / "device/product_name") or "").strip() or None
        out.append(DrmCard(card.name, vendor, _read_hex(card / "device/device"), render, product))
    return out


def _amd_from_drm(root: Path, kernel: str, table: TableSource) -> list[GpuInfo]:
    """AMD cards DRM knows about when KFD does not (no compute driver loaded)."""
    driver = _amd_driver(root, kernel)
    gpus: list[GpuInfo] = []
    for card in _drm_cards(root):
        if card.vendor != AMD_PCI_VENDOR or card.device is None:
            continue
        known = table().amd_pci_product(card.device)
        gpus.append(
            GpuInfo(
                vendor="amd",
                product=(known.product if known else None)
                or card.product_name
                or f"AMD GPU 0x{card.device:04x}",
                arch=known.arch if known else None,
                driver_version=driver,
                device_nodes=("/dev/kfd", *((card.render,) if card.render else ())),
                source="sysfs:drm",
                pci_id=f"1002:{card.device:04x}",
                index=len(gpus),
                arch_guessed=known is not None,
            )
        )
    return gpus


def _named_by_drm(gpus: list[GpuInfo], root: Path) -> list[GpuInfo]:
    """KFD GPUs without a product name take DRM's ``product_name`` (by render node, else
    in card order)."""
    cards = [c for c in _drm_cards(root) if c.vendor == AMD_PCI_VENDOR]
    by_render = {c.render: c for c in cards if c.render}
    out: list[GpuInfo] = []
    for i, gpu in enumerate(gpus):
        if not gpu.product.startswith("AMD GPU"):
            out.append(gpu)
            continue
        render = next((n for n in gpu.device_nodes if n.startswith("/dev/dri/")), None)
        card = by_render.get(render) if render else (cards[i] if i < len(cards) else None)
        name = card.product_name if card is not None else None
        out.append(replace(gpu, product=name) if name else gpu)
    return out


def _nvidia_from_proc(root: Path, table: TableSource) -> list[GpuInfo]:
    base = root / "proc/driver/nvidia"
    version_text = _read(base / "version")
    driver = parse_nvidia_version(version_text) if version_text else None
    gpus: list[GpuInfo] = []
    try:
        buses = sorted(p for p in (base / "gpus").iterdir() if p.is_dir())
    except OSError:
        buses = []
    for bus in buses:
        info = parse_nvidia_information(_read(bus / "information") or "")
        model = info.get("Model", "NVIDIA GPU")
        minor = host_int(info.get("Device Minor", ""), maximum=MAX_DEVICE_MINOR)
        if minor is None:
            minor = len(gpus)
        device = _read_hex(root / "sys/bus/pci/devices" / bus.name / "device")
        arch = table().arch_for_model(model)
        gpus.append(
            GpuInfo(
                vendor="nvidia",
                product=model,
                arch=arch,
                driver_version=driver,
                device_nodes=(f"/dev/nvidia{minor}", "/dev/nvidiactl", "/dev/nvidia-uvm"),
                source="procfs:nvidia",
                pci_id=f"10de:{device:04x}" if device is not None else None,
                index=len(gpus),
                arch_guessed=arch is not None,
            )
        )
    return gpus


def _nvidia_from_drm(root: Path) -> list[GpuInfo]:
    gpus: list[GpuInfo] = []
    for card in _drm_cards(root):
        if card.vendor != NVIDIA_PCI_VENDOR or card.device is None:
            continue
        gpus.append(
            GpuInfo(
                vendor="nvidia",
                product=card.product_name or f"NVIDIA GPU 0x{card.device:04x}",
                arch=None,
                driver_version=None,
                device_nodes=(f"/dev/nvidia{len(gpus)}", "/dev/nvidiactl", "/dev/nvidia-uvm"),
                source="sysfs:drm",
                pci_id=f"10de:{card.device:04x}",
                index=len(gpus),
            )
        )
    return gpus


def _merge_rocminfo(
    gpus: list[GpuInfo], agents: list[RocmAgent], kernel: str, root: Path
) -> list[GpuInfo]:
    gpu_agents = [a for a in agents if a.device_type == "GPU" or parse_gfx(a.name) is not None]
    if not gpus:
        driver = _amd_driver(root, kernel)
        return [
            GpuInfo(
                vendor="amd",
                product=a.marketing_name or "AMD GPU",
                arch=a.name if parse_gfx(a.name) is not None else None,
                driver_version=driver,
                device_nodes=("/dev/kfd",),
                source="rocminfo",
                index=i,
            )
            for i, a in enumerate(gpu_agents)
        ]
    merged: list[GpuInfo] = []
    for i, gpu in enumerate(gpus):
        agent = gpu_agents[i] if i < len(gpu_agents) else None
        if agent is None:
            merged.append(gpu)
            continue
        product = gpu.product
        if agent.marketing_name and (gpu.product.startswith("AMD GPU")):
            product = agent.marketing_name
        if gpu.arch:
            merged.append(replace(gpu, product=product))
        else:
            tool_arch = agent.name if parse_gfx(agent.name) is not None else None
            merged.append(replace(gpu, product=product, arch=tool_arch))
    return merged


def _merge_smi(gpus: list[GpuInfo], rows: list[SmiRow]) -> list[GpuInfo]:
    if not gpus:
        return [
            GpuInfo(
                vendor="nvidia",
                product=r.name,
                arch=r.arch,
                driver_version=r.driver_version,
                device_nodes=(f"/dev/nvidia{i}", "/dev/nvidiactl", "/dev/nvidia-uvm"),
                source="nvidia-smi",
                index=i,
            )
            for i, r in enumerate(rows)
        ]
    if len(rows) != len(gpus):
        # nvidia-smi in a job's device cgroup lists only the job's GPUs, procfs all of the
        # node's: a row is matched by product name, never by position.
        named = {r.name: r for r in rows}
        return [_with_smi(g, named[g.product]) if g.product in named else g for g in gpus]
    return [_with_smi(gpu, row) for gpu, row in zip(gpus, rows, strict=True)]


def _with_smi(gpu: GpuInfo, row: SmiRow) -> GpuInfo:
    # compute_cap from the driver itself beats the product-name table.
    return replace(
        gpu,
        product=row.name if gpu.product.startswith("NVIDIA GPU") else gpu.product,
        arch=row.arch or gpu.arch,
        arch_guessed=gpu.arch_guessed and not row.arch,
        driver_version=gpu.driver_version or row.driver_version,
        source=gpu.source if gpu.arch == row.arch else f"{gpu.source}+nvidia-smi",
    )


def _kernel(root: Path) -> str:
    text = _read(root / "proc/sys/kernel/osrelease")
    if text and text.strip():
        return text.strip()
    return platform.release() if root == Path("/") else ""


def detect(
    root: Path = Path("/"),
    environ: Mapping[str, str] | None = None,
    tools: ToolRunner | None = None,
    table: CompatTable | None = None,
) -> HostInfo:
    """Detect the host's GPUs. Never raises for a missing GPU: that is ``count == 0``.

    ``root`` is where ``sys/`` and ``proc/`` are read from. ``tools`` runs detection tools;
    by default the real ones when ``root`` is ``/`` and none otherwise (a fixture tree has
    no tools). ``table`` gives the product and PCI-id lookups (by default the shipped
    table, loaded only when a lookup is needed). Raises :class:`InvalidInput` only for a
    malformed override variable.
    """

    def lookups() -> CompatTable:
        return load_table() if table is None else table

    env = os.environ if environ is None else environ
    if tools is None:
        tools = system_tools(env) if root == Path("/") else no_tools
    kernel = _kernel(root)
    sources: list[str] = []
    notes: list[str] = []
    amd = _amd_gpus(root, kernel, lookups, tools, sources=sources, notes=notes)
    nvidia = _nvidia_gpus(root, lookups, tools, sources=sources, notes=notes)
    if any(card.vendor == INTEL_PCI_VENDOR for card in _drm_cards(root)):
        notes.append("Intel GPU present: envforge has no recipes for it (ignored)")

    gpus = [replace(g, index=i) for i, g in enumerate([*amd, *nvidia])]
    if any(g.vendor == "amd" and g.arch for g in gpus):
        gpus = [
            replace(g, integrated=lookups().is_integrated(g.arch))
            if g.vendor == "amd" and g.arch
            else g
            for g in gpus
        ]
    forced = overridden(env, gpus)
    if forced is not None:
        gpus, more = forced
        notes.extend(more)
        sources.append("override")
    driver = printable(env, "ENVFORGE_DRIVER_VERSION")
    if driver:
        gpus = [replace(g, driver_version=driver) for g in gpus]
        sources.append("override:driver")
    for gpu in gpus:
        if gpu.arch is None:
            notes.append(
                f"GPU {gpu.index} ({gpu.product}): arch unknown; set ENVFORGE_GPU_ARCH to choose"
            )
    host = HostInfo(
        gpus=tuple(gpus),
        kernel=kernel,
        machine=platform.machine(),
        sources=tuple(dict.fromkeys(sources)),
        notes=tuple(notes),
    )
    return _with_host_notes(host)


def _amd_gpus(
    root: Path,
    kernel: str,
    lookups: TableSource,
    tools: ToolRunner,
    *,
    sources: list[str],
    notes: list[str],
) -> list[GpuInfo]:
    """AMD GPUs from KFD, else DRM; rocminfo / rocm_agent_enumerator fill the gaps."""
    amd = _named_by_drm(_amd_from_kfd(root, kernel, lookups), root)
    if amd:
        sources.append("sysfs:kfd")
    else:
        amd = _amd_from_drm(root, kernel, lookups)
        if amd:
            sources.append("sysfs:drm")
            notes.append(
                "AMD GPU seen by DRM but not by KFD: the compute interface (/dev/kfd) is missing"
            )
    if amd and all(g.arch is not None and not g.product.startswith("AMD GPU") for g in amd):
        return amd
    rocminfo = tools(["rocminfo"])
    agents = parse_rocminfo(rocminfo) if rocminfo else []
    if agents:
        sources.append("rocminfo")
    else:
        enum_text = tools(["rocm_agent_enumerator"])
        agents = [RocmAgent(a, None, "GPU") for a in parse_rocm_agent_enumerator(enum_text or "")]
        if agents:
            sources.append("rocm_agent_enumerator")
    return _merge_rocminfo(amd, agents, kernel, root) if agents else amd


def _nvidia_gpus(
    root: Path,
    lookups: TableSource,
    tools: ToolRunner,
    *,
    sources: list[str],
    notes: list[str],
) -> list[GpuInfo]:
    """NVIDIA GPUs from /proc/driver/nvidia, else DRM; nvidia-smi adds the arch."""
    nvidia = _nvidia_from_proc(root, lookups)
    if nvidia:
        sources.append("procfs:nvidia")
    else:
        nvidia = _nvidia_from_drm(root)
        if nvidia:
            sources.append("sysfs:drm")
            notes.append(
                "NVIDIA GPU on PCI but no /proc/driver/nvidia: is the nvidia driver loaded?"
            )
    smi = tools(
        ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
    )
    rows = parse_nvidia_smi_csv(smi) if smi else []
    if rows:
        sources.append("nvidia-smi")
        if nvidia and len(rows) != len(nvidia):
            notes.append(
                f"nvidia-smi lists {len(rows)} of the {len(nvidia)} NVIDIA GPUs in "
                "/proc/driver/nvidia (a job's device cgroup hides the others)"
            )
        nvidia = _merge_smi(nvidia, rows)
    return nvidia


def _with_host_notes(host: HostInfo) -> HostInfo:
    """The notes about the whole host: an iGPU passed over, several archs."""
    chosen = host.primary
    skipped = host.passed_over
    if chosen is not None and skipped:
        igpus = ", ".join(f"GPU {g.index} ({g.arch})" for g in skipped)
        host = replace(
            host,
            notes=(
                *host.notes,
                f"integrated {igpus} beside the discrete GPU {chosen.index} ({chosen.arch}): "
                "auto chooses the discrete one; an iGPU visible to ROCm can break the "
                "discrete GPU's stack (pytorch/pytorch#119637): hide it from ROCm "
                "(ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES) when running there",
            ),
        )
    if len(host.archs) > 1:
        host = replace(
            host,
            notes=(
                *host.notes,
                f"GPUs of {len(host.archs)} archs ({', '.join(host.archs)}): one stack cannot "
                "serve them all; each arch gets its own recipe (auto uses GPU "
                f"{chosen.index if chosen else 0}'s)",
            ),
        )
    return host
