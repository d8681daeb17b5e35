"""``--gpu INDEX[,INDEX]|all`` (issue 10 §4): the pure selection and device-flag logic on
fixture trees, and the commands through main() (no engine: refusals and the probe's env)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

import envforge.cli.running
import envforge.host.detect
from envforge.backends.docker.containers import container_kwargs, sdk_kwargs
from envforge.backends.docker.shell import shell_env
from envforge.cli import main
from envforge.container.devices import (
    DeviceFlags,
    GpuPick,
    device_flags,
    parse_gpu_spec,
    pick_gpus,
    select_devices,
    visible_env,
)
from envforge.errors import InvalidInput
from envforge.host.detect import OVERRIDE_VARS, HostInfo, detect
from tests.helpers import paths

SYSFS = paths.TESTS / "fixtures" / "sysfs"
MI300X = SYSFS / "mi300x"  # 8 AMD GPUs, one arch
H100X2 = SYSFS / "h100x2"  # 2 NVIDIA GPUs, one arch
MIXED = SYSFS / "mixed-rx7900xtx-rx6700xt"  # gfx1100 + gfx1031


def no_tools(_argv: Sequence[str]) -> str | None:
    return None


def host_of(root: Path) -> HostInfo:
    return detect(root=root, environ={}, tools=no_tools)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OVERRIDE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    for name in ("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NPROC_PER_NODE"):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- pure


def test_parse_gpu_spec() -> None:
    assert parse_gpu_spec("all") is None
    assert parse_gpu_spec(" ALL ") is None
    assert parse_gpu_spec("0,2") == (0, 2)
    assert parse_gpu_spec("1, 1") == (1,)
    for bad in ("", "x", "-1", "0,", "1.5", "0;1"):
        with pytest.raises(InvalidInput, match="expected INDEX"):
            parse_gpu_spec(bad)


def test_amd_selection_passes_kfd_and_only_the_chosen_render_nodes() -> None:
    host = host_of(MI300X)
    pick = pick_gpus("2,5", host.gpus, "amd")
    assert pick.indexes == (2, 5)
    assert pick.ordinals == (2, 5)
    assert pick.render_nodes == ("/dev/dri/renderD144", "/dev/dri/renderD168")
    assert pick.arch == "gfx942"
    dev = MI300X / "dev"
    full = device_flags("amd", dev_root=dev, proc_root=MI300X / "proc")
    assert str(dev / "dri") in full.devices  # all GPUs without --gpu
    flags = select_devices(full, pick, dev_root=dev)
    assert flags.devices == (
        str(dev / "kfd"),
        str(dev / "dri" / "renderD144"),
        str(dev / "dri" / "renderD168"),
    )
    assert flags.gpu_count == 2
    assert dict(flags.env) == {"ROCR_VISIBLE_DEVICES": "0,1", "NPROC_PER_NODE": "2"}
    assert str(dev / "dri") not in flags.cli_args()
    assert flags.security_opt == full.security_opt
    assert flags.ipc_mode == full.ipc_mode
    # On the host (venv, probe) the host's numbering is kept.
    assert visible_env(pick, container=False) == {
        "ROCR_VISIBLE_DEVICES": "2,5",
        "NPROC_PER_NODE": "2",
    }


def test_nvidia_selection_requests_device_ids() -> None:
    host = host_of(H100X2)
    pick = pick_gpus("1", host.gpus, "nvidia")
    flags = select_devices(
        device_flags("nvidia", dev_root=H100X2 / "dev", proc_root=H100X2 / "proc"), pick
    )
    assert flags.device_ids == ("1",)
    assert flags.gpu_count == 1
    (request,) = sdk_kwargs(flags)["device_requests"]
    assert request["DeviceIDs"] == ["1"]
    assert request["Count"] == 0  # the engine refuses a count beside device ids
    assert flags.cli_args() == ["--ipc=host", "--gpus", '"device=1"']  # NVIDIA: host IPC too
    assert dict(flags.env) == {"CUDA_VISIBLE_DEVICES": "0", "NPROC_PER_NODE": "1"}
    assert visible_env(pick, container=False) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "1",
        "NPROC_PER_NODE": "1",
    }
    both = select_devices(
        device_flags("nvidia", dev_root=H100X2 / "dev"), pick_gpus("all", host.gpus, "nvidia")
    )
    assert both.device_ids == ("0", "1")
    assert both.cli_args() == ["--ipc=host", "--gpus", '"device=0,1"']
    assert dict(both.env)["NPROC_PER_NODE"] == "2"


def test_without_selection_the_request_is_for_all_gpus() -> None:
    flags = device_flags("nvidia", dev_root=H100X2 / "dev", proc_root=H100X2 / "proc")
    assert flags.device_ids == ()
    assert flags.env == ()
    (request,) = sdk_kwargs(flags)["device_requests"]
    assert request["Count"] == -1


def test_index_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        pick_gpus("1,8", host_of(MI300X).gpus, "amd")
    assert "no GPU 8 on this host (envforge detect numbers them 0..7)" in err.value.one_line()
    with pytest.raises(InvalidInput, match="no GPU detected"):
        pick_gpus("0", (), "amd")


def test_selection_spanning_archs_is_refused_naming_them() -> None:
    gpus = host_of(MIXED).gpus
    for spec in ("all", "0,1"):
        with pytest.raises(InvalidInput) as err:
            pick_gpus(spec, gpus, "amd")
        line = err.value.one_line()
        assert "gfx1100 (GPU 0)" in line
        assert "gfx1031 (GPU 1)" in line
        assert "--gpu 0 for gfx1100; --gpu 1 for gfx1031" in line
    one = pick_gpus("1", gpus, "amd")
    assert (one.indexes, one.ordinals, one.arch) == ((1,), (1,), "gfx1031")
    assert one.render_nodes == ("/dev/dri/renderD129",)


def test_gpu_of_another_vendor_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"GPU 0 is nvidia .* needs amd"):
        pick_gpus("0", host_of(H100X2).gpus, "amd")
    with pytest.raises(InvalidInput, match="no amd GPU"):
        pick_gpus("all", host_of(H100X2).gpus, "amd")


def test_the_container_env_carries_the_selection() -> None:
    host = host_of(MI300X)
    dev = MI300X / "dev"
    flags = select_devices(
        device_flags("amd", dev_root=dev, proc_root=MI300X / "proc"),
        pick_gpus("3", host.gpus, "amd"),
        dev_root=dev,
    )
    env = shell_env({"HSA_OVERRIDE_GFX_VERSION": "9.4.2"}, flags)
    assert env["ROCR_VISIBLE_DEVICES"] == "0"
    assert env["NPROC_PER_NODE"] == "1"
    kwargs = container_kwargs(env={"A": "1"}, flags=flags)
    assert kwargs["environment"] == {"A": "1", "ROCR_VISIBLE_DEVICES": "0", "NPROC_PER_NODE": "1"}
    assert container_kwargs(env={"A": "1"}, flags=DeviceFlags())["environment"] == {"A": "1"}


# --------------------------------------------------------------------------- CLI


def _two_amd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_VENDOR", "amd")
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1100")
    monkeypatch.setenv("ENVFORGE_GPU_COUNT", "2")


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "auto", "--gpu", "2"],
        ["shell", "auto", "--gpu", "2", "--", "true"],
        ["probe", "--gpu", "2"],
        ["probe", "--recipe", "gfx1100", "--gpu", "2"],
        ["certify", "gfx1100", "--gpu", "2"],
    ],
)
def test_commands_refuse_an_index_out_of_range_in_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_amd(monkeypatch)
    if argv[0] == "certify":  # certify connects first: stand in for the engine's absence
        pytest.importorskip("docker")
        from envforge.backends.docker import engine

        # the CLI calls engine.connect through the module: the patch ends with the test
        monkeypatch.setattr(engine, "connect", lambda *_a, **_k: object())
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1, err
    assert "--gpu 2: no GPU 2 on this host (envforge detect numbers them 0..1)" in errors[0]


def test_auto_chooses_for_the_selected_gpu_and_refuses_mixed_archs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = functools.partial(detect, root=MIXED, tools=no_tools)
    monkeypatch.setattr(envforge.host.detect, "detect", mixed)
    monkeypatch.setattr(envforge.cli.running, "detect", mixed)  # build's --gpu reads it
    assert main(["build", "auto", "--gpu", "all", "--backend", "venv"]) == 2
    err = capsys.readouterr().err
    assert "gfx1100 (GPU 0)" in err
    assert "gfx1031 (GPU 1)" in err
    assert "select one arch per run: --gpu 0 for gfx1100; --gpu 1 for gfx1031" in err
    # GPU 1 alone: auto chooses for it (gfx1031), not for GPU 0 (stops at --tag: no build).
    assert main(["build", "auto", "--gpu", "1", "--backend", "venv", "--tag", "x:y"]) == 2
    err = capsys.readouterr().err
    assert "envforge: auto -> gfx1031: " in err
    assert "envforge: --gpu 1: GPU 1 (gfx1031), NPROC_PER_NODE=1" in err
    assert "--tag: only for --backend docker" in err
    # A named recipe of one arch with a selection of the other arch's GPU is its user's call;
    # a selection spanning both is refused for it too.
    assert main(["shell", "gfx1100", "--gpu", "0,1", "--", "true"]) == 2
    assert "one stack cannot serve them all" in capsys.readouterr().err


def test_probe_worker_gets_the_selection_in_its_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _two_amd(monkeypatch)
    check = tmp_path / "check_env.py"
    check.write_text(
        "import os\n"
        "seen = os.environ.get('ROCR_VISIBLE_DEVICES'), os.environ.get('NPROC_PER_NODE')\n"
        "assert seen == ('1', '1'), seen\n",
        encoding="utf-8",
    )
    code = main(["probe", "--level", "quick", "--gpu", "1", "--check", str(check), "--json"])
    captured = capsys.readouterr()
    assert "--gpu 1: GPU 1 (gfx1100), NPROC_PER_NODE=1" in captured.err
    steps = {s["name"]: s for s in json.loads(captured.out)["steps"]}
    check_step = next(s for name, s in steps.items() if "check_env" in name)
    assert check_step["status"] == "pass", check_step
    assert code in (0, 1)  # the CPU-only machine decides the other steps


def test_cdi_names_are_narrowed_to_the_selection() -> None:
    """With CDI (doctor's device path "cdi"), ``--gpu`` picks CDI names, not all GPUs."""
    flags = DeviceFlags(
        vendor="nvidia", gpu_count=2, cdi_devices=("nvidia.com/gpu=all",), path="cdi"
    )
    pick = GpuPick(indexes=(1,), vendor="nvidia", ordinals=(1,), render_nodes=(), arch="sm_90")
    narrowed = select_devices(flags, pick)
    assert narrowed.cdi_devices == ("nvidia.com/gpu=1",)
    assert narrowed.gpu_count == 1
    assert dict(narrowed.env) == {"CUDA_VISIBLE_DEVICES": "0", "NPROC_PER_NODE": "1"}
