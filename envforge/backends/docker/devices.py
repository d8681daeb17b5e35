"""How a container sees this host's GPUs: device flags for the SDK and the CLI (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envforge.backends.docker.cdi import CDI_ROOTS, CdiInventory, scan
from envforge.backends.docker.identity import EngineIdentity

#: How the GPUs reach the container: raw device nodes, CDI names, Docker's GPU request.
DevicePath = Literal["none", "raw", "cdi", "request"]

#: /dev/shm size when host IPC is not wanted (Docker's default 64 MB kills multi-worker
#: DataLoaders with "bus error", pytorch/pytorch#5040).
DEFAULT_SHM_SIZE = "8g"


@dataclass(frozen=True)
class SharedMemory:
    """Host IPC (default), or a private /dev/shm of ``size`` (``--shm-size SIZE``)."""

    host_ipc: bool = True
    size: str = DEFAULT_SHM_SIZE

    @classmethod
    def sized(cls, size: str | None) -> SharedMemory:
        return cls() if size is None else cls(host_ipc=False, size=size)


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
    #: CDI names (``nvidia.com/gpu=all``) requested instead of raw nodes / a GPU request.
    cdi_devices: tuple[str, ...] = ()
    #: Private /dev/shm size when not sharing the host's IPC namespace.
    shm_size: str | None = None
    #: Which engine the flags are for: Docker takes CDI names as a device request with the
    #: ``cdi`` driver, Podman as device names.
    engine: str = "docker"
    path: DevicePath = "none"
    #: Why this path (doctor prints it).
    reason: str = ""

    def sdk_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``containers.create``."""
        kwargs: dict[str, Any] = {}
        devices = [f"{d}:{d}:rwm" for d in self.devices]
        if self.cdi_devices and self.engine == "podman":
            devices += list(self.cdi_devices)
        if devices:
            kwargs["devices"] = devices
        if self.group_add:
            kwargs["group_add"] = list(self.group_add)
        if self.security_opt:
            kwargs["security_opt"] = list(self.security_opt)
        if self.ipc_mode:
            kwargs["ipc_mode"] = self.ipc_mode
        if self.shm_size:
            kwargs["shm_size"] = self.shm_size
        requests: list[Any] = []
        if self.gpu_request or (self.cdi_devices and self.engine != "podman"):
            from docker.types import DeviceRequest  # noqa: PLC0415 - this module stays SDK-free

            if self.gpu_request:
                requests.append(DeviceRequest(count=-1, capabilities=[["gpu"]]))
            if self.cdi_devices and self.engine != "podman":
                requests.append(DeviceRequest(driver="cdi", device_ids=list(self.cdi_devices)))
        if requests:
            kwargs["device_requests"] = requests
        return kwargs

    def cli_args(self) -> list[str]:
        """The same flags for ``docker run`` (the CLI turns a CDI ``--device`` into a request)."""
        args: list[str] = []
        for d in (*self.devices, *self.cdi_devices):
            args += ["--device", d]
        for g in self.group_add:
            args += ["--group-add", g]
        for s in self.security_opt:
            args += ["--security-opt", s]
        if self.ipc_mode:
            args += [f"--ipc={self.ipc_mode}"]
        if self.shm_size:
            args += ["--shm-size", self.shm_size]
        if self.gpu_request:
            args += ["--gpus", "all"]
        return args


def _ipc(vendor_has_gpu: bool, shm: SharedMemory) -> dict[str, Any]:
    if not vendor_has_gpu:
        return {}
    return {"ipc_mode": "host"} if shm.host_ipc else {"shm_size": shm.size}


def device_flags(
    vendor: str,
    *,
    dev_root: Path = Path("/dev"),
    proc_root: Path = Path("/proc"),
    engine: EngineIdentity | None = None,
    cdi: CdiInventory | None = None,
    cdi_roots: Sequence[Path] = CDI_ROOTS,
    shm: SharedMemory = SharedMemory(),
) -> DeviceFlags:
    """Device flags for a recipe of ``vendor`` on this host (roots are parameters for tests).

    AMD (``/dev/kfd`` present): ``/dev/kfd`` and ``/dev/dri``, the ``video`` group and the
    numeric group owning ``/dev/dri/renderD*``, seccomp unconfined. NVIDIA
    (``/dev/nvidiactl`` or ``/proc/driver/nvidia``): a request for all GPUs. Both get host
    IPC, or a private ``/dev/shm`` of ``shm.size`` when ``shm.host_ipc`` is False.

    When ``engine`` supports CDI and a CDI spec names the vendor's GPUs (``amd.com/gpu``,
    ``nvidia.com/gpu``), the devices are requested by CDI name instead of raw nodes or a
    GPU request. Podman ignores Docker's GPU request (containers/podman#22645): NVIDIA on
    Podman is CDI or nothing. Rootless Podman passes the user's own groups
    (``keep-groups``) instead of numeric gids it cannot map. A ``none`` recipe, or a host
    without that vendor's devices, gets no flags (the probe then reports ``no-device``).
    """
    eng = engine or EngineIdentity()
    if vendor not in ("amd", "nvidia"):
        return DeviceFlags(engine=eng.kind)
    inventory = cdi if cdi is not None else scan(cdi_roots)
    cdi_name = inventory.request_for(vendor)
    use_cdi = eng.cdi and cdi_name is not None
    if cdi_name is None:
        why_not = f"no CDI spec names {vendor} GPUs"
    elif not eng.cdi:
        why_not = f"CDI spec at {inventory.where(vendor)}, but {eng.cdi_reason}"
    else:
        why_not = ""
    cdi_why = f"{cdi_name} (spec {inventory.where(vendor)}; {eng.cdi_reason})"

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
        groups: tuple[str, ...] = ("video", *gids)
        if eng.kind == "podman" and eng.rootless:
            groups = ("keep-groups",)
        common: dict[str, Any] = {
            "vendor": "amd",
            "group_add": groups,
            "security_opt": ("seccomp=unconfined",),
            "gpu_count": len(render_nodes),
            "engine": eng.kind,
            **_ipc(True, shm),
        }
        if use_cdi:
            assert cdi_name is not None
            return DeviceFlags(
                cdi_devices=(cdi_name,), path="cdi", reason=f"CDI: {cdi_why}", **common
            )
        return DeviceFlags(
            devices=tuple(devices),
            path="raw",
            reason=f"raw device nodes {', '.join(devices)} ({why_not})",
            **common,
        )
    if vendor == "nvidia" and (
        (dev_root / "nvidiactl").exists() or (proc_root / "driver" / "nvidia").exists()
    ):
        gpus_dir = proc_root / "driver" / "nvidia" / "gpus"
        count = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
        if count == 0:
            count = sum(1 for p in dev_root.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))
        common = {"vendor": "nvidia", "gpu_count": count, "engine": eng.kind, **_ipc(True, shm)}
        if use_cdi:
            assert cdi_name is not None
            return DeviceFlags(
                cdi_devices=(cdi_name,), path="cdi", reason=f"CDI: {cdi_why}", **common
            )
        if eng.kind == "podman":
            todo = (
                "generate one with `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"
                if cdi_name is None
                else "use Podman 5 or later, or Docker"
            )
            return DeviceFlags(
                path="none",
                reason=(
                    "Podman ignores Docker's GPU request (containers/podman#22645) and "
                    f"{why_not}: {todo}"
                ),
                **common,
            )
        return DeviceFlags(
            gpu_request=True,
            path="request",
            reason=f"Docker GPU request (--gpus all, NVIDIA container toolkit) ({why_not})",
            **common,
        )
    return DeviceFlags(engine=eng.kind)
