"""``envforge doctor``: check this host for a recipe and say, for each problem, the fix.

Every check returns :class:`Finding` values with a severity: ``ok``, ``warn`` (worth
knowing, does not stop a build or a run) or ``block`` (the recipe cannot work here until
it is fixed). The CLI exits 0 when nothing blocks and 4 (:class:`Unavailable`) otherwise.

Everything the checks read from the host comes in through parameters: ``root`` (where
``dev/``, ``proc/`` and ``etc/group`` are read from), the :class:`Identity` of the user,
a Docker ping function and the folder whose free space counts, so tests run against
fixture trees and fakes, never against this machine.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envforge import knowledge
from envforge.host import gpumem
from envforge.host.detect import GpuInfo, HostInfo
from envforge.host.gpumem import open_holders
from envforge.host.hostfs import host_int, read_host_text
from envforge.host.hostinfo import ToolRunner
from envforge.recipe.model import Recipe

Severity = Literal["ok", "warn", "block"]
#: (pid, command, node) of the processes with a GPU device node open (``proc/*/fd``).
gpu_holders = open_holders

GIB = 1024**3


@dataclass(frozen=True)
class Finding:
    """One thing doctor found, with the fix when there is something to do."""

    check: str
    severity: Severity
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Identity:
    """Who runs envforge: the user, the groups the *process* has, and group names."""

    uid: int
    user: str
    gids: frozenset[int]
    #: gid → name, for messages; a gid not here is looked up in ``etc/group``.
    group_names: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def current(cls) -> Identity:
        uid = os.getuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        return cls(uid=uid, user=user, gids=frozenset([os.getgid(), *os.getgroups()]))


@dataclass(frozen=True)
class DoctorReport:
    recipe: str | None
    host: HostInfo
    findings: tuple[Finding, ...]

    @property
    def blocking(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "block")

    @property
    def ok(self) -> bool:
        return not self.blocking

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "ok": self.ok,
            "host": self.host.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
        }


# --------------------------------------------------------------------------- groups


def parse_group_file(text: str) -> dict[str, tuple[int, tuple[str, ...]]]:
    """``/etc/group`` → name → (gid, members)."""
    out: dict[str, tuple[int, tuple[str, ...]]] = {}
    for line in text.splitlines():
        parts = line.strip().split(":")
        gid = host_int(parts[2], maximum=2**32 - 1) if len(parts) >= 4 else None
        if gid is None:
            continue
        members = tuple(m for m in parts[3].split(",") if m)
        out[parts[0]] = (gid, members)
    return out


def _groups(root: Path) -> dict[str, tuple[int, tuple[str, ...]]]:
    text = read_host_text(root / "etc/group", max_bytes=4 << 20)
    return {} if text is None else parse_group_file(text)


def _group_name(
    gid: int, identity: Identity, groups: Mapping[str, tuple[int, tuple[str, ...]]]
) -> str:
    if gid in identity.group_names:
        return identity.group_names[gid]
    for name, (g, _members) in groups.items():
        if g == gid:
            return name
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# --------------------------------------------------------------------------- checks


def _accessible(st: os.stat_result, identity: Identity) -> bool:
    """Read+write access by mode bits, as the kernel decides it for this identity."""
    if identity.uid == 0:
        return True
    if st.st_uid == identity.uid:
        bits = stat.S_IRUSR | stat.S_IWUSR
    elif st.st_gid in identity.gids:
        bits = stat.S_IRGRP | stat.S_IWGRP
    else:
        bits = stat.S_IROTH | stat.S_IWOTH
    return st.st_mode & bits == bits


def _relevant_gpus(recipe: Recipe | None, host: HostInfo) -> list[GpuInfo]:
    if recipe is None:
        return list(host.gpus)
    if recipe.gpu.vendor == "none":
        return []
    return [g for g in host.gpus if g.vendor == recipe.gpu.vendor]


def check_gpu_present(
    recipe: Recipe | None, host: HostInfo, *, chosen_for: str | None = None
) -> list[Finding]:
    """``chosen_for``: the arch ``auto`` chose the recipe for (no "is for" warning then)."""
    if recipe is None or recipe.gpu.vendor == "none":
        if host.gpus:
            archs = ", ".join(host.archs) or "arch unknown"
            return [Finding("gpu", "ok", f"{host.count} GPU(s) detected ({archs})")]
        return [Finding("gpu", "ok", "no GPU detected; the cpu recipe needs none")]
    vendor = recipe.gpu.vendor
    gpus = _relevant_gpus(recipe, host)
    if not gpus:
        return [
            Finding(
                "gpu",
                "block",
                f"recipe {recipe.name} needs an {vendor.upper()} GPU ({recipe.gpu.arch});"
                " none detected",
                "use the cpu recipe, run with `--fallback cpu`, or on a build machine set "
                f"ENVFORGE_GPU_ARCH={recipe.gpu.arch}",
            )
        ]
    found = sorted({g.arch or "?" for g in gpus})
    if chosen_for is not None and chosen_for in found:
        how = "" if recipe.gpu.arch == chosen_for else f" (recipe {recipe.name}, made to serve it)"
        return [
            Finding(
                "gpu",
                "ok",
                f"{len(gpus)} {vendor.upper()} GPU(s): {', '.join(found)}; "
                f"auto chose {recipe.name} for {chosen_for}{how}",
            )
        ]
    if recipe.gpu.arch and recipe.gpu.arch not in found:
        return [
            Finding(
                "gpu",
                "warn",
                f"recipe {recipe.name} is for {recipe.gpu.arch}; this host has {', '.join(found)}",
                "run `envforge doctor auto` to check the recipe chosen for this host",
            )
        ]
    return [Finding("gpu", "ok", f"{len(gpus)} {vendor.upper()} GPU(s): {', '.join(found)}")]


def check_device_nodes(
    recipe: Recipe | None, host: HostInfo, root: Path, identity: Identity
) -> list[Finding]:
    groups = _groups(root)
    findings: list[Finding] = []
    nodes: list[str] = []
    for gpu in _relevant_gpus(recipe, host):
        for node in gpu.device_nodes:
            if node not in nodes:
                nodes.append(node)
    for node in nodes:
        path = root / node.lstrip("/")
        try:
            st = path.stat()
        except OSError:
            if node == "/dev/kfd":
                fix = (
                    "load the amdgpu driver (`sudo modprobe amdgpu`);"
                    " in a container pass --device=/dev/kfd"
                )
            elif node.startswith("/dev/dri/"):
                fix = "in a container pass --device=/dev/dri; on the host check the amdgpu driver"
            else:
                fix = (
                    "load the nvidia driver (`sudo modprobe nvidia nvidia_uvm`, or run nvidia-smi);"
                    " in a container use --gpus all with the NVIDIA Container Toolkit"
                )
            findings.append(Finding("device-nodes", "block", f"{node} is missing", fix))
            continue
        if _accessible(st, identity):
            findings.append(Finding("device-nodes", "ok", f"{node} is readable and writable"))
            continue
        group = _group_name(st.st_gid, identity, groups)
        findings.append(
            Finding(
                "device-nodes",
                "block",
                f"{node} is not accessible to {identity.user} "
                f"(mode {stat.filemode(st.st_mode)}, group {group})",
                f"`sudo usermod -aG {group} {identity.user}`, then log out and in again",
            )
        )
    return findings


def check_groups(
    recipe: Recipe | None, host: HostInfo, root: Path, identity: Identity
) -> list[Finding]:
    """AMD needs ``video`` and ``render``; a listing in etc/group counts only after re-login."""
    if not any(g.vendor == "amd" for g in _relevant_gpus(recipe, host)):
        return []
    groups = _groups(root)
    findings: list[Finding] = []
    for name in ("video", "render"):
        if name not in groups:
            continue
        gid, members = groups[name]
        if gid in identity.gids or identity.uid == 0:
            findings.append(Finding("groups", "ok", f"{identity.user} is in group {name}"))
        elif identity.user in members:
            findings.append(
                Finding(
                    "groups",
                    "warn",
                    f"{identity.user} was added to group {name}"
                    " but this session does not have it yet",
                    f"log out and in again (or `newgrp {name}`)",
                )
            )
        else:
            findings.append(
                Finding(
                    "groups",
                    "warn",
                    f"{identity.user} is not in group {name}",
                    f"`sudo usermod -aG {name} {identity.user}`, then log out and in again",
                )
            )
    return findings


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts: list[int] = []
    for piece in text.strip().split("."):
        digits = "".join(ch for ch in piece if ch in "0123456789")
        number = host_int(digits, maximum=10**9) if digits else None
        if number is None:
            break
        parts.append(number)
    return tuple(parts) or None


def min_driver_for(recipe: Recipe) -> str | None:
    """The lowest NVIDIA driver the recipe's CUDA wheel runs on, from the knowledge
    table (None for ROCm/CPU, or a CUDA major the table does not know)."""
    return knowledge.min_driver(recipe)


def _older_cuda_hint(recipe: Recipe, have: tuple[int, ...]) -> str:
    """A CUDA variant of the same torch release that this driver runs and that has the
    recipe's arch, as ``--set`` options; a generic hint when the table knows none."""
    table = knowledge.load_table()
    release = table.release(recipe.torch.version.split("+", 1)[0])
    fits: list[tuple[tuple[int, ...], str, str]] = []
    for variant in release.variants if release is not None else ():
        if variant.kind != "cuda" or variant.version is None:
            continue
        floor = knowledge.min_driver(variant.version, table)
        need = _version_tuple(floor) if floor else None
        if need is None or need > have:
            continue
        if recipe.gpu.arch and not variant.covers(recipe.gpu.arch):
            continue
        fits.append((_version_tuple(variant.version) or (0,), variant.version, variant.index))
    if not fits:
        return "choose a recipe with an older CUDA variant"
    _key, version, index = max(fits)
    return f"use the CUDA {version} wheels: --set cuda={version} --set torch.index={index}"


def check_driver(recipe: Recipe | None, host: HostInfo) -> list[Finding]:
    if recipe is None or recipe.gpu.vendor == "none":
        return []
    gpus = _relevant_gpus(recipe, host)
    if not gpus:
        return []
    driver = gpus[0].driver_version
    if recipe.gpu.vendor == "amd":
        if driver is None:
            return [
                Finding(
                    "driver",
                    "block",
                    "the amdgpu kernel driver is not loaded",
                    "`sudo modprobe amdgpu` (ROCm torch wheels bring their own user-space ROCm;"
                    " only the kernel driver is needed)",
                )
            ]
        return [Finding("driver", "ok", f"amdgpu driver {driver}")]
    floor = min_driver_for(recipe)
    if driver is None:
        return [
            Finding(
                "driver",
                "block",
                "NVIDIA driver version unknown",
                "install the NVIDIA driver; check with `nvidia-smi`",
            )
        ]
    have, need = _version_tuple(driver), _version_tuple(floor) if floor else None
    if have is not None and need is not None and have < need:
        return [
            Finding(
                "driver",
                "block",
                f"NVIDIA driver {driver} is older than {floor},"
                f" which CUDA {recipe.cuda} wheels need",
                f"upgrade the driver to >= {floor}, or " + _older_cuda_hint(recipe, have),
            )
        ]
    floor_text = f" (CUDA {recipe.cuda} needs >= {floor})" if floor else ""
    return [Finding("driver", "ok", f"NVIDIA driver {driver}{floor_text}")]


def check_busy(recipe: Recipe | None, host: HostInfo, root: Path) -> list[Finding]:
    nodes: set[str] = set()
    for gpu in _relevant_gpus(recipe, host):
        nodes.update(n for n in gpu.device_nodes if n not in ("/dev/nvidiactl",))
    if not nodes:
        return []
    holders = gpu_holders(root, nodes, exclude=[os.getpid()])
    if not holders:
        return [Finding("gpu-busy", "ok", "no other process has the GPU open")]
    by_pid: dict[int, tuple[str, list[str]]] = {}
    for pid, comm, node in holders:
        by_pid.setdefault(pid, (comm, []))[1].append(node)
    listed = "; ".join(f"{pid} {comm} ({', '.join(n)})" for pid, (comm, n) in by_pid.items())
    return [
        Finding(
            "gpu-busy",
            "warn",
            f"{len(by_pid)} process(es) hold the GPU: {listed}",
            "stop them if the probe runs out of memory or hangs (`kill PID`)",
        )
    ]


def check_memory(
    recipe: Recipe | None, host: HostInfo, root: Path, tools: ToolRunner
) -> list[Finding]:
    """``gpu-memory``: each GPU's memory in use (nvidia-smi; sysfs, else rocm-smi), a
    warning naming who holds it (nvidia-smi, amd-smi, rocm-smi, else ``/proc``) when other
    processes hold more than half; nothing where neither a tool nor sysfs says."""
    vendors = sorted({g.vendor for g in _relevant_gpus(recipe, host)} & {"amd", "nvidia"})
    findings: list[Finding] = []
    for vendor in vendors:
        for gpu, holders in gpumem.gpu_memory(vendor, root, tools, exclude=[os.getpid()]):
            if not gpu.busy:
                findings.append(Finding("gpu-memory", "ok", f"{gpu.text} ({gpu.source})"))
                continue
            who = gpumem.describe(holders) or "processes the driver does not name here"
            findings.append(
                Finding(
                    "gpu-memory",
                    "warn",
                    f"{gpu.text}, held by {who}",
                    "stop them (`kill PID`) or wait: the probe and training need the memory "
                    "(`--require-free GIB` makes the probe fail instead of warn)",
                )
            )
    return findings


def shutil_free(path: Path) -> int:
    """Free bytes of the file system holding ``path``."""
    return shutil.disk_usage(path).free


#: What :func:`check_disk` asks (a module attribute, so tests can stand in for the disk).
free_bytes = shutil_free


def check_disk(
    recipe: Recipe | None,
    space_dir: Path | None,
    need: tuple[int, Path],
    host: HostInfo | None = None,
) -> list[Finding]:
    """``need``: the bytes a build takes and the folder they go to (the backend's
    :func:`~envforge.backends.Backend.disk_need`); ``space_dir`` (tests) replaces that folder."""
    label = {"none": "CPU", "amd": "ROCm", "nvidia": "CUDA"}[vendor_of(recipe, host)]
    size, folder = need
    probe = space_dir or folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = free_bytes(probe)
    except OSError as exc:
        where = space_dir or folder
        return [Finding("disk", "warn", f"cannot read free space of {where}: {exc.strerror}")]
    text = f"{free / GIB:.1f} GiB free at {probe}; a {label} build needs about {size / GIB:.0f} GiB"
    if free < size:
        return [
            Finding(
                "disk", "block", text, f"free space under {probe}, or point ENVFORGE_HOME elsewhere"
            )
        ]
    return [Finding("disk", "ok", text)]


def vendor_of(recipe: Recipe | None, host: HostInfo | None) -> str:
    """The recipe's GPU vendor; without a recipe, the host's first GPU's ("none")."""
    gpu = host.primary if host is not None else None
    return recipe.gpu.vendor if recipe is not None else gpu.vendor if gpu is not None else "none"
