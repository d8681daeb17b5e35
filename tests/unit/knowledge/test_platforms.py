"""Platforms in the table (issue 20 §1, §2): per-platform SASS and CPython rows, the
Tegra refusal, ``--platform`` on validate, and the host platform ``detect`` reports."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from envforge.cli import main
from envforge.core.resources import data_file
from envforge.errors import TableError
from envforge.host.detect import detect, no_tools
from envforge.knowledge import check, load_table
from envforge.knowledge.parse import parse_table
from envforge.knowledge.platforms import platform_of
from envforge.lock import serves_platform
from tests.helpers import paths
from tests.helpers.recipes import make_recipe

TABLE = load_table()
RAW = yaml.safe_load(data_file("compat.yaml").read_text(encoding="utf-8"))


def rules(found: list) -> list[str]:  # type: ignore[type-arg]
    return [v.rule for v in found]


@pytest.mark.parametrize(
    ("version", "variant", "python"),
    [
        ("2.11.0", "cu130", ("3.10", "3.14")),
        ("2.14.1", "cu130", ("3.10", "3.14")),
        ("2.15.0", "cu132", ("3.11", "3.15")),
    ],
)
def test_arm64_wheels_have_their_own_sass_and_cpython(
    version: str, variant: str, python: tuple[str, str]
) -> None:
    published = TABLE.variant(version, variant)
    assert published is not None
    arm = published.for_platform("linux/arm64")
    assert arm is not None
    assert arm.archs == ("sm_80", "sm_90", "sm_100", "sm_110", "sm_120")
    assert "sm_75" in published.archs
    assert "sm_110" not in published.archs
    assert arm.python_range() == python
    assert published.for_platform("linux/amd64") is published


def test_rocm_and_unread_variants_have_no_arm64_row() -> None:
    assert TABLE.variant("2.14.1", "rocm7.2").for_platform("linux/arm64") is None  # type: ignore[union-attr]
    assert TABLE.variant("2.14.1", "cu126").for_platform("linux/arm64") is None  # type: ignore[union-attr]


def test_a_rocm_platform_row_is_refused_naming_the_key() -> None:
    raw = copy.deepcopy(RAW)
    row = next(r for r in raw["releases"] if r["series"] == "2.14")
    rocm = next(v for v in row["variants"] if v["name"] == "rocm7.2")
    rocm["platforms"] = {"linux/arm64": {"python_source": "PYPI"}}
    with pytest.raises(TableError, match=r"platforms\.linux/arm64.*linux/amd64 only"):
        parse_table(raw)


def test_an_unknown_platform_key_is_refused() -> None:
    raw = copy.deepcopy(RAW)
    row = next(r for r in raw["releases"] if r["series"] == "2.14")
    cuda = next(v for v in row["variants"] if v["name"] == "cu130")
    cuda["platforms"] = {"linux/riscv64": {"python_source": "PYPI"}}
    with pytest.raises(TableError, match="linux/riscv64"):
        parse_table(raw)


ORIN = {"vendor": "nvidia", "arch": "sm_87", "torch": "2.14.1", "cuda": "13.0"}


def test_a_jetson_recipe_on_index_wheels_is_refused_with_the_route() -> None:
    found = check(make_recipe(**ORIN, index="https://download.pytorch.org/whl/cu130"), TABLE)
    tegra = [v for v in found if v.rule == "tegra"]
    assert tegra
    assert not tegra[0].unknown
    assert "JetPack" in tegra[0].hint
    assert "https://docs.nvidia.com/" in tegra[0].evidence


def test_a_sourced_jetson_row_lifts_the_refusal() -> None:
    raw = copy.deepcopy(RAW)
    row = next(r for r in raw["releases"] if r["series"] == "2.14")
    cuda = next(v for v in row["variants"] if v["name"] == "cu130")
    cuda["platforms"] = {
        "tegra": {"sm": ["sm_87"], "sm_source": "https://example.org/j", "python_source": "PYPI"}
    }
    table = parse_table(raw)
    found = check(make_recipe(**ORIN, index="https://download.pytorch.org/whl/cu130"), table)
    assert "tegra" not in rules(found)


def test_validate_platform_rows() -> None:
    sm90 = make_recipe(
        vendor="nvidia",
        arch="sm_90",
        torch="2.14.1",
        cuda="13.0",
        index="https://download.pytorch.org/whl/cu130",
        python="3.12",
        base_image="ubuntu:24.04",
    )
    assert check(sm90, TABLE, platform="linux/arm64") == []
    sm75 = make_recipe(sm90, arch="sm_75")
    assert check(sm75, TABLE) == []
    assert rules(check(sm75, TABLE, platform="linux/arm64")) == ["cuda-arch"]
    cpu = make_recipe(torch="2.13.0+cpu", index="https://download.pytorch.org/whl/cpu")
    unknown = [v for v in check(cpu, TABLE, platform="linux/arm64") if v.rule == "platform"]
    assert unknown  # no row read for 2.13 cpu on arm64: uncertain
    assert unknown[0].unknown


def test_validate_cli_takes_platform(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = paths.ROOT
    assert main(["validate", str(root / "recipes/sm_90.yaml"), "--platform", "linux/arm64"]) == 0
    assert main(["validate", str(root / "recipes/gfx1100.yaml"), "--platform", "linux/arm64"]) == 2
    assert "linux/amd64 only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("machine", "platform"),
    [("x86_64", "linux/amd64"), ("aarch64", "linux/arm64"), ("arm64", "linux/arm64")],
)
def test_platform_names(machine: str, platform: str) -> None:
    assert platform_of(machine) == platform


def test_detect_reports_the_host_platform(tmp_path: Path) -> None:
    host = detect(root=tmp_path, environ={}, tools=no_tools)
    assert host.platform == platform_of(host.machine)
    assert host.to_dict()["platform"] == host.platform


def test_detect_cli_json_has_the_platform(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["platform"] == platform_of(data["machine"])


def test_render_names_the_platform_in_every_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "sm_90", "--platform", "linux/arm64"]) == 0
    froms = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FROM ")]
    assert froms == [
        "FROM --platform=linux/arm64 ubuntu:24.04 AS torch",
        "FROM torch AS build",
        "FROM --platform=linux/arm64 ubuntu:24.04",
    ]
    assert main(["render", "sm_90"]) == 0  # the default leaves the engine's own platform
    assert "--platform" not in capsys.readouterr().out


def test_build_refuses_a_platform_the_table_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    """Before any engine is contacted: ROCm wheels have no linux/arm64 build (exit 2)."""
    assert main(["build", "gfx1100", "--platform", "linux/arm64"]) == 2
    assert "linux/amd64 only" in capsys.readouterr().err
    assert main(["build", "cpu", "--backend", "venv", "--platform", "linux/arm64"]) == 2
    assert "--platform" in capsys.readouterr().err


def test_render_refuses_a_platform_the_table_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """render --platform checks the recipe against that platform's row (exit 2, nothing
    written), as validate and build do."""
    assert main(["render", "gfx1100", "--platform", "linux/arm64"]) == 2
    assert "linux/amd64 only" in capsys.readouterr().err
    assert main(["render", "sm_75", "--platform", "linux/arm64"]) == 2
    err = capsys.readouterr().err
    assert "[cuda-arch]" in err
    assert "--platform linux/amd64" in err
    out = tmp_path / "out"
    assert main(["render", "--all", "-o", str(out), "--platform", "linux/arm64"]) == 2
    assert not out.exists() or not any(out.iterdir())


def test_the_default_platform_is_the_hosts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On an arm64 host a Turing recipe is refused by render, validate and build (before
    any engine) without --platform: the arm64 wheels carry no sm_75 SASS."""
    monkeypatch.setattr("envforge.knowledge.platforms._platform.machine", lambda: "aarch64")
    for argv in (["render", "sm_75"], ["validate", "sm_75"], ["build", "sm_75"]):
        assert main(argv) == 2, argv
        assert "has no code for sm_75" in capsys.readouterr().err
    assert main(["render", "sm_90"]) == 0
    assert "--platform" not in capsys.readouterr().out  # FROM names a platform only when asked


def test_a_missing_arch_names_the_platform_whose_wheels_have_it() -> None:
    sm90 = make_recipe(
        vendor="nvidia",
        arch="sm_90",
        torch="2.14.1",
        cuda="13.0",
        index="https://download.pytorch.org/whl/cu130",
        python="3.12",
        base_image="ubuntu:24.04",
    )
    turing = check(make_recipe(sm90, arch="sm_75"), TABLE, platform="linux/arm64")
    assert turing[0].hint == (
        "no linux/arm64 wheel has code for sm_75; the linux/amd64 wheels have: "
        "--platform linux/amd64"
    )
    thor = check(make_recipe(sm90, arch="sm_110"), TABLE)
    assert rules(thor) == ["cuda-arch"]
    assert thor[0].hint.endswith("--platform linux/arm64")
    assert check(make_recipe(sm90, arch="sm_110"), TABLE, platform="linux/arm64") == []


@pytest.mark.parametrize(
    ("platform", "serves"), [(None, True), ("linux/amd64", True), ("linux/arm64", False)]
)
def test_a_lock_serves_only_its_own_platform(platform: str | None, serves: bool) -> None:
    assert serves_platform(platform) is serves


# ----------------------------------------------------------------------------- JetPack lines


def test_jetpack_lines_are_a_platform_dimension_of_the_jetson_archs() -> None:
    route = TABLE.tegra
    assert route is not None
    lines = {j.jetpack: j for j in route.for_arch("sm_87")}
    assert set(lines) == {"6", "7.2"}
    assert (lines["6"].l4t, lines["6"].cuda, lines["6"].wheels) == ("R36", "12.6", "tegra")
    assert "https://pypi.jetson-ai-lab.io/jp6/cu126" in lines["6"].route
    assert (lines["7.2"].l4t, lines["7.2"].cuda) == ("R39", "13.2")
    assert route.running("sm_87", "linux/arm64") is lines["7.2"]
    assert route.running("sm_87", "linux/amd64") is None
    assert route.running("sm_72", "linux/arm64") is None  # Xavier: no SBSA JetPack
    thor = route.running("sm_110", "linux/arm64")
    assert thor is not None
    assert "sbsa/cu130" in thor.route
    assert all(lib in thor.route for lib in ("nvpl-blas", "nvpl-lapack", "nvidia-cudss-cu13"))
    for line in route.jetpacks:
        assert line.confidence == "community"
        assert "https://" in line.source


def test_orin_on_the_arm64_wheels_passes_on_jetpack_7_2_only() -> None:
    orin = make_recipe(
        **ORIN,
        index="https://download.pytorch.org/whl/cu130",
        python="3.12",
        base_image="ubuntu:24.04",
    )
    assert "tegra" not in rules(check(orin, TABLE, platform="linux/arm64"))
    refused = [v for v in check(orin, TABLE) if v.rule == "tegra"]
    assert refused
    assert "JetPack 6 (L4T R36, CUDA 12.6)" in refused[0].hint
    assert "jp6/cu126" in refused[0].hint
    assert "NixOS/nixpkgs/issues/530931" in refused[0].evidence


def test_solve_orin_names_each_jetpacks_route(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", "sm_87"]) == 2
    err = capsys.readouterr().err
    assert "https://pypi.jetson-ai-lab.io/jp6/cu126" in err
    assert "--platform linux/arm64" in err
    assert "forums.developer.nvidia.com" not in err.split("(source:")[0]
    assert main(["solve", "sm_87", "--platform", "linux/arm64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stack"]["platform"] == "linux/arm64"
    assert data["stack"]["confidence"] == "community"
    assert any("JetPack 7.2 (L4T R39, CUDA 13.2)" in n for n in data["notes"])


def test_a_malformed_jetpack_row_is_one_line(tmp_path: Path) -> None:
    raw = copy.deepcopy(RAW)
    raw["tegra"]["jetpacks"][0]["wheels"] = "linux/riscv64"
    with pytest.raises(TableError, match=r"tegra\.jetpacks\[0\]\.wheels"):
        parse_table(raw)


def test_the_jetson_refusal_scopes_its_claim_to_the_jetpacks_that_need_jetson_wheels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The package index's wheels run Orin on JetPack 7.2: the refusal says they do not
    run on JetPack 6 and older, not on every L4T (audit 2026-11-27 B15)."""
    assert main(["solve", "sm_87"]) == 2
    head = capsys.readouterr().err.split("; use ")[0]
    assert "do not run on JetPack 6 (L4T R36, CUDA 12.6) and older" in head
    assert main(["solve", "sm_72"]) == 2  # Xavier: no JetPack line runs them
    assert "do not run on L4T/JetPack" in capsys.readouterr().err
    orin = make_recipe(**ORIN, index="https://download.pytorch.org/whl/cu130")
    refused = [v for v in check(orin, TABLE) if v.rule == "tegra"]
    assert "does not run on JetPack 6 (L4T R36, CUDA 12.6) and older" in refused[0].message
