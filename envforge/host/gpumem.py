"""GPU memory held by other processes, and who holds it, for ``doctor`` and the probe.

How full each GPU is: ``nvidia-smi --query-gpu=index,uuid,memory.used,memory.total``
(NVIDIA); sysfs ``mem_info_vram_used`` / ``mem_info_vram_total`` under
``sys/class/drm/card*/device``, else ``rocm-smi --showmeminfo vram --json`` (AMD).
Who holds it: ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory``,
``amd-smi process --json``, ``rocm-smi --showpids --json``, and where no tool names anyone,
the processes with a GPU device node open (``proc/*/fd`` links to ``/dev/nvidiaN``,
``/dev/kfd``, ``/dev/dri/renderD*``: names and pids, no amounts).

Every tool runs through a :data:`~envforge.host.hostinfo.ToolRunner` (the real one,
:func:`tool_runner`, under a deadline; a tool that is missing, fails, hangs or prints
something else gives nothing), every file through :mod:`envforge.host.hostfs`.

The probe's worker measures free memory with torch inside the environment (a container
too) and says which devices are busy; the host names the holders (:func:`probe_holders`),
since inside a container the driver's tools and ``/proc`` see only the container's own
processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envforge.core import proc
from envforge.core.jsonlimits import BadJSON, loads
from envforge.host.hostfs import host_int, numeric_name, read_host_text
from envforge.host.hostinfo import ToolRunner

#: A GPU is busy when other processes hold more than this share of its memory.
BUSY_SHARE = 0.5
#: Seconds one tool may take (a hung driver must not hang doctor or the probe).
TOOL_DEADLINE = 5.0
MIB = 1 << 20
GIB = 1 << 30
#: Holders named in one line; the rest are counted.
MAX_NAMED = 5
#: The file name of the probe's worker (both targets): its own process is not "another".
WORKER_FILE = "envforge_probe_worker.py"

NVIDIA_GPUS = (
    "nvidia-smi",
    "--query-gpu=index,uuid,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)
NVIDIA_APPS = (
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
)
AMD_PROCESSES = ("amd-smi", "process", "--json")
ROCM_PIDS = ("rocm-smi", "--showpids", "--json")
ROCM_VRAM = ("rocm-smi", "--showmeminfo", "vram", "--json")
_MAX_VALUE = 1 << 60
AMD_VENDOR = "0x1002"


@dataclass(frozen=True)
class Holder:
    """A process holding GPU memory (or, from ``/proc``, a GPU device node open)."""

    pid: int
    name: str
    #: Bytes it holds on the GPU, when the driver says.
    used: int | None = None
    #: The GPU as the tool names it: an index (``"0"``) or a UUID (``"GPU-…"``); None: any.
    gpu: str | None = None

    @property
    def text(self) -> str:
        """``python3 (pid 4242, 138.00 GiB)``; ``Xorg (pid 77)`` without an amount."""
        amount = f", {self.used / GIB:.2f} GiB" if self.used is not None else ""
        return f"{self.name} (pid {self.pid}{amount})"


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory as the driver reports it."""

    index: int
    used: int
    total: int
    source: str
    uuid: str | None = None

    @property
    def busy(self) -> bool:
        return self.total > 0 and self.used > BUSY_SHARE * self.total

    @property
    def text(self) -> str:
        free = max(self.total - self.used, 0)
        return (
            f"GPU {self.index}: {self.used / GIB:.2f} of {self.total / GIB:.2f} GiB in use "
            f"({free / GIB:.2f} GiB free)"
        )


def tool_runner(
    timeout: float = TOOL_DEADLINE, environ: Mapping[str, str] | None = None
) -> ToolRunner:
    """Runs a tool found on ``PATH`` under ``timeout`` seconds: its stdout, or None when it
    is missing, fails or overruns (then it is stopped with its process group)."""
    env = dict(os.environ if environ is None else environ)

    def run(argv: Sequence[str]) -> str | None:
        exe = shutil.which(argv[0], path=env.get("PATH"))
        if exe is None:
            return None
        try:
            done = proc.run([exe, *argv[1:]], timeout=timeout, env=env)
        except OSError:
            return None
        return done.stdout if done.ok and not done.timed_out else None

    return run


# --------------------------------------------------------------------------- parsers


def _number(text: Any) -> int | None:
    """A non-negative whole number from a tool (``"141030"``, ``12``), else None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if 0 <= text <= _MAX_VALUE else None
    return host_int(str(text), maximum=_MAX_VALUE) if text is not None else None


def _csv(text: str | None, width: int) -> list[list[str]]:
    rows = [[c.strip() for c in line.split(",")] for line in (text or "").splitlines()]
    return [r for r in rows if len(r) == width]


def parse_nvidia_gpus(text: str | None) -> list[GpuMemory]:
    """``0, GPU-3f9b…, 141540, 143771`` (MiB) lines → each GPU's memory."""
    out: list[GpuMemory] = []
    for index, uuid, used, total in _csv(text, 4):
        i, u, t = _number(index), _number(used), _number(total)
        if i is not None and u is not None and t is not None:
            out.append(GpuMemory(i, u * MIB, t * MIB, "nvidia-smi", uuid or None))
    return out


def parse_nvidia_apps(text: str | None) -> list[Holder]:
    """``GPU-3f9b…, 4242, /usr/bin/python3, 141030`` lines → holders (``[N/A]`` memory:
    unknown amount)."""
    out: list[Holder] = []
    for uuid, pid, name, used in _csv(text, 4):
        number = _number(pid)
        if number is not None:
            mib = _number(used)
            out.append(
                Holder(
                    number,
                    os.path.basename(name) or name or "?",
                    mib * MIB if mib is not None else None,
                    uuid or None,
                )
            )
    return out


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return loads(text)
    except BadJSON:
        return None


def _bytes(value: Any) -> int | None:
    """``{"value": 2353860608, "unit": "B"}``, ``{"value": 2531, "unit": "MB"}`` or a number."""
    if isinstance(value, Mapping):
        number = _number(value.get("value"))
        scale = {"B": 1, "KB": 1 << 10, "MB": MIB, "GB": GIB}.get(str(value.get("unit", "B")))
        return number * scale if number is not None and scale else None
    return _number(value)


def parse_amd_smi(text: str | None) -> list[Holder]:
    """``amd-smi process --json``: ``[{"gpu": 0, "process_list": [{"process_info": {...}}]}]``
    (``process_info`` is a string on an idle GPU); VRAM from ``memory_usage.vram_mem``,
    else ``mem_usage``."""
    data = _json(text)
    out: list[Holder] = []
    for entry in data if isinstance(data, list) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("process_list"), list):
            continue
        for item in entry["process_list"]:
            info = item.get("process_info") if isinstance(item, Mapping) else None
            pid = _number(info.get("pid")) if isinstance(info, Mapping) else None
            if not isinstance(info, Mapping) or pid is None:
                continue
            usage = info.get("memory_usage")
            vram = _bytes(usage.get("vram_mem")) if isinstance(usage, Mapping) else None
            used = vram if vram is not None else _bytes(info.get("mem_usage"))
            out.append(Holder(pid, str(info.get("name") or "?"), used, str(entry.get("gpu"))))
    return out


def parse_rocm_pids(text: str | None) -> list[Holder]:
    """``rocm-smi --showpids --json``: ``{"system": {"PID28389": "llama-server, 1,
    2353860608, 11011, 0"}}`` (name, GPU count, VRAM bytes, SDMA, CU occupancy)."""
    data = _json(text)
    system = data.get("system") if isinstance(data, Mapping) else None
    out: list[Holder] = []
    for key, value in system.items() if isinstance(system, Mapping) else ():
        pid = _number(str(key)[3:]) if str(key).startswith("PID") else None
        fields = [f.strip() for f in str(value).split(",")]
        if pid is not None:
            used = _number(fields[2]) if len(fields) > 2 else None
            out.append(Holder(pid, fields[0] or "?", used))
    return out


def parse_rocm_vram(text: str | None) -> list[GpuMemory]:
    """``rocm-smi --showmeminfo vram --json``: ``{"card0": {"VRAM Total Memory (B)": "…",
    "VRAM Total Used Memory (B)": "…"}}``."""
    data = _json(text)
    out: list[GpuMemory] = []
    for card, values in data.items() if isinstance(data, Mapping) else ():
        index = numeric_name(str(card)[4:]) if str(card).startswith("card") else None
        if index is None or not isinstance(values, Mapping):
            continue
        total = _number(values.get("VRAM Total Memory (B)"))
        used = _number(values.get("VRAM Total Used Memory (B)"))
        if total is not None and used is not None:
            out.append(GpuMemory(index, used, total, "rocm-smi"))
    return out


# --------------------------------------------------------------------------- sources


def nvidia_memory(tools: ToolRunner) -> list[GpuMemory]:
    return parse_nvidia_gpus(tools(list(NVIDIA_GPUS)))


def amd_memory(root: Path, tools: ToolRunner) -> list[GpuMemory]:
    """From sysfs (``sys/class/drm/cardN/device/mem_info_vram_{used,total}``), else rocm-smi."""
    out: list[GpuMemory] = []
    try:
        cards = sorted((root / "sys/class/drm").iterdir())
    except OSError:
        cards = []
    for card in cards:
        index = numeric_name(card.name[4:]) if re.fullmatch(r"card\d+", card.name) else None
        vendor = read_host_text(card / "device/vendor")
        if vendor is None or vendor.strip().lower() != AMD_VENDOR:
            continue
        used = read_host_text(card / "device/mem_info_vram_used")
        total = read_host_text(card / "device/mem_info_vram_total")
        u = host_int(used, maximum=_MAX_VALUE) if used is not None else None
        t = host_int(total, maximum=_MAX_VALUE) if total is not None else None
        if index is not None and u is not None and t:
            out.append(GpuMemory(index, u, t, "sysfs"))
    return out or parse_rocm_vram(tools(list(ROCM_VRAM)))


def amd_holders(tools: ToolRunner) -> list[Holder]:
    return parse_amd_smi(tools(list(AMD_PROCESSES))) or parse_rocm_pids(tools(list(ROCM_PIDS)))


def open_holders(
    root: Path, nodes: Iterable[str], exclude: Iterable[int] = ()
) -> list[tuple[int, str, str]]:
    """(pid, command, node) for each process with one of ``nodes`` open, read from proc/*/fd."""
    wanted = set(nodes)
    skip = set(exclude)
    found: list[tuple[int, str, str]] = []
    try:
        pids = sorted(n for p in (root / "proc").iterdir() if (n := numeric_name(p.name)))
    except OSError:
        return found
    for pid in pids:
        if pid in skip:
            continue
        try:
            fds = list((root / "proc" / str(pid) / "fd").iterdir())
        except OSError:
            continue  # gone, or not ours to look at
        targets: set[str] = set()
        for fd in fds:
            try:
                targets.add(os.readlink(fd))
            except OSError:
                continue
        hits = sorted(targets & wanted)
        if hits:
            text = read_host_text(root / "proc" / str(pid) / "comm")
            comm = "?" if text is None else text.strip()
            found.extend((pid, comm, node) for node in hits)
    return found


def by_pid(found: Iterable[tuple[int, str, str]]) -> list[Holder]:
    """:func:`open_holders`' rows, one :class:`Holder` per process."""
    seen: dict[int, Holder] = {}
    for pid, comm, _node in found:
        seen.setdefault(pid, Holder(pid, comm))
    return list(seen.values())


def describe(holders: Sequence[Holder]) -> str:
    """The holders, most memory first, at most :data:`MAX_NAMED` by name."""
    ordered = sorted(holders, key=lambda h: (-(h.used or 0), h.pid))
    text = ", ".join(h.text for h in ordered[:MAX_NAMED])
    rest = len(ordered) - MAX_NAMED
    return text + (f" and {rest} more" if rest > 0 else "")


def _norm(uuid: Any) -> str:
    """A GPU UUID as compared: lower case, without ``GPU-`` (torch leaves it out)."""
    text = str(uuid or "").strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def no_tools(_argv: Sequence[str]) -> str | None:
    return None


def _is_worker(root: Path, pid: int) -> bool:
    text = read_host_text(root / "proc" / str(pid) / "cmdline", 4096)
    return text is not None and WORKER_FILE in text


def _unique(holders: Iterable[Holder]) -> list[Holder]:
    seen: dict[int, Holder] = {}
    for h in holders:
        if h.pid not in seen or (h.used or 0) > (seen[h.pid].used or 0):
            seen[h.pid] = h
    return list(seen.values())


# --------------------------------------------------------------------------- doctor


def gpu_memory(
    vendor: str, root: Path, tools: ToolRunner, exclude: Iterable[int] = ()
) -> list[tuple[GpuMemory, list[Holder]]]:
    """Each ``vendor`` GPU's memory, with who holds it when it is busy (``exclude``: pids
    that are not "other processes")."""
    skip = set(exclude)
    out: list[tuple[GpuMemory, list[Holder]]] = []
    if vendor == "nvidia":
        gpus = nvidia_memory(tools)
        apps = parse_nvidia_apps(tools(list(NVIDIA_APPS))) if any(g.busy for g in gpus) else []
        for gpu in gpus:
            named = [h for h in apps if _norm(h.gpu) == _norm(gpu.uuid)] if gpu.busy else []
            if gpu.busy and not named:
                named = by_pid(open_holders(root, {f"/dev/nvidia{gpu.index}"}))
            out.append((gpu, [h for h in named if h.pid not in skip]))
    elif vendor == "amd":
        gpus = amd_memory(root, tools)
        named = _amd_named(root, tools) if any(g.busy for g in gpus) else []
        out = [(g, [h for h in named if h.pid not in skip] if g.busy else []) for g in gpus]
    return out


def _amd_named(root: Path, tools: ToolRunner) -> list[Holder]:
    """Every process using an AMD GPU: amd-smi lists each under every GPU with its whole
    VRAM, rocm-smi does not say which GPU, so they are not split by GPU."""
    named = _unique(amd_holders(tools))
    if named:
        return named
    nodes = {"/dev/kfd"}
    with contextlib.suppress(OSError):
        nodes |= {
            f"/dev/dri/{p.name}"
            for p in (root / "dev/dri").iterdir()
            if p.name.startswith("renderD")
        }
    return by_pid(open_holders(root, nodes))


# --------------------------------------------------------------------------- probe


def nvidia_target(
    device: Mapping[str, Any], visible: str | None, gpus: Sequence[GpuMemory]
) -> GpuMemory | None:
    """The nvidia-smi GPU that the worker's device is: by the UUID torch gave, else by
    ``CUDA_VISIBLE_DEVICES`` (indexes, or UUIDs that may be shortened) at the device's
    position, else by its index."""
    want = _norm(device.get("uuid"))
    if want:
        return next((g for g in gpus if _norm(g.uuid) == want), None)
    i = device.get("index")
    if not isinstance(i, int):
        return None
    if visible is not None and visible.strip():
        entries = [e.strip() for e in visible.split(",")]
        if i >= len(entries):
            return None
        entry = entries[i]
        if entry.isdigit():
            return next((g for g in gpus if g.index == int(entry)), None)
        found = [g for g in gpus if _norm(entry) and _norm(g.uuid).startswith(_norm(entry))]
        return found[0] if len(found) == 1 else None
    return next((g for g in gpus if g.index == i), None)


def _nvidia_probe(
    devices: Sequence[Mapping[str, Any]], visible: str | None, root: Path, tools: ToolRunner
) -> list[Holder]:
    gpus = nvidia_memory(tools)
    targets = [nvidia_target(d, visible, gpus) for d in devices]
    uuids = {_norm(t.uuid) for t in targets if t is not None and t.uuid}
    named = [h for h in parse_nvidia_apps(tools(list(NVIDIA_APPS))) if _norm(h.gpu) in uuids]
    if named:
        return named
    indexes = {t.index for t in targets if t is not None} or {
        d["index"] for d in devices if isinstance(d.get("index"), int) and not visible
    }
    return by_pid(open_holders(root, {f"/dev/nvidia{i}" for i in indexes}))


def probe_holders(
    data: Mapping[str, Any], *, tools: ToolRunner | None = None, root: Path = Path("/")
) -> str:
    """Who holds the busy devices the probe's memory step reported (its ``data``: the
    devices, the worker's pid, vendor and ``*_VISIBLE_DEVICES``), and those short of
    ``--require-free`` that others hold some of, as one line; "" when there are none or no
    one can be named. The probe's own worker is never named."""
    devices = [
        d
        for d in data.get("devices") or ()
        if isinstance(d, Mapping) and (d.get("busy") or (d.get("short") and d.get("others")))
    ]
    if not devices:
        return ""
    run = tools if tools is not None else tool_runner() if root == Path("/") else no_tools
    given = data.get("visible")
    visible: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    if data.get("vendor") == "amd":
        found = _amd_named(root, run)
    else:
        found = _nvidia_probe(devices, visible.get("CUDA_VISIBLE_DEVICES"), root, run)
    skip = {data.get("pid"), os.getpid()}
    return describe(
        [h for h in _unique(found) if h.pid not in skip and not _is_worker(root, h.pid)]
    )
