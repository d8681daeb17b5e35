"""The compatibility table and its rules: impossible combinations are refused, by rule id.

Every case starts from a shipped recipe and makes it impossible with ``--set``, then runs
the real CLI (``envforge.cli.main``): exit 2, one line on stderr naming the rule, no
traceback.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from envforge.cli import main
from envforge.core.resources import data_file
from envforge.errors import ConstraintViolation
from envforge.knowledge import (
    TableError,
    check,
    cuda_archs,
    enforce,
    explain,
    gfx_from_isa,
    isa_from_gfx,
    load_table,
    min_driver,
    override_target,
    recipe_arch_for,
)
from envforge.knowledge.arch import sm_covered
from envforge.knowledge.parse import parse_layers, parse_table
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe

WHL = "https://download.pytorch.org/whl"

#: (id, recipe, --set overrides, rule id expected in the one-line error)
IMPOSSIBLE: list[tuple[str, str, list[str], str]] = [
    ("torch-1.13.1-rocm5.2-py3.11", "gfx1010", ["python=3.11"], "python-range"),
    ("torch-1.13.1-cpu-py3.11", "cpu", ["torch.version=1.13.1", "numpy=<2"], "python-range"),
    ("torch-2.13-py3.9", "cpu", ["python=3.9", "base_image=debian:bullseye"], "python-range"),
    ("torch-2.2-numpy-2", "cpu", ["torch.version=2.2.2", "numpy=>=1.24"], "numpy-abi"),
    (
        "torch-2.0-numpy-2-rocm",
        "gfx1030",
        ["torch.version=2.0.1", "rocm=5.4.2", f"torch.index={WHL}/rocm5.4.2"],
        "numpy-abi",
    ),
    (
        "numpy-1.x-on-py3.13",
        "cpu",
        ["torch.version=2.6.0", "python=3.13", "numpy=<2", "base_image=debian:trixie"],
        "numpy-python",
    ),
    ("numpy-pin-without-py3.12-wheel", "gfx1100", ["numpy=~=1.25.0"], "numpy-python"),
    ("gfx1010-no-override", "gfx1010", ["env.HSA_OVERRIDE_GFX_VERSION=null"], "arch-in-wheel"),
    (
        "gfx1100-torch-2.0-rocm5.4.2",
        "gfx1100",
        [
            "torch.version=2.0.1",
            "rocm=5.4.2",
            f"torch.index={WHL}/rocm5.4.2",
            "python=3.10",
            "base_image=ubuntu:22.04",
            "numpy=<2",
        ],
        "arch-in-wheel",
    ),
    (
        "gfx942-torch-2.2-rocm5.7",
        "gfx942",
        ["torch.version=2.2.2", "rocm=5.7", f"torch.index={WHL}/rocm5.7", "numpy=<2"],
        "arch-in-wheel",
    ),
    ("gfx1201-rocm6.3", "gfx906", ["gpu.arch=gfx1201"], "arch-in-wheel"),
    ("gfx906-rocm6.4", "gfx906", ["rocm=6.4", f"torch.index={WHL}/rocm6.4"], "arch-broken"),
    (
        "gfx906-torch-2.13-rocm7.2",
        "gfx906",
        ["torch.version=2.13.0", "rocm=7.2", f"torch.index={WHL}/rocm7.2"],
        "arch-broken",
    ),
    (
        "pascal-sm_61-cu128",
        "sm_61",
        ["torch.version=2.9.1", "cuda=12.8", f"torch.index={WHL}/cu128"],
        "cuda-arch",
    ),
    (
        "blackwell-sm_120-cu126",
        "sm_90",
        ["gpu.arch=sm_120", "cuda=12.6", f"torch.index={WHL}/cu126"],
        "cuda-arch",
    ),
    ("rocm5.7-not-for-torch-1.13", "gfx1010", ["rocm=5.7"], "variant-published"),
    ("rocm6.3-not-for-torch-2.13", "gfx906", ["torch.version=2.13.0"], "variant-published"),
    ("cu126-not-for-torch-2.5", "sm_61", ["torch.version=2.5.1"], "variant-published"),
    ("unknown-torch", "cpu", ["torch.version=2.3.7"], "torch-release"),
    ("wrong-index-rocm", "gfx1030", [f"torch.index={WHL}/rocm6.1"], "index-url"),
    ("cuda-recipe-cpu-index", "sm_90", [f"torch.index={WHL}/cpu"], "index-url"),
    ("cpu-recipe-cuda-index", "cpu", [f"torch.index={WHL}/cu126"], "index-url"),
    ("rocm-without-index", "gfx1100", ["torch.index=null"], "index-url"),
    ("local-label-mismatch", "gfx1010", ["torch.version=1.13.1+rocm5.1.1"], "local-version"),
    ("amd-with-cuda", "gfx1030", ["rocm=null", "cuda=12.4"], "vendor-variant"),
    ("nvidia-with-rocm", "sm_90", ["cuda=null", "rocm=7.2"], "vendor-variant"),
    ("cpu-with-cuda", "cpu", ["cuda=12.6"], "vendor-variant"),
    ("amd-without-rocm", "gfx1100", ["rocm=null", f"torch.index={WHL}/cpu"], "vendor-variant"),
    ("base-image-python", "cpu", ["base_image=ubuntu:22.04"], "base-python"),
    ("override-wrong-value", "gfx1031", ["env.HSA_OVERRIDE_GFX_VERSION=11.0.0"], "hsa-override"),
    ("override-not-an-isa", "gfx1031", ["env.HSA_OVERRIDE_GFX_VERSION=gfx1030"], "hsa-override"),
    ("override-on-native", "gfx1100", ["env.HSA_OVERRIDE_GFX_VERSION=10.3.0"], "hsa-override"),
    (
        "override-gfx1103-hangs",
        "gfx1031",
        ["gpu.arch=gfx1103", "env.HSA_OVERRIDE_GFX_VERSION=11.0.0"],
        "override-known-bad",
    ),
    ("env-name", "cpu", ["env.1BAD=x"], "env-name"),
]


@pytest.fixture(autouse=True)
def _shipped_catalogue_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


def _set_args(overrides: list[str]) -> list[str]:
    out: list[str] = []
    for o in overrides:
        out += ["--set", o]
    return out


def test_at_least_fifteen_impossible_cases() -> None:
    assert len(IMPOSSIBLE) >= 15
    assert len({rule for *_, rule in IMPOSSIBLE}) >= 12


@pytest.mark.parametrize(
    ("recipe", "overrides", "rule"),
    [pytest.param(r, o, rule, id=i) for i, r, o, rule in IMPOSSIBLE],
)
def test_impossible_combination_is_refused(
    recipe: str, overrides: list[str], rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["show", recipe, *_set_args(overrides)])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("envforge: error: ")
    assert rule in lines[0]
    assert "(fix: " in lines[0]
    assert "Traceback" not in err

    code = main(["validate", recipe, *_set_args(overrides)])
    _, err = capsys.readouterr()
    assert code == 2
    assert rule in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("recipe", "overrides", "rule"),
    [pytest.param(r, o, rule, id=i) for i, r, o, rule in IMPOSSIBLE if rule != "env-name"],
)
def test_refusal_names_rule_and_source(recipe: str, overrides: list[str], rule: str) -> None:
    loaded = Catalogue.default().load(recipe, overrides)
    found = check(loaded)
    assert found, f"{recipe} {overrides} passed"
    assert found[0].rule == rule
    for v in found:
        assert v.evidence.strip()
        assert v.hint.strip()
        line = v.one_line(loaded.origin)
        assert "\n" not in line
        assert line.startswith(loaded.origin + ": [" + v.rule + "] ")
        assert "(source: " in line
        assert "(fix: " in line


def test_python_range_message_names_conflict_and_fix() -> None:
    r = Catalogue.default().load("gfx1010", ["python=3.11"])
    v = check(r)[0]
    assert v.message == "torch 1.13.1+rocm5.2 publishes wheels for CPython 3.7-3.10, not 3.11"
    assert v.hint == 'set python: "3.10"'


def test_gfx1010_hint_offers_the_override() -> None:
    r = Catalogue.default().load("gfx1010", ["env.HSA_OVERRIDE_GFX_VERSION=null"])
    v = check(r)[0]
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in v.hint
    assert "unreliable" in v.hint


def test_gfx906_hint_points_at_last_working_stack() -> None:
    r = Catalogue.default().load("gfx906", ["rocm=6.4", f"torch.index={WHL}/rocm6.4"])
    v = check(r)[0]
    assert "TensileLibrary" in v.message
    assert 'rocm: "6.3"' in v.hint
    assert "2.9.1" in v.hint


def test_enforce_counts_the_rest() -> None:
    r = Catalogue.default().load("gfx1010", ["python=3.11"])
    assert len(check(r)) == 2  # python-range and base-python (ubuntu:22.04 is 3.10)
    with pytest.raises(ConstraintViolation) as info:
        enforce(r)
    assert info.value.rule == "python-range"
    assert "(and 1 more)" in info.value.one_line()


# --------------------------------------------------------------------------- numpy


@pytest.mark.parametrize(
    ("spec", "bad"),
    [
        (">=1.24", True),
        ("<2", False),
        ("<2.0", False),
        ("==1.26.4", False),
        ("~=1.26", False),
        (">=1.21,<1.27", False),
        (">=1.24,!=2.0.0", True),
        ("<=2.0", True),
        ("==2.*", True),
        ("!=2.*", True),
        ("<3", True),
        (">1.26.4", True),
    ],
)
def test_numpy_bound_for_torch_below_2_3(spec: str, bad: bool) -> None:
    r = Catalogue.default().load("cpu", ["torch.version=2.2.2", f"numpy={spec}"])
    rules = [v.rule for v in check(r)]
    assert ("numpy-abi" in rules) is bad


@pytest.mark.parametrize("torch", ["2.3.0", "2.4.1", "2.13.0"])
def test_numpy_2_allowed_from_torch_2_3(torch: str) -> None:
    r = Catalogue.default().load("cpu", [f"torch.version={torch}", "numpy=>=1.24", "python=3.11"])
    assert "numpy-abi" not in [v.rule for v in check(r)]


# --------------------------------------------------------------------------- catalogue


def _shipped() -> list[Recipe]:
    return Catalogue.default().load_all()


def test_every_shipped_recipe_passes_check() -> None:
    recipes = _shipped()
    assert len(recipes) >= 10
    for r in recipes:
        assert check(r) == [], (r.name, [v.one_line(r.origin) for v in check(r)])


def test_validate_without_arguments_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 0
    out, err = capsys.readouterr()
    assert "FAIL" not in err
    assert out.count("ok ") >= 10


def test_validate_json(capsys: pytest.CaptureFixture[str]) -> None:

    assert main(["validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(row["ok"] for row in data)


def test_explain_gfx1010() -> None:
    r = Catalogue.default().load("gfx1010")
    reasons = {x.pin: x for x in explain(r)}
    assert "python 3.10" in reasons
    assert "3.7-3.10" in reasons["python 3.10"].why
    assert "numpy <2" in reasons
    assert "NumPy 1.x ABI" in reasons["numpy <2"].why
    assert "#107302" in reasons["numpy <2"].source
    hsa = reasons["env HSA_OVERRIDE_GFX_VERSION=10.3.0"]
    assert "[community]" in hsa.why
    miopen = reasons["env MIOPEN_DEBUG_CONV_IMPLICIT_GEMM=1"]
    assert "[uncertain]" in miopen.why
    assert "no-op" in miopen.why
    arch = reasons["gpu.arch gfx1010"]
    assert "gfx1030" in arch.why
    assert "unreliable" in arch.why
    assert all(x.source for x in reasons.values())


def test_explain_cuda_names_driver_floor() -> None:
    reasons = {x.pin: x for x in explain(Catalogue.default().load("sm_90"))}
    assert "580" in reasons["cuda 13.0"].why
    sm61 = {x.pin: x for x in explain(Catalogue.default().load("sm_61"))}
    assert "525" in sm61["cuda 12.6"].why
    assert "binary compatibility" in sm61["gpu.arch sm_61"].why


def test_show_prints_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "gfx1010"]) == 0
    out = capsys.readouterr().out
    assert "Why these pins:" in out
    assert "MIOPEN_DEBUG_CONV_IMPLICIT_GEMM=1  (uncertain)" in out


# --------------------------------------------------------------------------- table


def test_table_parses_and_every_row_has_a_source() -> None:
    t = load_table()
    assert next(r.series for r in t.releases) == "1.12"
    assert [r.series for r in t.releases][-1] == "2.15"
    assert len(t.releases) == 18
    for r in t.releases:
        assert r.source
        assert r.versions
        if r.numpy_breaks is not None:
            assert r.numpy_source
        for v in r.variants:
            assert v.source, (r.series, v.name)
            assert v.python_source, (r.series, v.name)
            assert v.index.startswith("https://download.pytorch.org/whl/")
            assert v.confidence in ("verified", "community", "uncertain")
            if v.kind != "cpu":
                assert v.archs, (r.series, v.name)
                for arch in v.archs:
                    assert v.arch_source(arch)
            for b in v.broken:
                assert b.source
                assert b.reason
    for o in t.overrides:
        assert o.source
        assert o.confidence
    for f in t.driver_floors:
        assert f.source
    for image in t.base_images:
        assert image.source
    keys = {k for k, _ in t.sources}
    assert {"TI", "PV", "RM", "NP2"} <= keys


def test_table_facts_from_the_matrix() -> None:
    t = load_table()
    rocm52 = t.variant("1.13.1", "rocm5.2")
    assert rocm52 is not None
    assert rocm52.python_range("1.13.1") == ("3.7", "3.10")
    assert rocm52.form == "extra-index-url"
    assert rocm52.local == "+rocm5.2"
    assert rocm52.index == f"{WHL}/rocm5.2"
    cu117 = t.variant("1.13.1", "cu117")
    assert cu117 is not None
    assert cu117.admits_python("3.11", "1.13.1")  # per-variant range (matrix 6)
    assert t.variant("2.0.1", "rocm5.4.2") is not None
    assert t.variant("2.0.1", "rocm5.4") is None
    assert t.variant("2.6.0", "rocm6.2.4") is not None
    assert t.variant("1.12.1", "rocm5.1.1") is not None
    v20 = t.variant("2.0.1", "rocm5.4.2")
    assert v20 is not None
    assert v20.form == "index-url"
    assert "gfx1100" not in v20.archs
    v21 = t.variant("2.1.2", "rocm5.6")
    assert v21 is not None
    assert "gfx1100" in v21.archs
    v22 = t.variant("2.2.2", "rocm5.7")
    v23 = t.variant("2.3.1", "rocm6.0")
    assert v22 is not None
    assert v23 is not None
    assert "gfx942" not in v22.archs
    assert "gfx942" in v23.archs
    v26 = t.variant("2.6.0", "rocm6.2.4")
    assert v26 is not None
    # pytorch/pytorch#141667 merged 2024-12-04, before the 2.6 branch cut (issue 20 §6)
    assert "gfx1101" in v26.archs
    assert "gfx1101" not in v26.archs_uncertain
    v213 = t.variant("2.13.0", "rocm7.2")
    assert v213 is not None
    assert "gfx1103" in v213.archs_uncertain
    v29 = t.variant("2.9.1", "rocm6.3")
    v29b = t.variant("2.9.1", "rocm6.4")
    assert v29 is not None
    assert v29b is not None
    assert v29.broken_arch("gfx906") is None
    assert v29b.broken_arch("gfx906") is not None
    assert v29b.broken_arch("gfx900") is not None
    v210 = t.variant("2.10.0", "rocm7.0")
    assert v210 is not None
    assert {"gfx950", "gfx1150", "gfx1151", "gfx1200", "gfx1201"} <= set(v210.archs)
    cpu = t.variant("2.13.0", "cpu")
    assert cpu is not None
    assert cpu.index == f"{WHL}/cpu"
    assert cpu.local == "+cpu"
    r22 = t.release("2.2.2")
    r23 = t.release("2.3.0")
    assert r22 is not None
    assert r22.numpy_breaks == ">=2"
    assert r23 is not None
    assert r23.numpy_breaks is None


def test_cuda_arch_coverage() -> None:
    t = load_table()
    cu126 = t.variant("2.12.1", "cu126")
    cu128 = t.variant("2.9.1", "cu128")
    cu130 = t.variant("2.13.0", "cu130")
    assert cu126 is not None
    assert cu128 is not None
    assert cu130 is not None
    assert cu126.covers("sm_61")  # sm_60 SASS runs on sm_61
    assert not cu128.covers("sm_61")
    assert cu128.covers("sm_70")
    assert not cu130.covers("sm_70")  # CUDA 13 has no Volta
    assert cu130.covers("sm_121")  # sm_120 SASS runs on sm_121 (same major)
    assert cu130.ptx is None  # the index's cu130 wheels carry no PTX (audit E6)
    assert not cu130.covers("sm_110")
    assert not cu126.covers("sm_120")
    assert sm_covered("sm_90a", ["sm_90a"])
    assert not sm_covered("sm_90", ["sm_90a"])
    sm61 = Catalogue.default().load("sm_61")
    assert "sm_61" in cuda_archs(sm61)
    assert "sm_120" not in cuda_archs(sm61)


def test_overrides_and_isa() -> None:
    t = load_table()
    assert override_target("gfx1031") == "10.3.0"
    assert override_target("gfx1010") == "10.3.0"
    rdna1 = t.override_for("gfx1010")
    assert rdna1 is not None
    assert rdna1.status == "unreliable"
    assert rdna1.confidence == "community"
    assert override_target("gfx1103") is None  # known to hang
    assert override_target("gfx1030") is None  # native
    assert gfx_from_isa("10.3.0") == "gfx1030"
    assert gfx_from_isa("9.0.10") == "gfx90a"
    assert gfx_from_isa("11.0.0") == "gfx1100"
    assert gfx_from_isa("gfx1030") is None
    assert isa_from_gfx("gfx90a") == "9.0.10"
    assert isa_from_gfx("gfx1031") == "10.3.1"


def test_recipe_arch_for() -> None:
    assert recipe_arch_for("gfx1032") == ["gfx1032", "gfx1031", "gfx1034", "gfx1035", "gfx1030"]
    assert recipe_arch_for("gfx1010")[:3] == ["gfx1010", "gfx1011", "gfx1012"]
    assert "gfx1030" not in recipe_arch_for("gfx1010")  # RDNA1 needs its own old stack
    assert recipe_arch_for("gfx1103") == ["gfx1103"]
    assert recipe_arch_for("sm_89") == ["sm_89", "sm_87", "sm_86", "sm_80"]
    assert recipe_arch_for("sm_61") == ["sm_61", "sm_60"]


def test_min_driver_and_distro_python() -> None:
    t = load_table()
    assert t.min_driver("11.8") == "450.80.02"
    assert t.min_driver("12.6") == "525"
    assert t.min_driver("13.0") == "580"
    assert min_driver(Catalogue.default().load("sm_90")) == "580"
    assert min_driver(Catalogue.default().load("gfx1030")) is None
    with pytest.raises(KeyError):
        t.min_driver("9.2")
    assert t.distro_python("ubuntu:20.04") == "3.8"
    assert t.distro_python("ubuntu:22.04") == "3.10"
    assert t.distro_python("docker.io/library/ubuntu:24.04") == "3.12"
    assert t.distro_python("debian:bookworm-slim") == "3.11"
    assert t.distro_python("debian:bullseye") == "3.9"
    assert t.distro_python("rocm/dev-ubuntu-22.04:6.2-complete") == "3.10"
    assert t.distro_python("nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04") == "3.10"
    assert t.distro_python("rocm/pytorch:latest") is None
    assert t.arch_for_product("AMD Radeon RX 5700 XT") == "gfx1010"
    assert t.arch_for_product("Radeon RX 6700 XT") == "gfx1031"
    assert t.arch_for_product("NVIDIA GeForce GTX 1080 Ti") == "sm_61"
    assert t.arch_for_product("NVIDIA H100 80GB HBM3") == "sm_90"


def test_numpy_wheels_per_python() -> None:
    t = load_table()
    py311 = t.numpy_installable("3.11")
    assert "1.23.2" in py311
    assert "1.23.1" not in py311  # cp311 wheels start at 1.23.2
    assert "2.3.0" in py311
    assert "1.26.4" not in t.numpy_installable("3.13")
    assert "2.1.0" in t.numpy_installable("3.13")


def test_unknown_base_image_passes() -> None:
    r = Catalogue.default().load("cpu", ["base_image=registry.example/custom:1"])
    assert check(r) == []


def test_check_takes_an_explicit_table() -> None:
    t = load_table()
    r = Catalogue.default().load("gfx1010")
    empty_overrides = replace(t, overrides=())
    assert check(r, t) == []
    # Without the override entry, the gfx1010 override is not contradicted (unknown arch),
    # and its target gfx1030 is in the wheel: still accepted.
    assert check(r, empty_overrides) == []
    no_images = replace(t, base_images=())
    bad_py = Catalogue.default().load("cpu", ["base_image=ubuntu:22.04"])
    assert check(bad_py, no_images) == []


def _raw_table() -> dict[str, Any]:
    data = yaml.safe_load(data_file("compat.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _variant_row(data: dict[str, Any], series: str, name: str) -> dict[str, Any]:
    release = next(r for r in data["releases"] if r["series"] == series)
    row: dict[str, Any] = next(v for v in release["variants"] if v["name"] == name)
    return row


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d["releases"][0].pop("source"), id="release-without-source"),
        pytest.param(
            lambda d: d["releases"][1]["variants"][0].pop("source"), id="variant-without-source"
        ),
        pytest.param(lambda d: d["rocm_archs"][0].pop("source"), id="arch-row-without-source"),
        pytest.param(lambda d: d["hsa_overrides"][0].pop("source"), id="override-without-source"),
        pytest.param(lambda d: d["base_images"][0].pop("source"), id="image-without-source"),
        pytest.param(
            lambda d: d["releases"][0].update(python=["3.10", "3.7"]), id="python-range-reversed"
        ),
        pytest.param(lambda d: d["releases"][0].update(python=[3.7, 3.1]), id="python-as-numbers"),
        pytest.param(
            lambda d: d["releases"][5]["variants"][0].update(confidence="sure"), id="bad-confidence"
        ),
        pytest.param(
            lambda d: d["releases"][5]["variants"].append({"name": "rocm9", "source": "x"}),
            id="bad-variant-name",
        ),
        pytest.param(lambda d: d["releases"][3].update(numpy_breaks=">>2"), id="bad-specifier"),
        pytest.param(lambda d: d["releases"][3].update(extra="x"), id="unknown-key"),
        pytest.param(
            lambda d: d["releases"][2]["versions"].append("1.13.1"), id="version-listed-twice"
        ),
        pytest.param(lambda d: d["hsa_overrides"][0].update(value="10.3"), id="bad-isa"),
        pytest.param(lambda d: d["numpy_releases"].pop("source"), id="numpy-without-source"),
        pytest.param(
            lambda d: d["numpy_releases"]["series"][0]["python_from"].update({"3.9": "9.9.9"}),
            id="numpy-python-from-unknown-version",
        ),
        pytest.param(
            lambda d: d["releases"][8]["variants"][0].update(form="extra-index-url"),
            id="wrong-index-form",
        ),
        pytest.param(lambda d: d["releases"][0].update(checked="23/11/2026"), id="bad-checked"),
        pytest.param(lambda d: d["rocm_archs"][0].update(rocm_below="x"), id="bad-rocm-below"),
        pytest.param(
            lambda d: _variant_row(d, "2.14", "rocm7.2").update(python_files={"2.13.0": ["3.12"]}),
            id="python-files-other-release",
        ),
        pytest.param(
            lambda d: _variant_row(d, "2.14", "rocm7.2").update(python_files={"2.14.1": ["3.9"]}),
            id="python-files-outside-range",
        ),
        pytest.param(
            lambda d: _variant_row(d, "2.14", "rocm7.2").pop("python_files"),
            id="python-files-source-alone",
        ),
        pytest.param(
            lambda d: _variant_row(d, "2.14", "rocm7.2").pop("python_files_source"),
            id="python-files-without-source",
        ),
        pytest.param(lambda d: d["amd_archs"]["gfx1035"].update(checked="soon"), id="arch-checked"),
        pytest.param(
            lambda d: _variant_row(d, "2.14", "cu130").update(arch_confidence="uncertain"),
            id="arch-confidence-on-cuda",
        ),
        pytest.param(
            lambda d: _variant_row(d, "2.14", "rocm7.14").update(arch_confidence="maybe"),
            id="arch-confidence-bad",
        ),
        pytest.param(
            lambda d: d["numpy_releases"]["series"][12].update(yanked={"9.9.9": "why"}),
            id="numpy-yanked-unknown-version",
        ),
    ],
)
def test_malformed_table_is_refused(mutate: Any) -> None:
    data = copy.deepcopy(_raw_table())
    mutate(data)
    with pytest.raises(TableError):
        parse_table(data)


def test_shipped_table_file_is_the_one_loaded() -> None:
    assert data_file("compat.yaml").is_file()
    assert Path(data_file("compat.yaml")).parent.name == "data"
    assert parse_table(_raw_table()) == load_table()


# --------------------------------------------------------------------------- audit 2026-11-23


def test_every_release_row_was_checked_against_the_index() -> None:
    for r in load_table().releases:
        assert r.checked == "2026-11-23", r.series


@pytest.mark.parametrize(
    ("series", "default"),
    [
        ("1.12", "cu102"),
        ("1.13", "cu117"),
        ("2.0", "cu117"),
        ("2.1", "cu121"),
        ("2.2", "cu121"),
        ("2.3", "cu121"),
        ("2.4", "cu121"),
        ("2.5", "cu124"),
        ("2.6", "cu124"),
        ("2.7", "cu126"),
        ("2.8", "cu128"),
        ("2.9", "cu128"),
        ("2.10", "cu128"),
        ("2.11", "cu130"),
        ("2.12", "cu130"),
        ("2.13", "cu130"),
        ("2.14", "cu130"),
        ("2.15", "cu132"),
    ],
)
def test_every_release_names_its_package_index_build(series: str, default: str) -> None:
    release = load_table().series(series)
    assert release is not None
    assert [v.name for v in release.variants if v.pypi_default] == [default]


def test_pypi_default_needs_no_index() -> None:
    # torch==2.13.0 from the default index is the cu130 build (audit E3)
    recipe = Catalogue.default().load("sm_90")
    plain = replace(recipe, torch=replace(recipe.torch, version="2.13.0", index=None))
    assert [v.rule for v in check(plain)] == []


def test_new_releases_2_14_and_2_15() -> None:
    t = load_table()
    r214, r215 = t.series("2.14"), t.series("2.15")
    assert r214 is not None
    assert r215 is not None
    assert r214.versions == ("2.14.0", "2.14.1")
    assert (r214.python_min, r214.python_max) == ("3.10", "3.14")
    assert r214.variant_names == ("rocm7.2", "rocm7.14", "cu126", "cu130", "cu132", "cpu")
    assert r215.versions == ("2.15.0",)
    assert (r215.python_min, r215.python_max) == ("3.11", "3.15")
    assert r215.variant("cu126") is None  # removed (test-infra#8739)
    cu132 = r215.variant("cu132")
    assert cu132 is not None
    assert cu132.confidence == "verified"
    assert cu132.ptx is None
    for name in ("rocm7.14", "rocm10.0", "cu134", "cpu"):
        v = r215.variant(name)
        assert v is not None, name
        assert v.confidence == "uncertain", name
    cu130 = r215.variant("cu130")  # users report 2.15.0+cu130 wheels: raised from uncertain
    assert cu130 is not None
    assert cu130.confidence == "community"
    rocm714 = r214.variant("rocm7.14")
    rocm72 = r214.variant("rocm7.2")
    assert rocm714 is not None
    assert rocm72 is not None
    assert "gfx906" not in rocm714.archs
    assert "gfx900" not in rocm714.archs
    assert "gfx906" in rocm72.archs


def test_pascal_is_served_through_2_14_and_not_after() -> None:
    t = load_table()
    assert t.variant("2.14.1", "cu126") is not None
    assert all(not v.covers("sm_61") for v in t.releases[-1].variants if v.kind == "cuda")
    assert Catalogue.default().load("sm_61").torch.version == "2.14.1"


def test_sass_lists_from_the_wheels() -> None:
    t = load_table()
    cu102 = t.variant("1.12.1", "cu102")
    assert cu102 is not None
    assert cu102.archs == ("sm_37", "sm_50", "sm_60", "sm_70")
    assert not cu102.covers("sm_35")  # Kepler K40 has no kernels (audit E5)
    for version, name in [("1.13.1", "cu117"), ("2.0.1", "cu118"), ("2.4.1", "cu121")]:
        v = t.variant(version, name)
        assert v is not None
        assert "sm_61" not in v.archs, (version, name)
        assert v.covers("sm_61"), (version, name)
    for version in ("2.11.0", "2.12.1", "2.13.0", "2.14.1"):
        v = t.variant(version, "cu130")
        assert v is not None, version
        assert v.ptx is None, version


def test_gfx1103_is_in_2_13_wheels_with_a_caveat() -> None:
    t = load_table()
    v213 = t.variant("2.13.0", "rocm7.2")
    v212 = t.variant("2.12.1", "rocm7.2")
    assert v213 is not None
    assert v212 is not None
    assert "gfx1103" in v213.archs_uncertain
    assert "Caveat" in v213.arch_source("gfx1103")
    assert "gfx1103" not in v212.archs


def test_2_5_cp313_and_1_12_sources_and_numpy_yank() -> None:
    t = load_table()
    for name in ("cu118", "cu121", "cu124", "cpu"):
        v = t.variant("2.5.1", name)
        assert v is not None, name
        assert v.admits_python("3.13"), name
    rocm = t.variant("2.5.1", "rocm6.2")
    assert rocm is not None
    assert not rocm.admits_python("3.13")
    r112 = t.series("1.12")
    assert r112 is not None
    assert "TI" not in r112.source.split("; ")
    rocm50 = r112.variant("rocm5.0")
    assert rocm50 is not None
    assert rocm50.confidence == "verified"
    np24 = next(n for n in t.numpy_releases if n.series == "2.4")
    assert dict(np24.yanked).keys() == {"2.4.0"}


def test_variant_hint_prefers_a_confirmed_variant() -> None:
    recipe = Catalogue.default().load(
        "sm_90", ["torch.version=2.15.0", "cuda=12.6", f"torch.index={WHL}/cu126"]
    )
    found = check(recipe)
    assert found[0].rule == "variant-published"
    assert 'set cuda: "13.2"' in found[0].hint  # not the unconfirmed cu134


def test_cuda_toolkit_rows_name_the_lines_torch_pins_and_those_none_uses() -> None:
    """cuda_toolkits (audit 2026-11-27 §4.7): each torch series a row names pins that CUDA
    line in its package-index build; 13.3 to 13.5 are published and no torch uses them."""
    table = load_table()
    kits = {k.line: k for k in table.cuda_toolkits}
    assert {"13.4", "13.5"} <= set(kits)
    for kit in table.cuda_toolkits:
        assert kit.released
        assert kit.checked
        for series in kit.torch:
            release = table.series(series)
            assert release is not None, f"{kit.version}: no {series} row"
            default = next(v for v in release.variants if v.pypi_default)
            assert default.name == "cu" + kit.line.replace(".", ""), (kit.version, series)
    assert kits["13.2"].torch == ("2.15",)
    for line in ("13.3", "13.4", "13.5"):
        assert kits[line].torch == ()


def test_an_overlay_toolkit_row_replaces_its_cuda_line() -> None:
    raw = yaml.safe_load(data_file("compat.yaml").read_text(encoding="utf-8"))
    overlay = {
        "schema": 1,
        "cuda_toolkits": [
            {
                "version": "13.5.1",
                "released": "2026-12-01",
                "torch": [],
                "source": "https://example.org/k",
            }
        ],
    }
    table = parse_layers([("compat.yaml", raw), ("mine.yaml", overlay)])
    newest = table.cuda_toolkits[-1]
    assert (newest.version, newest.origin) == ("13.5.1", "mine.yaml")
    assert sum(k.line == "13.5" for k in table.cuda_toolkits) == 1
    bad = {
        "schema": 1,
        "cuda_toolkits": [{"version": "13.6.0", "released": "soon", "torch": [], "source": "x"}],
    }
    with pytest.raises(TableError, match=r"cuda_toolkits\[0\]\.released"):
        parse_layers([("compat.yaml", raw), ("bad.yaml", bad)])


def test_rocm_10_is_recorded_as_released_but_its_pytorch_index_build_unconfirmed() -> None:
    """ROCm 10.0.0 (2026-08-26) validates PyTorch 2.13 from AMD's own index; the PyTorch
    index's rocm10.0 build of 2.15 stays uncertain until a file of it is seen."""
    variant = load_table().variant("2.15.0", "rocm10.0")
    assert variant is not None
    assert variant.confidence == "uncertain"
    assert "rocm.docs.amd.com/en/docs-10.0.0/about/release-notes.html" in variant.source
    assert "pytorch/test-infra#8670" in variant.source
    assert "2026-08-26" in variant.note
    assert "AMD" in variant.note


def test_knowledge_show_lists_the_cuda_toolkit_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["knowledge", "show"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("CUDA toolkits"))
    assert "13.2.2 (2026-07-16, torch 2.15)" in line
    assert "13.5.0 (2026-11-04, no torch yet)" in line
