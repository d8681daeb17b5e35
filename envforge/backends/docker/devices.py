"""How a container sees this host's GPUs: device flags for the SDK and the CLI (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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

            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
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
            args += ["--gpus", "all"]
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
