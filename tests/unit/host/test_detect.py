"""Host detection against fixture sysfs trees and recorded tool outputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from envforge.errors import InvalidInput
from envforge.host.detect import (
    HostInfo,
    ToolRunner,
    detect,
    no_tools,
    parse_kfd_properties,
    parse_nvidia_information,
    parse_nvidia_smi_csv,
    parse_nvidia_version,
    parse_rocm_agent_enumerator,
    parse_rocminfo,
    system_tools,
)
from envforge.knowledge.arch import gfx_from_target_version, sm_from_compute_cap
from tests.helpers import paths

FIXTURES = paths.TESTS / "fixtures"
SYSFS = FIXTURES / "sysfs"
TOOLS = FIXTURES / "tools"


def recorded_tools(case: str, only: Sequence[str] | None = None) -> ToolRunner:
    """A tool runner that answers from tests/fixtures/tools/<case>/ (missing file = no tool)."""
    names = {
        "rocminfo": "rocminfo.txt",
        "rocm_agent_enumerator": "rocm_agent_enumerator.txt",
        "nvidia-smi": "nvidia-smi.csv",
    }
    calls: list[str] = []

    def run(argv: Sequence[str]) -> str | None:
        calls.append(argv[0])
        if only is not None and argv[0] not in only:
            return None
        path = TOOLS / case / names[argv[0]]
        return path.read_text() if path.is_file() else None

    return run


def no_env() -> dict[str, str]:
    return {}


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (100100, "gfx1010"),
        (100102, "gfx1012"),
        (100300, "gfx1030"),
        (100301, "gfx1031"),
        (110000, "gfx1100"),
        (90006, "gfx906"),
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (90500, "gfx950"),
        (120001, "gfx1201"),
        (0, None),
    ],
)
def test_gfx_target_version(value: int, name: str | None) -> None:
    assert gfx_from_target_version(value) == name


def test_kfd_properties_parse_ints_and_skip_noise() -> None:
    props = parse_kfd_properties("simd_count 80\ngfx_target_version 100100\nbroken\nname x y\n")
    assert props == {"simd_count": 80, "gfx_target_version": 100100}


@pytest.mark.parametrize(
    ("case", "arch", "product", "count", "nodes", "driver"),
    [
        (
            "rx5700xt",
            "gfx1010",
            "AMD Radeon RX 5700 XT",
            1,
            ("/dev/kfd", "/dev/dri/renderD128"),
            "in-kernel (6.8.0-49-generic)",
        ),
        (
            "rx6700xt",
            "gfx1031",
            "AMD Radeon RX 6700 XT",
            1,
            ("/dev/kfd", "/dev/dri/renderD128"),
            "6.8.5",
        ),
        (
            "mi300x",
            "gfx942",
            "AMD Instinct MI300X",
            8,
            ("/dev/kfd", "/dev/dri/renderD128"),
            "6.10.5",
        ),
        (
            "h100",
            "sm_90",
            "NVIDIA H100 80GB HBM3",
            1,
            ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"),
            "550.127.05",
        ),
    ],
)
def test_sysfs_fixture_trees(  # noqa: PLR0917 - one parameter per column
    case: str, arch: str, product: str, count: int, nodes: tuple[str, ...], driver: str
) -> None:
    host = detect(root=SYSFS / case, environ=no_env(), tools=no_tools)
    assert host.count == count
    assert host.archs == (arch,)
    first = host.gpus[0]
    assert first.product == product
    assert first.device_nodes == nodes
    assert first.driver_version == driver
    assert first.source.startswith(("sysfs", "procfs"))
    assert [g.index for g in host.gpus] == list(range(count))


def test_mi300x_render_nodes_follow_kfd_minors() -> None:
    host = detect(root=SYSFS / "mi300x", environ=no_env(), tools=no_tools)
    renders = [g.device_nodes[1] for g in host.gpus]
    assert renders == [f"/dev/dri/renderD{128 + 8 * i}" for i in range(8)]
    assert all(g.pci_id == "1002:74a1" for g in host.gpus)


def test_no_gpu_tree() -> None:
    host = detect(root=SYSFS / "none", environ=no_env(), tools=no_tools)
    assert host == HostInfo(gpus=(), kernel="6.1.0-27-cloud-amd64", machine=host.machine)
    assert not host.has_gpu
    assert host.primary is None


def test_empty_root_is_no_gpu(tmp_path: Path) -> None:
    host = detect(root=tmp_path, environ=no_env(), tools=no_tools)
    assert host.count == 0
    assert host.kernel == ""


def test_tools_fill_in_when_sysfs_is_missing(tmp_path: Path) -> None:
    # A container without /sys/class/kfd mounted, but rocminfo works.
    host = detect(root=tmp_path, environ=no_env(), tools=recorded_tools("rx6700xt"))
    assert host.archs == ("gfx1031",)
    assert host.gpus[0].product == "AMD Radeon RX 6700 XT"
    assert host.gpus[0].source == "rocminfo"
    assert "rocminfo" in host.sources


def test_rocm_agent_enumerator_when_rocminfo_is_missing(tmp_path: Path) -> None:
    host = detect(
        root=tmp_path,
        environ=no_env(),
        tools=recorded_tools("mi300x", only=["rocm_agent_enumerator"]),
    )
    assert host.count == 8
    assert host.archs == ("gfx942",)
    assert "rocm_agent_enumerator" in host.sources


def test_nvidia_smi_alone(tmp_path: Path) -> None:
    host = detect(root=tmp_path, environ=no_env(), tools=recorded_tools("gtx1080"))
    assert host.count == 2
    assert host.archs == ("sm_61",)
    assert host.gpus[1].device_nodes[0] == "/dev/nvidia1"
    assert host.gpus[0].driver_version == "535.183.01"


def test_nvidia_smi_confirms_sysfs_arch() -> None:
    host = detect(root=SYSFS / "h100", environ=no_env(), tools=recorded_tools("h100"))
    assert host.archs == ("sm_90",)
    assert host.gpus[0].source == "procfs:nvidia"
    assert host.sources == ("procfs:nvidia", "nvidia-smi")


def test_sysfs_is_not_second_guessed_by_tools() -> None:
    # sysfs knows the arch and name: rocminfo is not even asked.
    tools = recorded_tools("rx6700xt")
    host = detect(root=SYSFS / "rx5700xt", environ=no_env(), tools=tools)
    assert host.archs == ("gfx1010",)
    assert "rocminfo" not in host.sources


def test_drm_only_amd_card_uses_device_table(tmp_path: Path) -> None:
    card = tmp_path / "sys/class/drm/card0/device"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1002\n")
    (card / "device").write_text("0x73df\n")
    host = detect(root=tmp_path, environ=no_env(), tools=no_tools)
    assert host.archs == ("gfx1031",)
    assert host.gpus[0].source == "sysfs:drm"
    assert any("/dev/kfd" in n for n in host.notes)


def test_unknown_arch_is_noted(tmp_path: Path) -> None:
    card = tmp_path / "sys/class/drm/card0/device"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x10de\n")
    (card / "device").write_text("0x9999\n")
    host = detect(root=tmp_path, environ=no_env(), tools=no_tools)
    assert host.count == 1
    assert host.gpus[0].arch is None
    assert any("ENVFORGE_GPU_ARCH" in n for n in host.notes)


# ------------------------------------------------------------------ override variables


def test_override_arch_on_a_machine_without_gpu(tmp_path: Path) -> None:
    env = {
        "ENVFORGE_GPU_ARCH": "gfx1031",
        "ENVFORGE_DRIVER_VERSION": "6.8.5",
        "ENVFORGE_GPU_COUNT": "2",
    }
    host = detect(root=tmp_path, environ=env, tools=no_tools)
    assert host.count == 2
    assert host.archs == ("gfx1031",)
    assert {g.vendor for g in host.gpus} == {"amd"}
    assert {g.driver_version for g in host.gpus} == {"6.8.5"}
    assert host.gpus[0].source == "override"


def test_override_replaces_detection_and_says_so() -> None:
    host = detect(root=SYSFS / "rx5700xt", environ={"ENVFORGE_GPU_ARCH": "sm_90"}, tools=no_tools)
    assert host.archs == ("sm_90",)
    assert host.gpus[0].vendor == "nvidia"
    assert any("RX 5700 XT" in n for n in host.notes)


def test_override_vendor_none_hides_gpus() -> None:
    host = detect(root=SYSFS / "h100", environ={"ENVFORGE_GPU_VENDOR": "none"}, tools=no_tools)
    assert host.count == 0


def test_driver_override_applies_to_detected_gpus() -> None:
    host = detect(
        root=SYSFS / "h100", environ={"ENVFORGE_DRIVER_VERSION": "580.65.06"}, tools=no_tools
    )
    assert host.gpus[0].driver_version == "580.65.06"


@pytest.mark.parametrize(
    "env",
    [
        {"ENVFORGE_GPU_ARCH": "navi10"},
        {"ENVFORGE_GPU_ARCH": "gfx1010", "ENVFORGE_GPU_VENDOR": "nvidia"},
        {"ENVFORGE_GPU_VENDOR": "intel", "ENVFORGE_GPU_ARCH": "gfx1010"},
        {"ENVFORGE_GPU_VENDOR": "amd"},
        {"ENVFORGE_GPU_ARCH": "gfx1010", "ENVFORGE_GPU_COUNT": "0"},
    ],
)
def test_bad_override_is_invalid_input(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(InvalidInput, match="ENVFORGE_GPU"):
        detect(root=tmp_path, environ=env, tools=no_tools)


# ------------------------------------------------------------------ parsers on recordings


def test_parse_rocminfo_agents() -> None:
    agents = parse_rocminfo((TOOLS / "rx5700xt/rocminfo.txt").read_text())
    assert [(a.name, a.device_type) for a in agents] == [
        ("AMD Ryzen 7 3700X 8-Core Processor", "CPU"),
        ("gfx1010", "GPU"),
    ]
    assert agents[1].marketing_name == "AMD Radeon RX 5700 XT"


def test_parse_rocminfo_strips_target_features() -> None:
    agents = parse_rocminfo((TOOLS / "mi300x/rocminfo.txt").read_text())
    gpus = [a for a in agents if a.device_type == "GPU"]
    assert len(gpus) == 8
    assert {a.name for a in gpus} == {"gfx942"}


def test_parse_rocm_agent_enumerator() -> None:
    assert parse_rocm_agent_enumerator("gfx000\ngfx1031\n\n") == ["gfx1031"]


def test_parse_nvidia_outputs() -> None:
    rows = parse_nvidia_smi_csv((TOOLS / "h100/nvidia-smi.csv").read_text())
    assert [(r.name, r.arch, r.driver_version) for r in rows] == [
        ("NVIDIA H100 80GB HBM3", "sm_90", "550.127.05")
    ]
    version = (SYSFS / "h100/proc/driver/nvidia/version").read_text()
    assert parse_nvidia_version(version) == "550.127.05"
    info = parse_nvidia_information(
        (SYSFS / "h100/proc/driver/nvidia/gpus/0000:18:00.0/information").read_text()
    )
    assert info["Model"] == "NVIDIA H100 80GB HBM3"
    assert info["Device Minor"] == "0"


@pytest.mark.parametrize(
    ("cap", "sm"), [("9.0", "sm_90"), ("6.1", "sm_61"), ("12.0", "sm_120"), ("[N/A]", None)]
)
def test_compute_cap(cap: str, sm: str | None) -> None:
    assert sm_from_compute_cap(cap) == sm


def test_host_to_dict_is_plain_data() -> None:
    host = detect(root=SYSFS / "rx6700xt", environ=no_env(), tools=no_tools)
    data = host.to_dict()
    assert data["count"] == 1
    assert data["gpus"][0]["arch"] == "gfx1031"
    assert data["gpus"][0]["device_nodes"] == ["/dev/kfd", "/dev/dri/renderD128"]


def test_system_tools_missing_tool_is_none(tmp_path: Path) -> None:
    run = system_tools({"PATH": str(tmp_path)})
    assert run(["rocminfo"]) is None


def test_system_tools_runs_a_real_tool_with_deadline(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0, 550.127.05'\n")
    tool.chmod(0o755)
    run = system_tools({"PATH": str(tmp_path)})
    out = run(["nvidia-smi", "--query-gpu=name"])
    assert out is not None
    assert "H100" in out


def test_system_tools_failing_tool_is_none(tmp_path: Path) -> None:
    tool = tmp_path / "rocminfo"
    tool.write_text("#!/bin/sh\necho 'ROCk module is NOT loaded' >&2\nexit 1\n")
    tool.chmod(0o755)
    assert system_tools({"PATH": str(tmp_path)})(["rocminfo"]) is None
