"""How a container sees this host's GPUs: device flags for the SDK and the CLI (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envforge.errors import InvalidInput

if TYPE_CHECKING:
    from envforge.detect import GpuInfo


@dataclass(frozen=True)
class DeviceFlags:
    """How a container sees this host's GPUs (the same for probe and shell)."""

    vendor: str = "none"
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc_mode: str | None = None
    gpu_request: bool = False
    gpu_count: int = 0
    #: ``--gpu``: the NVIDIA GPUs requested by index (empty: all of them).
    device_ids: tuple[str, ...] = ()
    #: ``--gpu``: variables the container gets (ROCR_/CUDA_VISIBLE_DEVICES, NPROC_PER_NODE).
    env: tuple[tuple[str, str], ...] = ()

    def sdk_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``containers.create``."""
        kwargs: dict[str, Any] = {}
        if self.devices:
            kwargs["devices"] = [f"{d}:{d}:rwm" for d in self.devices]
        if self.group_add:
            kwargs["group_add"] = list(self.group_add)
        if self.security_opt:
            kwargs["security_opt"] = list(self.security_opt)
        if self.ipc_mode:
            kwargs["ipc_mode"] = self.ipc_mode
        if self.gpu_request:
            from docker.types import DeviceRequest  # noqa: PLC0415 - this module stays SDK-free

            kwargs["device_requests"] = [_device_request(DeviceRequest, self.device_ids)]
        return kwargs

    def cli_args(self) -> list[str]:
        """The same flags for ``docker run``."""
        args: list[str] = []
        for d in self.devices:
            args += ["--device", d]
        for g in self.group_add:
            args += ["--group-add", g]
        for s in self.security_opt:
            args += ["--security-opt", s]
        if self.ipc_mode:
            args += [f"--ipc={self.ipc_mode}"]
        if self.gpu_request:
            args += ["--gpus", _gpus_value(self.device_ids)]
        return args


def device_flags(
    vendor: str,
    *,
    dev_root: Path = Path("/dev"),
    proc_root: Path = Path("/proc"),
) -> DeviceFlags:
    """Device flags for a recipe of ``vendor`` on this host (roots are parameters for tests).

    AMD (``/dev/kfd`` present): ``/dev/kfd`` and ``/dev/dri``, the ``video`` group and the
    numeric group owning ``/dev/dri/renderD*``, seccomp unconfined, host IPC. NVIDIA
    (``/dev/nvidiactl`` or ``/proc/driver/nvidia``): a request for all GPUs. A ``none``
    recipe, or a host without that vendor's devices, gets no flags (the probe then
    reports ``no-device`` for a GPU recipe).
    """
    if vendor == "amd" and (dev_root / "kfd").exists():
        dri = dev_root / "dri"
        render_nodes = sorted(dri.glob("renderD*")) if dri.is_dir() else []
        gids: list[str] = []
        for node in render_nodes:
            try:
                gid = str(node.stat().st_gid)
            except OSError:
                continue
            if gid not in gids:
                gids.append(gid)
        devices = [str(dev_root / "kfd")]
        if dri.is_dir():
            devices.append(str(dri))
        return DeviceFlags(
            vendor="amd",
            devices=tuple(devices),
            group_add=("video", *gids),
            security_opt=("seccomp=unconfined",),
            ipc_mode="host",
            gpu_count=len(render_nodes),
        )
    if vendor == "nvidia" and (
        (dev_root / "nvidiactl").exists() or (proc_root / "driver" / "nvidia").exists()
    ):
        gpus_dir = proc_root / "driver" / "nvidia" / "gpus"
        count = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
        if count == 0:
            count = sum(1 for p in dev_root.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))
        return DeviceFlags(vendor="nvidia", gpu_request=True, gpu_count=count)
    return DeviceFlags()


# --------------------------------------------------------------------------- --gpu (issue 10 §4)


def _device_request(factory: Any, device_ids: tuple[str, ...]) -> Any:
    """All GPUs (count -1), or those of ``device_ids`` (the engine refuses both at once)."""
    if device_ids:
        return factory(device_ids=list(device_ids), capabilities=[["gpu"]])
    return factory(count=-1, capabilities=[["gpu"]])


def _gpus_value(device_ids: tuple[str, ...]) -> str:
    """``docker run --gpus`` value; a list is CSV-quoted (``"device=0,1"``)."""
    return f'"device={",".join(device_ids)}"' if device_ids else "all"


@dataclass(frozen=True)
class GpuPick:
    """The GPUs ``--gpu INDEX[,INDEX]|all`` selects, in ``envforge detect``'s numbering."""

    #: ``envforge detect``'s indexes.
    indexes: tuple[int, ...]
    vendor: str
    #: Each GPU's place among the host's GPUs of its vendor (ROCr's and CUDA's numbering
    #: on the host, the NVIDIA container toolkit's device index).
    ordinals: tuple[int, ...]
    #: AMD: the chosen render nodes (``/dev/dri/renderD129``), host paths.
    render_nodes: tuple[str, ...]
    arch: str | None

    @property
    def count(self) -> int:
        return len(self.indexes)


def parse_gpu_spec(text: str) -> tuple[int, ...] | None:
    """``all`` → None; ``0,2`` → (0, 2); anything else is a one-line error (exit 2)."""
    value = text.strip().lower()
    if value == "all":
        return None
    out: list[int] = []
    for raw in value.split(","):
        part = raw.strip()
        if not part.isdigit():
            raise InvalidInput(
                f"--gpu {text!r}: expected INDEX[,INDEX...] or all",
                hint="envforge detect numbers the GPUs; e.g. --gpu 0,1 or --gpu all",
            )
        if int(part) not in out:
            out.append(int(part))
    return tuple(out)


def pick_gpus(text: str, gpus: Sequence[GpuInfo], vendor: str | None = None) -> GpuPick:
    """Resolve ``--gpu`` against the detected ``gpus``. Refused (exit 2, one line): an
    index out of range, a GPU of another vendor than ``vendor`` (the recipe's), and a
    selection spanning archs (one stack cannot serve them: one selection per arch)."""
    wanted = parse_gpu_spec(text)
    if not gpus:
        raise InvalidInput(
            f"--gpu {text}: no GPU detected", hint="drop --gpu (envforge detect lists the GPUs)"
        )
    by_index = {g.index: g for g in gpus}
    if wanted is None:
        chosen = [g for g in gpus if vendor in (None, "none") or g.vendor == vendor]
        if not chosen:
            raise InvalidInput(
                f"--gpu all: no {vendor} GPU on this host", hint="envforge detect lists the GPUs"
            )
    else:
        last = max(by_index)
        bad = [i for i in wanted if i not in by_index]
        if bad:
            raise InvalidInput(
                f"--gpu {text}: no GPU {bad[0]} on this host (envforge detect numbers them "
                f"0..{last})",
                hint=f"pick indexes from 0 to {last}, or --gpu all",
            )
        chosen = [by_index[i] for i in wanted]
        other = [g for g in chosen if vendor not in (None, "none") and g.vendor != vendor]
        if other:
            g = other[0]
            raise InvalidInput(
                f"--gpu {text}: GPU {g.index} is {g.vendor} ({g.arch or '?'}), the recipe "
                f"needs {vendor}",
                hint="envforge detect lists the GPUs and their vendors",
            )
    archs: dict[str, list[int]] = {}
    for g in chosen:
        archs.setdefault(g.arch or "?", []).append(g.index)
    if len(archs) > 1:
        spans = ", ".join(f"{a} (GPU {','.join(map(str, ix))})" for a, ix in archs.items())
        per = "; ".join(f"--gpu {','.join(map(str, ix))} for {a}" for a, ix in archs.items())
        raise InvalidInput(
            f"--gpu {text} spans GPUs of different archs: {spans}; one stack cannot serve "
            "them all",
            hint=f"select one arch per run: {per}",
        )
    ordinals: list[int] = []
    nodes: list[str] = []
    for g in chosen:
        same = [h.index for h in gpus if h.vendor == g.vendor]
        ordinals.append(same.index(g.index))
        nodes += [n for n in g.device_nodes if n.startswith("/dev/dri/renderD")]
    return GpuPick(
        indexes=tuple(g.index for g in chosen),
        vendor=chosen[0].vendor,
        ordinals=tuple(ordinals),
        render_nodes=tuple(nodes),
        arch=chosen[0].arch,
    )


def visible_env(pick: GpuPick, *, container: bool) -> dict[str, str]:
    """The variables that make only the picked GPUs visible, and ``NPROC_PER_NODE``.

    In a container only the picked GPUs are passed in (render nodes, device request), so
    the runtime numbers them from 0; on the host (venv, ``probe``) they keep the host's
    numbering (NVIDIA: PCI bus order, as ``envforge detect`` and nvidia-smi count).
    """
    numbers = range(pick.count) if container else pick.ordinals
    listed = ",".join(str(n) for n in numbers)
    env: dict[str, str] = {}
    if pick.vendor == "amd":
        env["ROCR_VISIBLE_DEVICES"] = listed
    elif pick.vendor == "nvidia":
        if not container:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = listed
    env["NPROC_PER_NODE"] = str(pick.count)
    return env


def select_devices(
    flags: DeviceFlags, pick: GpuPick, *, dev_root: Path = Path("/dev")
) -> DeviceFlags:
    """``flags`` (from :func:`device_flags`) narrowed to the picked GPUs: AMD passes
    ``/dev/kfd`` and only the chosen render nodes (not all of ``/dev/dri``); NVIDIA
    requests the chosen device ids. Both carry :func:`visible_env` for the container."""
    env = tuple(visible_env(pick, container=True).items())
    if flags.vendor == "amd" and not pick.render_nodes:
        # Render nodes unknown (detected by a tool): all of /dev/dri, the host's numbering.
        host_env = tuple(visible_env(pick, container=False).items())
        return replace(flags, gpu_count=pick.count, env=host_env)
    if flags.vendor == "amd":
        nodes = [dev_root / n.removeprefix("/dev/") for n in pick.render_nodes]
        gids: list[str] = []
        for node in nodes:
            try:
                gid = str(node.stat().st_gid)
            except OSError:
                continue
            if gid not in gids:
                gids.append(gid)
        devices = [d for d in flags.devices if Path(d).name == "kfd"]
        devices += [str(n) for n in nodes]
        return replace(
            flags,
            devices=tuple(devices),
            group_add=("video", *gids),
            gpu_count=pick.count,
            env=env,
        )
    if flags.vendor == "nvidia":
        return replace(
            flags,
            device_ids=tuple(str(o) for o in pick.ordinals),
            gpu_count=pick.count,
            env=env,
        )
    return flags
