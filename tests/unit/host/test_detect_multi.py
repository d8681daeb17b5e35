"""Hosts with several GPUs: an iGPU beside a discrete GPU, GPUs of different archs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.core.resources import data_file
from envforge.errors import TableError
from envforge.host.detect import GpuInfo, HostInfo, detect, no_tools
from envforge.knowledge import load_table
from envforge.knowledge.parse import load_table_file
from envforge.solve.choose import choose_per_arch, choose_recipe, load_catalogue
from tests.helpers import paths

SYSFS = paths.TESTS / "fixtures" / "sysfs"
IGPU = SYSFS / "igpu-rx7900xtx"
MIXED = SYSFS / "mixed-rx7900xtx-rx6700xt"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ENVFORGE_GPU_ARCH",
        "ENVFORGE_GPU_VENDOR",
        "ENVFORGE_GPU_COUNT",
        "ENVFORGE_GPU_PRODUCT",
        "ENVFORGE_DRIVER_VERSION",
        "ENVFORGE_RECIPE_PATH",
    ):
        monkeypatch.delenv(name, raising=False)


def gpu(index: int, arch: str, *, integrated: bool = False) -> GpuInfo:
    return GpuInfo(
        vendor="amd",
        product=f"GPU {arch}",
        arch=arch,
        driver_version=None,
        device_nodes=("/dev/kfd",),
        source="test",
        index=index,
        integrated=integrated,
    )


def host(*gpus: GpuInfo) -> HostInfo:
    return HostInfo(gpus=gpus, kernel="", machine="x86_64")


def test_igpu_and_discrete_gpu_are_both_detected() -> None:
    found = detect(root=IGPU, environ={}, tools=no_tools)
    assert [(g.index, g.arch, g.integrated) for g in found.gpus] == [
        (0, "gfx1036", True),
        (1, "gfx1100", False),
    ]
    assert found.gpus[1].product == "AMD Radeon RX 7900 XTX"
    assert [g.device_nodes[-1] for g in found.gpus] == [
        "/dev/dri/renderD128",
        "/dev/dri/renderD129",
    ]
    primary = found.primary
    assert primary is not None
    assert primary.index == 1
    assert [g.index for g in found.passed_over] == [0]
    assert any("auto chooses the discrete one" in n and "#119637" in n for n in found.notes)
    assert found.to_dict()["gpus"][0]["integrated"] is True


def test_auto_chooses_the_discrete_gpu_and_says_so() -> None:
    recipes, _ = load_catalogue()
    found = detect(root=IGPU, environ={}, tools=no_tools)
    choice = choose_recipe(found, recipes)
    assert choice.recipe == "gfx1100"
    assert choice.gpu is not None
    assert choice.gpu.index == 1
    assert "discrete GPU 1 is chosen over the integrated GPU 0 (gfx1036)" in choice.reason


def test_discrete_gpu_wins_in_any_device_order() -> None:
    igpu, dgpu = gpu(0, "gfx1036", integrated=True), gpu(1, "gfx1100")
    assert host(igpu, dgpu).primary == dgpu
    assert host(replace(dgpu, index=0), replace(igpu, index=1)).primary == replace(dgpu, index=0)


def test_an_apu_alone_is_chosen_for() -> None:
    apu = gpu(0, "gfx1151", integrated=True)
    only = host(apu)
    assert only.primary == apu
    assert only.passed_over == ()
    recipes, _ = load_catalogue()
    choice = choose_recipe(only, recipes)
    assert choice.recipe == "gfx1151"
    assert "integrated" not in choice.reason


def test_apu_flag_comes_from_the_table() -> None:
    table = load_table()
    for arch in ("gfx1036", "gfx1103", "gfx1150", "gfx1151", "gfx1033"):
        assert table.is_integrated(arch), arch
    for arch in ("gfx1100", "gfx1031", "gfx942", "sm_90", "gfx9999"):
        assert not table.is_integrated(arch), arch


def test_table_refuses_a_non_boolean_integrated(tmp_path: Path) -> None:
    text = data_file("compat.yaml").read_text(encoding="utf-8")
    broken = text.replace(
        'gfx1036: {family: "RDNA2 Raphael iGPU", integrated: true,',
        'gfx1036: {family: "RDNA2 Raphael iGPU", integrated: maybe,',
    )
    assert broken != text
    path = tmp_path / "compat.yaml"
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(TableError, match=r"amd_archs\.gfx1036\.integrated"):
        load_table_file(path)


def test_gpus_of_different_archs_get_one_recipe_each() -> None:
    found = detect(root=MIXED, environ={}, tools=no_tools)
    assert found.archs == ("gfx1100", "gfx1031")
    assert any("each arch gets its own recipe" in n for n in found.notes)
    recipes, _ = load_catalogue()
    per_arch = choose_per_arch(found, recipes)
    assert [(a.arch, a.gpus, a.choice.recipe if a.choice else None) for a in per_arch] == [
        ("gfx1100", (0,), "gfx1100"),
        ("gfx1031", (1,), "gfx1031"),
    ]


def test_an_arch_without_a_recipe_is_explained_not_fatal() -> None:
    recipes, _ = load_catalogue()
    # gfx1103 (used before) gets its solved stack since issue 10 §2; gfx803 has no wheel.
    per_arch = choose_per_arch(host(gpu(0, "gfx1100"), gpu(1, "gfx803", integrated=True)), recipes)
    assert per_arch[0].choice is not None
    assert per_arch[1].choice is None
    assert per_arch[1].problem is not None
    assert "no published torch wheel" in per_arch[1].problem
    assert per_arch[1].to_dict()["integrated"] is True


def test_an_arch_without_a_curated_recipe_gets_its_solved_stack() -> None:
    recipes, _ = load_catalogue()
    per_arch = choose_per_arch(host(gpu(0, "gfx1100"), gpu(1, "gfx1103", integrated=True)), recipes)
    solved = per_arch[1].choice
    assert solved is not None
    assert solved.recipe == "gfx1103"
    assert solved.solved is not None
    assert "uncertain until certified" in solved.reason


def test_detect_cli_explains_each_arch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--root", str(MIXED)]) == 0
    out = capsys.readouterr().out
    assert "one recipe per arch:" in out
    assert "  gfx1100 (GPU 0) -> gfx1100: recipe for gfx1100" in out
    assert "  gfx1031 (GPU 1) -> gfx1031: recipe for gfx1031" in out
    assert main(["detect", "--root", str(IGPU)]) == 0
    out = capsys.readouterr().out
    assert "auto -> gfx1100:" in out
    assert "gfx1036 (GPU 0, integrated) ->" in out
    assert "[sysfs:kfd]  integrated" in out


def test_detect_cli_json_per_arch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--json", "--root", str(IGPU)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["auto"]["recipe"] == "gfx1100"
    assert [a["arch"] for a in data["per_arch"]] == ["gfx1036", "gfx1100"]
    assert data["per_arch"][0]["integrated"] is True
    assert main(["detect", "--json", "--root", str(SYSFS / "rx6700xt")]) == 0
    assert json.loads(capsys.readouterr().out)["per_arch"] == []


def test_solve_auto_solves_for_the_discrete_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = detect(root=IGPU, environ={}, tools=no_tools)
    monkeypatch.setattr("envforge.host.detect.detect", lambda: found)
    assert main(["solve", "auto", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["arch"] == "gfx1100"
    assert "GPU 1" in data["detected"]
