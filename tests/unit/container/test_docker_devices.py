"""Device flags from fixture /dev and /proc trees (no engine, no GPU needed)."""

from __future__ import annotations

from pathlib import Path

from envforge.backends.docker.containers import sdk_kwargs
from envforge.container.devices import (
    DEFAULT_SHM_SIZE,
    DeviceFlags,
    SharedMemory,
    device_flags,
)


def _amd_tree(root: Path, renders: int = 2) -> Path:
    dev = root / "dev"
    (dev / "dri").mkdir(parents=True)
    (dev / "kfd").write_text("")
    (dev / "dri" / "card0").write_text("")
    for i in range(renders):
        (dev / "dri" / f"renderD{128 + i}").write_text("")
    return dev


def test_amd_host_gets_kfd_dri_groups_seccomp_and_host_ipc(tmp_path: Path) -> None:
    dev = _amd_tree(tmp_path)
    gid = str((dev / "dri" / "renderD128").stat().st_gid)
    flags = device_flags("amd", dev_root=dev, proc_root=tmp_path / "proc")
    assert flags.vendor == "amd"
    assert flags.devices == (str(dev / "kfd"), str(dev / "dri"))
    assert flags.group_add == ("video", gid)  # one numeric gid, not repeated per node
    assert flags.security_opt == ("seccomp=unconfined",)
    assert flags.ipc_mode == "host"
    assert flags.gpu_count == 2
    kwargs = sdk_kwargs(flags)
    assert kwargs["devices"] == [f"{dev}/kfd:{dev}/kfd:rwm", f"{dev}/dri:{dev}/dri:rwm"]
    assert kwargs["group_add"] == ["video", gid]
    assert kwargs["security_opt"] == ["seccomp=unconfined"]
    assert kwargs["ipc_mode"] == "host"
    assert "device_requests" not in kwargs
    cli = flags.cli_args()
    assert cli[:4] == ["--device", f"{dev}/kfd", "--device", f"{dev}/dri"]
    assert "--ipc=host" in cli
    assert cli[cli.index("--security-opt") + 1] == "seccomp=unconfined"


def test_nvidia_host_gets_a_gpu_request(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").write_text("")
    gpus = tmp_path / "proc" / "driver" / "nvidia" / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (gpus / bus).mkdir(parents=True)
    flags = device_flags("nvidia", dev_root=dev, proc_root=tmp_path / "proc")
    assert flags.gpu_request
    assert flags.gpu_count == 3
    (request,) = sdk_kwargs(flags)["device_requests"]
    assert request["Count"] == -1
    assert request["Capabilities"] == [["gpu"]]
    # NVIDIA containers share the host's IPC namespace too (issue 14: 64 MB /dev/shm).
    assert flags.cli_args() == ["--ipc=host", "--gpus", "all"]
    assert flags.devices == ()


def test_nvidia_counted_from_device_nodes_without_proc(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-modeset"):
        (dev / name).write_text("")
    flags = device_flags("nvidia", dev_root=dev, proc_root=tmp_path / "proc")
    assert flags.gpu_request
    assert flags.gpu_count == 2


def test_no_device_flags_without_devices_or_for_cpu_recipes_but_a_real_dev_shm(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    # No GPU in the container: no devices, and a private /dev/shm of 8g instead of
    # Docker's 64 MB (a DataLoader with two workers needs more).
    shm_only = DeviceFlags(shm_size=DEFAULT_SHM_SIZE)
    assert DEFAULT_SHM_SIZE == "8g"
    assert device_flags("amd", dev_root=empty, proc_root=empty) == shm_only
    assert device_flags("nvidia", dev_root=empty, proc_root=empty) == shm_only
    dev = _amd_tree(tmp_path)
    # A CPU recipe on an AMD host: no devices (the container needs none).
    assert device_flags("none", dev_root=dev, proc_root=empty) == shm_only
    # An NVIDIA recipe on an AMD host: nothing to pass; the probe reports no-device.
    assert device_flags("nvidia", dev_root=dev, proc_root=empty) == shm_only
    # --shm-size is honoured for a cpu container too
    sized = device_flags("none", dev_root=dev, proc_root=empty, shm=SharedMemory.sized("2g"))
    assert sized.cli_args() == ["--shm-size", "2g"]
    assert sdk_kwargs(sized)["shm_size"] == "2g"
    assert sdk_kwargs(DeviceFlags()) == {}
    assert DeviceFlags().cli_args() == []
