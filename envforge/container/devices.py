"""How a container sees this host's GPUs: device flags for the SDK and the CLI (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from envforge.container.cdi import CDI_ROOTS, CdiInventory, scan
from envforge.container.identity import EngineIdentity
from envforge.errors import InvalidInput

if TYPE_CHECKING:
    from envforge.host.detect import GpuInfo
    from envforge.host.grant import Grant

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
    #: ``--gpu``: the NVIDIA GPUs requested by index (empty: all of them).
    device_ids: tuple[str, ...] = ()
    #: ``--gpu``: variables the container gets (ROCR_/CUDA_VISIBLE_DEVICES, NPROC_PER_NODE).
    env: tuple[tuple[str, str], ...] = ()

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
            args += ["--gpus", _gpus_value(self.device_ids)]
        return args


def _ipc(vendor_has_gpu: bool, shm: SharedMemory) -> dict[str, Any]:
    if not vendor_has_gpu:
        return {}
    return {"ipc_mode": "host"} if shm.host_ipc else {"shm_size": shm.size}


def render_gids(nodes: Sequence[Path]) -> list[str]:
    """The numeric groups owning ``nodes`` (each once, in order): the container gets them
    so a non-root user can open the render nodes whatever the group is called inside."""
    gids: list[str] = []
    for node in nodes:
        try:
            gid = str(node.stat().st_gid)
        except OSError:
            continue
        if gid not in gids:
            gids.append(gid)
    return gids


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
    A container without GPUs (a cpu recipe, or no device of the vendor here) gets a private
    ``/dev/shm`` of ``shm.size`` (8g, or ``--shm-size``): Docker's 64 MB default kills a
    DataLoader with two workers ("No space left on device").

    When ``engine`` supports CDI and a CDI spec names the vendor's GPUs (``amd.com/gpu``,
    ``nvidia.com/gpu``), the devices are requested by CDI name instead of raw nodes or a
    GPU request. Podman ignores Docker's GPU request (containers/podman#22645): NVIDIA on
    Podman is CDI or nothing. Rootless Podman passes the user's own groups
    (``keep-groups``) instead of numeric gids it cannot map. A ``none`` recipe, or a host
    without that vendor's devices, gets no device flags (the probe then reports
    ``no-device``).
    """
    eng = engine or EngineIdentity()
    if vendor not in ("amd", "nvidia"):
        return DeviceFlags(engine=eng.kind, shm_size=shm.size)
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
        gids = render_gids(render_nodes)
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
    return DeviceFlags(engine=eng.kind, shm_size=shm.size)


# --------------------------------------------------------------------------- --gpu (issue 10 §4)


def _gpus_value(device_ids: tuple[str, ...]) -> str:
    """``docker run --gpus`` value; a list is CSV-quoted (``"device=0,1"``)."""
    return f'"device={",".join(device_ids)}"' if device_ids else "all"


@dataclass(frozen=True)
class GpuPick:
    """The GPUs ``--gpu INDEX[,INDEX]|all`` selects, in ``envforge detect``'s numbering."""

    #: ``envforge detect``'s indexes.
    indexes: tuple[int, ...]
    vendor: str
    #: Each GPU's place among the node's GPUs of its vendor (ROCr's and CUDA's numbering
    #: on the node, the NVIDIA container toolkit's device index, CDI's name): what a
    #: container started by a daemon, outside a scheduler's job, is given.
    ordinals: tuple[int, ...]
    #: AMD: the chosen render nodes (``/dev/dri/renderD129``), host paths.
    render_nodes: tuple[str, ...]
    arch: str | None
    #: Inside a scheduler's job: the same GPUs as the job's own processes name them
    #: (``0,1`` under Slurm's ConstrainDevices; :mod:`envforge.host.grant`); () where
    #: they are named as the node names them (:attr:`ordinals`).
    job_visible: tuple[str, ...] = ()

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


def pick_gpus(
    text: str, gpus: Sequence[GpuInfo], vendor: str | None = None, grant: Grant | None = None
) -> GpuPick:
    """Resolve ``--gpu`` against the detected ``gpus``. Refused (exit 2, one line): an
    index out of range, a GPU of another vendor than ``vendor`` (the recipe's), and a
    selection spanning archs (one stack cannot serve them: one selection per arch).

    Inside a scheduler's job (``grant``) the pick carries both numberings
    (:meth:`Grant.translate`): the node's for a daemon's container, the job's for this
    job's processes; a GPU the job was not granted is refused where the job numbers its
    GPUs otherwise than the node (device cgroups: the job cannot open it)."""
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
            f"--gpu {text} spans GPUs of different archs: {spans}; one stack cannot serve them all",
            hint=f"select one arch per run: {per}",
        )
    ordinals: list[int] = []
    nodes: list[str] = []
    for g in chosen:
        same = [h.index for h in gpus if h.vendor == g.vendor]
        ordinals.append(same.index(g.index))
        nodes += [n for n in g.device_nodes if n.startswith("/dev/dri/renderD")]
    pick = GpuPick(
        indexes=tuple(g.index for g in chosen),
        vendor=chosen[0].vendor,
        ordinals=tuple(ordinals),
        render_nodes=tuple(nodes),
        arch=chosen[0].arch,
    )
    return pick if grant is None else _in_job(text, pick, gpus, grant)


def _in_job(text: str, pick: GpuPick, gpus: Sequence[GpuInfo], grant: Grant) -> GpuPick:
    """``pick`` with the job's numbering (:meth:`Grant.translate`)."""
    count = sum(1 for g in gpus if g.vendor == pick.vendor)
    both = grant.translate(pick.ordinals, count)
    if both is not None:
        return replace(pick, ordinals=both[0], job_visible=both[1])
    if grant.renumbered:
        raise InvalidInput(
            f"--gpu {text}: not among the GPUs the scheduler granted this job "
            f"({grant.describe()}); the job cannot open the others",
            hint="leave --gpu out (the grant is the default) or pick among the granted GPUs",
        )
    return pick


def granted_spec(grant: Grant, gpus: Sequence[GpuInfo], vendor: str | None = None) -> str:
    """The scheduler's grant as ``--gpu`` in ``envforge detect``'s numbering: the node's
    GRES indexes where detect lists every GPU of the node (sysfs, procfs), the job's own
    where it lists only the job's (a pod; ``nvidia-smi`` alone in a device cgroup).
    Refused (exit 2) when the grant fits neither."""
    if not gpus:
        return grant.gpus  # pick_gpus says "no GPU detected"
    kinds = {g.vendor for g in gpus}
    if vendor in (None, "none") and len(kinds) > 1:
        vendor = "amd" if grant.visible_variable.startswith(("ROCR", "HIP")) else "nvidia"
    same = [g for g in gpus if vendor in (None, "none") or g.vendor == vendor]
    numbers = grant.in_detected(len(same))
    if numbers is None:
        raise InvalidInput(
            f"the scheduler granted GPU {grant.describe()}, but envforge detect sees "
            f"{len(same)} {vendor or ''} GPU(s) here".replace("  ", " "),
            hint="pass --gpu to choose (envforge detect numbers the GPUs)",
        )
    return ",".join(str(same[n].index) for n in numbers)


def visible_env(pick: GpuPick, *, container: bool) -> dict[str, str]:
    """The variables that make only the picked GPUs visible, and ``NPROC_PER_NODE``.

    In a container only the picked GPUs are passed in (render nodes, device request), so
    the runtime numbers them from 0; on the host (venv, ``probe``) they keep the host's
    numbering (NVIDIA: PCI bus order, as ``envforge detect`` and nvidia-smi count), and
    inside a scheduler's job the job's own (:attr:`GpuPick.job_visible`: from 0 under
    Slurm's ConstrainDevices, https://slurm.schedmd.com/gres.html#GPU_Management).
    """
    numbers: Sequence[object] = range(pick.count)
    if not container:
        numbers = pick.job_visible or pick.ordinals
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
    if flags.cdi_devices:
        # CDI names the devices itself (``nvidia.com/gpu=0``): the chosen ones, by their
        # place among the vendor's GPUs, for every kind the flags requested.
        kinds = sorted({name.split("=", 1)[0] for name in flags.cdi_devices})
        names = tuple(f"{kind}={o}" for kind in kinds for o in pick.ordinals)
        return replace(flags, cdi_devices=names, gpu_count=pick.count, env=env)
    if flags.vendor == "amd" and not pick.render_nodes:
        # Render nodes unknown (detected by a tool): all of /dev/dri, the node's numbering
        # (the daemon starts the container outside any job's device cgroup).
        host_env = tuple(visible_env(replace(pick, job_visible=()), container=False).items())
        return replace(flags, gpu_count=pick.count, env=host_env)
    if flags.vendor == "amd":
        nodes = [dev_root / n.removeprefix("/dev/") for n in pick.render_nodes]
        gids = render_gids(nodes)
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
