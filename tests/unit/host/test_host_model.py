"""One host model: detect.GpuInfo/HostInfo; the probe report records host facts through
detect; product and PCI-id tables come from the compatibility table, not from code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envforge.host import detect as detect_module
from envforge.host.detect import detect, no_tools
from envforge.knowledge import load_table
from envforge.probe.report import ReportGpu, host_info
from tests.helpers import paths

SYSFS = paths.TESTS / "fixtures" / "sysfs"


@pytest.mark.parametrize("case", ["rx5700xt", "rx6700xt", "mi300x", "h100", "none"])
def test_report_host_is_detect_seen_through_sysfs(case: str) -> None:
    found = detect(SYSFS / case, environ={}, tools=no_tools)
    report = host_info(SYSFS / case)
    assert [g.name for g in report.gpus] == [g.product for g in found.gpus]
    assert [g.vendor for g in report.gpus] == [g.vendor for g in found.gpus]
    # Only archs the host states are facts; product-name guesses stay out of the report.
    assert [g.arch for g in report.gpus] == [None if g.arch_guessed else g.arch for g in found.gpus]


def test_report_json_shape_is_unchanged() -> None:
    report = host_info(SYSFS / "rx6700xt")
    assert list(report.to_dict()) == ["kernel", "machine", "gpus", "driver"]
    # Issue 12: the PCI id is a host fact of the evidence (added; the keys above stay).
    assert report.gpus == (ReportGpu("AMD Radeon RX 6700 XT", "gfx1031", "amd", "1002:73df"),)
    assert list(report.gpus[0].to_dict()) == ["name", "arch", "vendor", "pci_id"]
    assert report.driver == "amdgpu 6.8.5"


def test_report_host_id_is_a_hash_of_the_machine_id(tmp_path: Path) -> None:
    from envforge.probe.report import host_id

    assert host_id(tmp_path) is None
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    first = host_id(tmp_path)
    assert first is not None
    assert first.startswith("h-")
    assert len(first) == 18
    assert "0123456789abcdef" not in first
    (tmp_path / "etc/machine-id").write_text("fedcba9876543210fedcba9876543210\n")
    assert host_id(tmp_path) not in (None, first)


def test_report_kfd_decoding_is_detects(tmp_path: Path) -> None:
    # probe/report.py's own reader printed the minor digit in decimal: 91200 → gfx9120.
    props = tmp_path / "sys/class/kfd/kfd/topology/nodes/1/properties"
    props.parent.mkdir(parents=True)
    props.write_text("simd_count 4\ngfx_target_version 91200\n")
    assert [g.arch for g in host_info(tmp_path).gpus] == ["gfx9c0"]
    props.write_text("simd_count 4\ngfx_target_version 91600\n")
    assert [g.arch for g in host_info(tmp_path).gpus] == [None]


def test_product_tables_are_data() -> None:
    assert not hasattr(detect_module, "AMD_DEVICES")
    assert not hasattr(detect_module, "NVIDIA_PRODUCTS")
    table = load_table()
    known = table.amd_pci_product(0x73DF)
    assert known is not None
    assert (known.product, known.arch) == ("AMD Radeon RX 6700 XT", "gfx1031")
    assert table.arch_for_model("NVIDIA GeForce RTX 4060 Ti") == "sm_89"
    assert table.arch_for_model("NVIDIA TITAN X (Pascal)") == "sm_61"
    assert table.arch_for_model("Matrox G200") is None


def test_detect_uses_the_table_it_is_given() -> None:
    empty = dataclasses.replace(load_table(), amd_pci_ids=(), nvidia_model_names=())
    amd = detect(SYSFS / "rx6700xt", environ={}, tools=no_tools, table=empty)
    assert amd.gpus[0].product == "AMD GPU 0x73df"
    assert amd.gpus[0].arch == "gfx1031"  # from gfx_target_version, not from the table
    nvidia = detect(SYSFS / "h100", environ={}, tools=no_tools, table=empty)
    assert nvidia.gpus[0].arch is None
    shipped = detect(SYSFS / "h100", environ={}, tools=no_tools)
    assert shipped.gpus[0].arch == "sm_90"
    assert shipped.gpus[0].arch_guessed


def test_drm_product_name_names_a_kfd_gpu(tmp_path: Path) -> None:
    props = tmp_path / "sys/class/kfd/kfd/topology/nodes/1/properties"
    props.parent.mkdir(parents=True)
    props.write_text("simd_count 80\ngfx_target_version 110501\ndrm_render_minor 129\n")
    card = tmp_path / "sys/class/drm/card1/device"
    (card / "drm/renderD129").mkdir(parents=True)
    (card / "vendor").write_text("0x1002\n")
    (card / "device").write_text("0x1586\n")
    (card / "product_name").write_text("AMD Radeon 8060S\n")
    gpu = detect(tmp_path, environ={}, tools=no_tools).gpus[0]
    assert (gpu.product, gpu.arch) == ("AMD Radeon 8060S", "gfx1151")


@pytest.mark.parametrize(
    ("model", "arch"),
    [
        # issue 20 §6 (D14): workstation cards must not match GeForce fragments
        ("Quadro RTX 5000", "sm_75"),
        ("Quadro RTX 4000", "sm_75"),
        ("Quadro RTX 3000", "sm_75"),
        ("NVIDIA RTX 2000 Ada Generation", "sm_89"),
        ("NVIDIA RTX 5000 Ada Generation", "sm_89"),
        ("NVIDIA RTX 4000 Ada Generation", "sm_89"),
        ("NVIDIA GeForce RTX 5090", "sm_120"),
        ("NVIDIA GeForce RTX 2080 Ti", "sm_75"),
        # D15: products that mapped to nothing
        ("NVIDIA A40", "sm_86"),
        ("NVIDIA TITAN V", "sm_70"),
        ("Tesla P4", "sm_61"),
        ("Tesla P40", "sm_61"),
        ("NVIDIA H20", "sm_90"),
        ("NVIDIA H200", "sm_90"),
        ("NVIDIA B300 SXM6 AC", "sm_103"),
        ("NVIDIA GB10", "sm_121"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm_120"),
        ("NVIDIA RTX A4000", "sm_86"),
        ("NVIDIA A100-SXM4-80GB", "sm_80"),
        ("NVIDIA A10G", "sm_86"),
        ("NVIDIA L40S", "sm_89"),
        # issue 30 (audit 2026-11-27 D11, D12): products that mapped to nothing
        ("NVIDIA A2", "sm_86"),
        ("NVIDIA L20", "sm_89"),
        ("NVIDIA A800 80GB PCIe", "sm_80"),
        ("NVIDIA T1000", "sm_75"),
        ("NVIDIA T400 4GB", "sm_75"),
        ("NVIDIA RTX PRO 2000 Blackwell", "sm_120"),
        ("NVIDIA RTX PRO 500 Blackwell Generation Laptop GPU", "sm_120"),
        ("NVIDIA RTX A2000 12GB", "sm_86"),
    ],
)
def test_model_names_longest_fragment_wins(model: str, arch: str) -> None:
    assert load_table().arch_for_model(model) == arch


def test_longest_fragment_wins_is_the_rule_not_the_file_order() -> None:
    """The rule is code: a short fragment listed first still loses to a longer one."""
    table = load_table()
    shuffled = dataclasses.replace(
        table, nvidia_model_names=(("RTX 40", "sm_89"), ("Quadro RTX", "sm_75"))
    )
    assert shuffled.arch_for_model("Quadro RTX 4000") == "sm_75"
    assert shuffled.arch_for_model("NVIDIA GeForce RTX 4090") == "sm_89"


def test_gfx1150_names_both_strix_point_igpus() -> None:
    """The Radeon 880M is gfx1150 too (audit 2026-11-27 D5)."""
    table = load_table()
    for product in ("Radeon 890M", "Radeon 880M", "AMD Radeon 880M"):
        assert table.arch_for_product(product) == "gfx1150", product
