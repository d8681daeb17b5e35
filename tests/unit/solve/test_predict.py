"""Answers predicted from the ISA family for archs the table has no row for (issue 30 §4):
NVIDIA same-major SASS / PTX JIT, AMD LLVM generic targets; ``--strict`` refuses them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.errors import TableError
from envforge.host.detect import OVERRIDE_VARS
from envforge.knowledge import load_table
from envforge.knowledge.families import load_families, parse_families
from envforge.solve.predict import Predicted, prediction_for
from envforge.solve.solver import SolveRequest, UnknownArch, known_archs, solve

TABLE = load_table()
FAMILIES = load_families()
LLVM = "https://llvm.org/docs/AMDGPUUsage.html"
CUDA_BINARY = "cuda-c-programming-guide/index.html#binary-compatibility"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*OVERRIDE_VARS, "ENVFORGE_STRICT", "ENVFORGE_RECIPE_PATH"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("arch", "runs"), [("sm_122", "sm_120"), ("sm_88", "sm_86"), ("sm_99", "sm_90")]
)
def test_nvidia_same_major_lower_minor_sass(arch: str, runs: str) -> None:
    assert arch not in known_archs(TABLE)
    s = solve(SolveRequest(arch), TABLE)
    assert (s.stack.via, s.stack.runs) == ("same-major", runs)
    assert s.to_dict()["confidence"] == "predicted"
    assert s.stack.confidence == "uncertain"
    assert CUDA_BINARY in s.prediction
    assert "same major" in s.prediction
    assert s.notes[0].startswith("predicted, not verified: ")
    assert s.stack.doubts[0].startswith("predicted, not verified: ")


def test_nvidia_new_major_runs_ptx_and_says_jit_costs_start_up() -> None:
    s = solve(SolveRequest("sm_130"), TABLE)
    assert s.stack.via == "ptx"
    assert "JIT-compiles" in s.prediction
    assert "start-up" in s.prediction
    assert "#just-in-time-compilation" in s.prediction


@pytest.mark.parametrize(
    ("arch", "value", "target", "generic"),
    [
        ("gfx1154", "11.5.1", "gfx1151", "gfx11-generic"),  # same generation, not listed
        ("gfx1037", "10.3.0", "gfx1030", "gfx10-3-generic"),
        ("gfx1202", "12.0.1", "gfx1201", "gfx12-generic"),
        ("gfx909", "9.0.6", "gfx906", "gfx9-generic"),  # a member: gfx908 is not one
    ],
)
def test_amd_generic_family_override_to_the_nearest_carried_member(
    arch: str, value: str, target: str, generic: str
) -> None:
    s = solve(SolveRequest(arch), TABLE)
    assert s.stack.via == "override"
    assert s.stack.override is not None
    assert (s.stack.override.value, s.stack.runs) == (value, target)
    assert generic in s.prediction
    assert LLVM in s.prediction
    env = s.recipe_dict()["env"]["HSA_OVERRIDE_GFX_VERSION"]
    assert env["value"] == value
    assert "predicted, not verified" in env["why"]


def test_amd_family_without_a_carried_member_takes_the_same_major_fallback() -> None:
    s = solve(SolveRequest("gfx1013"), TABLE)  # gfx10-1-generic: no wheel has gfx101x
    assert s.stack.override is not None
    assert s.stack.override.value == "10.3.0"
    assert "gfx10-1-generic" in s.prediction
    assert "different ISA" in s.prediction


def test_the_family_rules_are_data() -> None:
    only_1100 = tuple(
        replace(g, members=("gfx1100",), prefixes=("gfx11",)) if g.name == "gfx11-generic" else g
        for g in FAMILIES.amd_generic
    )
    s = solve(SolveRequest("gfx1154"), TABLE, replace(FAMILIES, amd_generic=only_1100))
    assert s.stack.runs == "gfx1100"
    assert s.stack.override is not None
    assert s.stack.override.value == "11.0.0"


@pytest.mark.parametrize("arch", ["sm_122", "sm_130", "gfx1154", "gfx1013"])
def test_strict_refuses_a_prediction_naming_why(arch: str) -> None:
    with pytest.raises(Predicted) as err:
        solve(SolveRequest(arch, strict=True), TABLE)
    assert err.value.exit_code == 2
    assert "--strict" in str(err.value)
    assert "predicted, not verified" in str(err.value)
    assert "ISA family" in str(err.value)


def test_strict_leaves_known_archs_alone() -> None:
    assert solve(SolveRequest("sm_89", strict=True), TABLE).prediction == ""


def test_a_gfx_no_family_speaks_for_stays_unknown() -> None:
    assert prediction_for("gfx1300", TABLE, FAMILIES) is None
    with pytest.raises(UnknownArch):
        solve(SolveRequest("gfx1300"), TABLE)


def test_known_archs_are_never_predicted() -> None:
    for arch in known_archs(TABLE):
        assert prediction_for(arch, TABLE, FAMILIES) is None, arch


def test_malformed_families_are_refused() -> None:
    row: dict[str, object] = {"name": "g", "members": ["gfx1100"], "prefixes": [], "source": "s"}
    good: dict[str, object] = {
        "schema": 1,
        "nvidia": {"same_major": {"rule": "r", "source": "s"}, "ptx": {"rule": "r", "source": "s"}},
        "amd_generic": [row],
    }
    assert parse_families(good).amd_generic[0].members == ("gfx1100",)
    unknown = {"fallback": "x", "fallback_source": "s"}
    with pytest.raises(TableError, match="not a generic target"):
        parse_families({**good, "amd_generic": [{**row, **unknown}]})
    bad_member = {**good, "amd_generic": [{**row, "members": ["sm_80"]}]}
    with pytest.raises(TableError, match="not gfx targets"):
        parse_families(bad_member)
    with pytest.raises(TableError, match="schema"):
        parse_families({**good, "schema": 2})


def test_cli_warns_in_one_line_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", "sm_122", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["confidence"] == "predicted"
    warnings = [line for line in captured.err.splitlines() if "predicted, not verified" in line]
    assert len(warnings) == 1
    assert "sm_122" in warnings[0]


@pytest.mark.parametrize("args", [["--strict", "solve", "gfx1154"], ["solve", "sm_88", "--strict"]])
def test_cli_strict_is_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert "predicted, not verified" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["sm_122", "gfx1154"])
def test_auto_on_a_host_detecting_an_arch_with_no_row(
    arch: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_VENDOR", "amd" if arch.startswith("gfx") else "nvidia")
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", arch)
    assert main(["show", "auto", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["gpu"]["arch"] == arch
    auto = [line for line in captured.err.splitlines() if line.startswith("envforge: auto -> ")]
    assert len(auto) == 1
    assert "predicted, not verified" in auto[0]
    monkeypatch.setenv("ENVFORGE_STRICT", "1")
    assert main(["build", "auto"]) == 2  # refused before anything is built
    assert "--strict: auto -> " + arch in capsys.readouterr().err


def test_a_recipe_for_an_arch_with_no_row_is_an_unknown_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "sm_122.yaml"
    assert main(["solve", "sm_122", "--write", str(recipe)]) == 0
    capsys.readouterr()
    assert main(["show", str(recipe)]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "[gpu-arch]" in line]
    assert len(warned) == 1
    assert "predicted, not verified" in warned[0]
    assert main(["--strict", "show", str(recipe)]) == 2
    assert "[gpu-arch]" in capsys.readouterr().err
