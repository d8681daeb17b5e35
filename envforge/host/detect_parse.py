"""Text parsers of host detection (KFD properties, ``/proc/driver/nvidia``, ``nvidia-smi``,
``rocminfo``, ``rocm_agent_enumerator``) and the override variables
(:data:`~envforge.host.hostinfo.OVERRIDE_VARS`) that replace what was detected."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from envforge.errors import InvalidInput
from envforge.host.hostfs import host_int
from envforge.host.hostinfo import MAX_GPU_COUNT, GpuInfo
from envforge.knowledge.arch import (
    is_device_arch,
    parse_gfx,
    sm_from_compute_cap,
    strip_features,
    vendor_of,
)
from envforge.knowledge.compiled import load_table
from envforge.knowledge.table import CompatTable


def parse_kfd_properties(text: str) -> dict[str, int]:
    """``key value`` lines of a KFD topology ``properties`` file → ints."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            value = host_int(parts[1], base=0, minimum=-(2**63), maximum=2**64 - 1)
            if value is not None:
                out[parts[0]] = value
    return out


_NVRM_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+(?:\.\d+)+)")


def parse_nvidia_version(text: str) -> str | None:
    """``/proc/driver/nvidia/version`` → driver version (``550.127.05``)."""
    match = _NVRM_RE.search(text)
    return match.group(1) if match else None


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``/proc/driver/nvidia/gpus/<bus>/information`` → ``{"Model": …, "Device Minor": …}``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class SmiRow:
    name: str
    arch: str | None
    driver_version: str | None


def parse_nvidia_smi_csv(text: str) -> list[SmiRow]:
    """``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``."""
    rows: list[SmiRow] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3 or not cells[0]:
            continue
        name, cap, driver = cells[0], cells[1], cells[2]
        rows.append(SmiRow(name=name, arch=sm_from_compute_cap(cap), driver_version=driver or None))
    return rows


@dataclass(frozen=True)
class RocmAgent:
    name: str
    marketing_name: str | None
    device_type: str


def parse_rocminfo(text: str) -> list[RocmAgent]:
    """``rocminfo`` → its agents (CPU and GPU), in order."""
    agents: list[RocmAgent] = []
    blocks = re.split(r"^\*{5,}\s*\nAgent \d+\s*\n\*{5,}\s*$", text, flags=re.MULTILINE)
    for block in blocks[1:]:
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            key = key.strip()
            # Only the agent's own top-level fields (two-space indent), not pool/ISA detail.
            if (
                sep
                and key
                and key not in fields
                and line.startswith("  ")
                and not line.startswith("    ")
            ):
                fields[key] = value.strip()
        # ``gfx942:sramecc+:xnack-`` style target-feature suffixes are not part of the arch.
        name = strip_features(fields.get("Name", ""))
        if not name:
            continue
        agents.append(
            RocmAgent(
                name=name,
                marketing_name=fields.get("Marketing Name") or None,
                device_type=fields.get("Device Type", "").upper(),
            )
        )
    return agents


def parse_rocm_agent_enumerator(text: str) -> list[str]:
    """``rocm_agent_enumerator`` → GPU archs (``gfx000`` is the CPU agent and is dropped)."""
    return [line.strip() for line in text.splitlines() if parse_gfx(line.strip()) is not None]


def nvidia_arch_for_product(product: str, table: CompatTable | None = None) -> str | None:
    """An NVIDIA model name → arch, from the table's ``nvidia_model_names``."""
    return (load_table() if table is None else table).arch_for_model(product)


# --------------------------------------------------------------------------- override variables


def printable(env: Mapping[str, str], name: str) -> str:
    """An override variable's text; control characters and undecodable bytes refused."""
    value = env.get(name, "").strip()
    if len(value) > 200 or not value.isprintable():
        raise InvalidInput(
            f"{name} holds control characters, invalid bytes or more than 200 characters",
            hint=f"set {name} to plain text",
        )
    return value


def overridden(
    env: Mapping[str, str], detected: list[GpuInfo]
) -> tuple[list[GpuInfo], list[str]] | None:
    arch = env.get("ENVFORGE_GPU_ARCH", "").strip()
    vendor = env.get("ENVFORGE_GPU_VENDOR", "").strip().lower()
    if not arch and not vendor:
        return None
    notes = []
    if detected:
        seen = ", ".join(f"{g.product} ({g.arch or 'arch unknown'})" for g in detected)
        notes.append(f"override variables replace the detected GPU(s): {seen}")
    if vendor == "none":
        return [], [*notes, "ENVFORGE_GPU_VENDOR=none: assuming no GPU"]
    if arch and not is_device_arch(arch):
        raise InvalidInput(
            f"ENVFORGE_GPU_ARCH={arch!r} is not a GPU arch",
            hint="use an LLVM target like gfx1031 or an SM like sm_90",
        )
    if not arch:
        raise InvalidInput(
            f"ENVFORGE_GPU_VENDOR={vendor} needs ENVFORGE_GPU_ARCH",
            hint="set ENVFORGE_GPU_ARCH too (e.g. gfx1031 or sm_90), or ENVFORGE_GPU_VENDOR=none",
        )
    inferred: str = vendor_of(arch) or ""
    vendor = vendor or inferred
    if vendor not in ("amd", "nvidia"):
        raise InvalidInput(
            f"ENVFORGE_GPU_VENDOR={vendor!r} is not a vendor"
            if vendor
            else "ENVFORGE_GPU_VENDOR needs ENVFORGE_GPU_ARCH",
            hint="set ENVFORGE_GPU_VENDOR to amd, nvidia or none",
        )
    if inferred and inferred != vendor:
        raise InvalidInput(
            f"ENVFORGE_GPU_ARCH={arch} is not an {vendor} arch",
            hint="gfx… archs are amd, sm_… archs are nvidia",
        )
    count_text = env.get("ENVFORGE_GPU_COUNT", "1").strip() or "1"
    count = host_int(count_text, minimum=1, maximum=MAX_GPU_COUNT)
    if count is None:
        raise InvalidInput(
            f"ENVFORGE_GPU_COUNT={count_text!r} is not a positive count",
            hint=f"e.g. ENVFORGE_GPU_COUNT=2 (at most {MAX_GPU_COUNT})",
        )
    product = (
        printable(env, "ENVFORGE_GPU_PRODUCT") or f"{vendor.upper()} GPU {arch} (override)".strip()
    )
    gpus: list[GpuInfo] = []
    for i in range(count):
        nodes = (
            ("/dev/kfd", f"/dev/dri/renderD{128 + i}")
            if vendor == "amd"
            else (f"/dev/nvidia{i}", "/dev/nvidiactl", "/dev/nvidia-uvm")
        )
        gpus.append(
            GpuInfo(
                vendor="amd" if vendor == "amd" else "nvidia",
                product=product,
                arch=arch or None,
                driver_version=None,
                device_nodes=nodes,
                source="override",
                index=i,
            )
        )
    return gpus, notes
