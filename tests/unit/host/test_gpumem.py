"""GPU memory held by other processes (``envforge.host.gpumem``) and doctor's ``gpu-memory``.

The driver tools are stand-in executables on a private ``PATH`` (shell scripts printing
the output formats the real tools print: nvidia-smi's CSV, amd-smi's and rocm-smi's
JSON, as recorded on an H200 and an MI300X); sysfs and ``/proc`` are fixture trees.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envforge.doctor import diagnose
from envforge.host import gpumem
from envforge.host.detect import detect, no_tools
from envforge.host.doctor import Identity
from envforge.host.gpumem import GIB, MIB, GpuMemory, Holder
from envforge.host.hostinfo import ToolRunner
from tests.helpers import paths
from tests.helpers.recipes import make_recipe

SYSFS = paths.TESTS / "fixtures" / "sysfs"
UUID0 = "GPU-3f9b5e2c-8a41-6d7e-19f0-2b4c6d8e0a13"
UUID1 = "GPU-77c1d0aa-5e2f-4b9c-8d3e-0f1a2b3c4d5e"
#: nvidia-smi on an H200 another process fills (138.3 of 140.4 GiB), its neighbour idle.
NVIDIA_GPUS = f"0, {UUID0}, 141630, 143771\n1, {UUID1}, 4, 143771\n"
NVIDIA_APPS = f"{UUID0}, 4242, /usr/bin/python3, 141030\n{UUID0}, 5151, vllm, [N/A]\n"
#: amd-smi 6.x on an MI300X (process_info a string on an idle GPU).
AMD_PROCESSES = (
    '[{"gpu": 0, "process_list": [{"process_info": {"name": "llama-server", "pid": 28389, '
    '"memory_usage": {"gtt_mem": {"value": 0, "unit": "B"}, "cpu_mem": {"value": 1, '
    '"unit": "B"}, "vram_mem": {"value": 2353860608, "unit": "B"}}, "mem_usage": '
    '{"value": 2353860609, "unit": "B"}, "cu_occupancy": 0}}]}, '
    '{"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]}]'
)
ROCM_PIDS = '{"system": {"PID28389": "llama-server, 1, 2353860608, 11011, 0"}}'
ROCM_VRAM = (
    '{"card0": {"VRAM Total Memory (B)": "205822885888", '
    '"VRAM Total Used Memory (B)": "154654650368"}}'
)


def fake_tool(folder: Path, name: str, outputs: dict[str, str], *, sleep: float = 0) -> None:
    """An executable ``name`` printing ``outputs[first argument]`` (else exit 2); shell
    built-ins only, as ``PATH`` holds nothing but the stand-ins."""
    cases = "".join(
        f"  {arg!r}) printf '%s\\n' '{text.rstrip()}' ;;\n" for arg, text in outputs.items()
    )
    script = folder / name
    script.write_text(
        f"#!/bin/sh\n{f'/bin/sleep {sleep}' if sleep else ''}\n"
        f'case "$1" in\n{cases}  *) exit 2 ;;\nesac\n'
    )
    script.chmod(0o755)


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder


def nvidia_tools(folder: Path) -> ToolRunner:
    fake_tool(
        folder,
        "nvidia-smi",
        {
            "--query-gpu=index,uuid,memory.used,memory.total": NVIDIA_GPUS,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_memory": NVIDIA_APPS,
        },
    )
    return gpumem.tool_runner(environ={"PATH": str(folder)})


def fake_proc(root: Path, pid: int, comm: str, node: str, cmdline: str = "") -> None:
    fd = root / "proc" / str(pid) / "fd"
    fd.mkdir(parents=True)
    (fd / "7").symlink_to(node)
    (root / "proc" / str(pid) / "comm").write_text(comm + "\n")
    (root / "proc" / str(pid) / "cmdline").write_text(cmdline.replace(" ", "\0"))


# --------------------------------------------------------------------------- parsers


def test_nvidia_smi_csv_in_mib() -> None:
    gpus = gpumem.parse_nvidia_gpus(NVIDIA_GPUS)
    assert gpus[0] == GpuMemory(0, 141630 * MIB, 143771 * MIB, "nvidia-smi", UUID0)
    assert gpus[0].busy
    assert not gpus[1].busy
    assert "138.31 of 140.40 GiB in use (2.09 GiB free)" in gpus[0].text
    apps = gpumem.parse_nvidia_apps(NVIDIA_APPS)
    assert apps == [Holder(4242, "python3", 141030 * MIB, UUID0), Holder(5151, "vllm", None, UUID0)]
    assert gpumem.parse_nvidia_gpus("No devices were found\n") == []
    assert gpumem.parse_nvidia_apps("") == []


def test_amd_smi_and_rocm_smi_json() -> None:
    assert gpumem.parse_amd_smi(AMD_PROCESSES) == [Holder(28389, "llama-server", 2353860608, "0")]
    older = (
        '[{"gpu": 2, "process_list": [{"process_info": {"name": "p", "pid": 9, '
        '"mem_usage": {"value": 2531, "unit": "MB"}}}]}]'
    )
    assert gpumem.parse_amd_smi(older) == [Holder(9, "p", 2531 * MIB, "2")]
    assert gpumem.parse_rocm_pids(ROCM_PIDS) == [Holder(28389, "llama-server", 2353860608)]
    vram = gpumem.parse_rocm_vram(ROCM_VRAM)
    assert vram == [GpuMemory(0, 154654650368, 205822885888, "rocm-smi")]
    for junk in ("", "not json", "[1, 2]", '{"system": 3}', '[{"process_list": "x"}]'):
        assert gpumem.parse_amd_smi(junk) == []
        assert gpumem.parse_rocm_pids(junk) == []
        assert gpumem.parse_rocm_vram(junk) == []


def test_describe_names_most_memory_first_and_counts_the_rest() -> None:
    many = [Holder(i, f"p{i}", i * GIB) for i in range(1, 8)]
    text = gpumem.describe(many)
    assert text.startswith("p7 (pid 7, 7.00 GiB), p6 (pid 6, 6.00 GiB)")
    assert text.endswith("and 2 more")
    assert gpumem.describe([Holder(77, "Xorg")]) == "Xorg (pid 77)"


# --------------------------------------------------------------------------- tools


def test_fake_tools_on_path_are_run_and_absent_ones_give_nothing(tools_dir: Path) -> None:
    run = nvidia_tools(tools_dir)
    assert [g.index for g in gpumem.nvidia_memory(run)] == [0, 1]
    assert run(["amd-smi", "process", "--json"]) is None  # not on PATH
    assert run(["nvidia-smi", "--bogus"]) is None  # exit 2


def test_a_hung_tool_is_stopped_at_its_deadline(tools_dir: Path) -> None:
    fake_tool(
        tools_dir,
        "nvidia-smi",
        {"--query-gpu=index,uuid,memory.used,memory.total": NVIDIA_GPUS},
        sleep=30,
    )
    run = gpumem.tool_runner(timeout=0.5, environ={"PATH": str(tools_dir)})
    began = time.monotonic()
    assert gpumem.nvidia_memory(run) == []
    assert time.monotonic() - began < 10


def test_amd_memory_from_sysfs_else_rocm_smi(tmp_path: Path, tools_dir: Path) -> None:
    card = tmp_path / "root/sys/class/drm/card1/device"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1002\n")
    (card / "mem_info_vram_total").write_text(f"{16 * GIB}\n")
    (card / "mem_info_vram_used").write_text(f"{12 * GIB}\n")
    other = tmp_path / "root/sys/class/drm/card0/device"  # an NVIDIA card: not AMD's
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x10de\n")
    (other / "mem_info_vram_total").write_text("1\n")
    (other / "mem_info_vram_used").write_text("1\n")
    (tmp_path / "root/sys/class/drm/card1-DP-1").mkdir()
    found = gpumem.amd_memory(tmp_path / "root", gpumem.no_tools)
    assert found == [GpuMemory(1, 12 * GIB, 16 * GIB, "sysfs")]
    fake_tool(tools_dir, "rocm-smi", {"--showmeminfo": ROCM_VRAM})
    run = gpumem.tool_runner(environ={"PATH": str(tools_dir)})
    assert gpumem.amd_memory(tmp_path / "nothing", run)[0].source == "rocm-smi"


def test_amd_holders_from_amd_smi_else_rocm_smi(tools_dir: Path) -> None:
    fake_tool(tools_dir, "rocm-smi", {"--showpids": ROCM_PIDS})
    run = gpumem.tool_runner(environ={"PATH": str(tools_dir)})
    assert gpumem.amd_holders(run) == [Holder(28389, "llama-server", 2353860608)]
    fake_tool(tools_dir, "amd-smi", {"process": AMD_PROCESSES})
    assert gpumem.amd_holders(run)[0].gpu == "0"


# --------------------------------------------------------------------------- probe


@pytest.mark.parametrize(
    ("device", "visible", "want"),
    [
        ({"index": 0, "uuid": "3f9b5e2c-8a41-6d7e-19f0-2b4c6d8e0a13"}, None, 0),  # torch's form
        ({"index": 0, "uuid": UUID1}, "0", 1),  # the UUID wins over the numbering
        ({"index": 0}, "1", 1),
        ({"index": 1}, "1,0", 0),
        ({"index": 0}, "GPU-77c1", 1),  # a shortened UUID, as CUDA accepts it
        ({"index": 0}, "GPU-", None),  # ambiguous
        ({"index": 2}, "0,1", None),
        ({"index": 1}, None, 1),
        ({"index": 0}, "MIG-5a1b", None),
    ],
)
def test_the_worker_device_maps_to_nvidia_smi_numbering(
    device: dict[str, object], visible: str | None, want: int | None
) -> None:
    gpus = gpumem.parse_nvidia_gpus(NVIDIA_GPUS)
    found = gpumem.nvidia_target(device, visible, gpus)
    assert (found.index if found else None) == want


def test_probe_holders_names_other_processes_not_the_probe(tmp_path: Path, tools_dir: Path) -> None:
    run = nvidia_tools(tools_dir)
    busy = {"index": 0, "uuid": UUID0, "busy": True}
    data = {"devices": [busy], "pid": 5151, "vendor": "nvidia", "visible": {}}
    assert gpumem.probe_holders(data, tools=run, root=tmp_path) == (
        "python3 (pid 4242, 137.72 GiB)"
    )
    # the worker in a container: another pid on the host, known by its file name
    fake_proc(
        tmp_path,
        4242,
        "python3",
        "/dev/nvidia0",
        f"python3 /tmp/{gpumem.WORKER_FILE} /tmp/spec.json",
    )
    data["pid"] = 1
    assert gpumem.probe_holders(data, tools=run, root=tmp_path) == "vllm (pid 5151)"
    assert gpumem.probe_holders({"devices": [{**busy, "busy": False}]}, tools=run) == ""
    short = {**busy, "busy": False, "short": True, "others": GIB}  # below --require-free
    assert gpumem.probe_holders({"devices": [short]}, tools=run, root=tmp_path) != ""
    assert gpumem.probe_holders({"devices": [{**short, "others": 0}]}, tools=run) == ""


def test_probe_holders_fall_back_to_open_device_files(tmp_path: Path) -> None:
    fake_proc(tmp_path, 31, "train.py", "/dev/nvidia1")
    fake_proc(tmp_path, 32, "Xorg", "/dev/nvidia0")
    data = {
        "devices": [{"index": 0, "busy": True}],
        "vendor": "nvidia",
        "visible": {"CUDA_VISIBLE_DEVICES": "1"},
    }
    # no nvidia-smi: CUDA_VISIBLE_DEVICES=1 does not say the minor number, so any GPU's
    assert gpumem.probe_holders(data, tools=gpumem.no_tools, root=tmp_path) == ""
    data["visible"] = {}
    assert gpumem.probe_holders(data, tools=gpumem.no_tools, root=tmp_path) == "Xorg (pid 32)"
    amd = {"devices": [{"index": 0, "busy": True}], "vendor": "amd"}
    fake_proc(tmp_path, 40, "python3", "/dev/kfd")
    assert gpumem.probe_holders(amd, tools=gpumem.no_tools, root=tmp_path) == "python3 (pid 40)"


# --------------------------------------------------------------------------- doctor


def _who() -> Identity:
    return Identity(uid=0, user="root", gids=frozenset({0}))


def test_doctor_warns_about_memory_other_processes_hold(tmp_path: Path, tools_dir: Path) -> None:
    host = detect(root=SYSFS / "h100", environ={}, tools=no_tools)
    recipe = make_recipe(name="sm_90", vendor="nvidia", arch="sm_90", cuda="13.0")
    report = diagnose(
        recipe,
        host,
        root=tmp_path,
        identity=_who(),
        space_dir=tmp_path,
        stand_ins={"ping": lambda: None},
        tools=nvidia_tools(tools_dir),
    )
    found = [f for f in report.findings if f.check == "gpu-memory"]
    assert [f.severity for f in found] == ["warn", "ok"]
    assert "GPU 0: 138.31 of 140.40 GiB in use" in found[0].message
    assert "held by python3 (pid 4242, 137.72 GiB), vllm (pid 5151)" in found[0].message
    assert "--require-free" in (found[0].fix or "")
    assert not [f for f in report.blocking if f.check == "gpu-memory"]  # a warning
    data = report.to_dict()
    assert any(f["check"] == "gpu-memory" and f["severity"] == "warn" for f in data["findings"])


def test_doctor_on_amd_reads_sysfs_and_names_amd_smi_processes(
    tmp_path: Path, tools_dir: Path
) -> None:
    root = tmp_path / "root"
    card = root / "sys/class/drm/card0/device"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1002\n")
    (card / "mem_info_vram_total").write_text(f"{192 * GIB}\n")
    (card / "mem_info_vram_used").write_text(f"{150 * GIB}\n")
    fake_tool(tools_dir, "amd-smi", {"process": AMD_PROCESSES})
    host = detect(root=SYSFS / "rx6700xt", environ={}, tools=no_tools)
    recipe = make_recipe(name="gfx1031", vendor="amd", arch="gfx1031", rocm="6.2")
    report = diagnose(
        recipe,
        host,
        root=root,
        identity=_who(),
        space_dir=tmp_path,
        stand_ins={"ping": lambda: None},
        tools=gpumem.tool_runner(environ={"PATH": str(tools_dir)}),
    )
    found = [f for f in report.findings if f.check == "gpu-memory"]
    assert found[0].severity == "warn"
    assert "GPU 0: 150.00 of 192.00 GiB in use (42.00 GiB free)" in found[0].message
    assert "held by llama-server (pid 28389, 2.19 GiB)" in found[0].message


def test_doctor_without_tools_or_sysfs_says_nothing_about_memory(tmp_path: Path) -> None:
    host = detect(root=SYSFS / "h100", environ={}, tools=no_tools)
    report = diagnose(
        None,
        host,
        root=tmp_path,
        identity=_who(),
        space_dir=tmp_path,
        stand_ins={"ping": lambda: None},
    )
    assert not [f for f in report.findings if f.check == "gpu-memory"]
