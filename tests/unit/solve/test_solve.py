"""``envforge solve``: the pure solver over every arch the table knows, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envforge.cli import main
from envforge.knowledge import check, load_table
from envforge.knowledge.arch import NVIDIA_COMPUTE_CAPABILITIES, vendor_of
from envforge.knowledge.table import CompatTable
from envforge.recipe.load import load_recipe_file, parse_recipe
from envforge.solve.solver import (
    NoStack,
    Solution,
    SolveRequest,
    UnknownArch,
    evidence_links,
    known_archs,
    solve,
)
from tests.helpers.paths import ROOT

TABLE = load_table()

#: Archs no published wheel in the table can run (and why), checked below.
UNSOLVABLE = {
    "sm_35": "none could",
    "sm_53": "Jetson",
    "sm_62": "Jetson",
    "sm_72": "Jetson",
    "sm_87": "Jetson",
    "gfx803": "none could",
    "gfx90c": "none could",
    "gfx1153": "none could",
    "gfx1010": "unreliable",
    "gfx1011": "unreliable",
    "gfx1012": "unreliable",
    "gfx1033": "broken",
    "gfx1036": "unreliable",
    "gfx1152": "unreliable",
}

SECTION_3 = (
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_89",
    "sm_100",
    "sm_120",
    "gfx908",
    "gfx1032",
    "gfx1101",
    "gfx1102",
    "gfx1200",
    "gfx1201",
    "gfx1151",
)


def solvable() -> list[str]:
    return [a for a in known_archs(TABLE) if a not in UNSOLVABLE]


def validated(solution: Solution) -> list[str]:
    recipe = parse_recipe(solution.recipe_dict(), f"<solve {solution.arch}>")
    found = check(recipe, TABLE, platform=solution.stack.platform)
    return [v.one_line(recipe.origin) for v in found]


@pytest.mark.parametrize("conservative", [False, True])
@pytest.mark.parametrize("arch", solvable())
def test_every_known_arch_solves_to_a_stack_the_rules_accept(arch: str, conservative: bool) -> None:
    solution = solve(SolveRequest(arch, conservative=conservative), TABLE)
    assert solution.arch == arch
    assert validated(solution) == []
    keys = [p.key for p in solution.picks]
    assert keys[:2] == ["torch", "variant"]
    assert {"python", "base_image", "numpy"} <= set(keys)
    assert all(p.reason and p.source for p in solution.picks)
    assert TABLE.distro_python(solution.stack.base_image) == solution.stack.python


def test_unsolvable_and_solvable_archs_cover_the_table() -> None:
    archs = known_archs(TABLE)
    assert set(UNSOLVABLE) <= set(archs)
    for arch, why in UNSOLVABLE.items():
        with pytest.raises(NoStack, match=why):
            solve(SolveRequest(arch), TABLE)


@pytest.mark.parametrize("arch", ["sm_35", "gfx803"])
def test_an_arch_no_wheel_ever_ran_is_refused_saying_none(arch: str) -> None:
    with pytest.raises(NoStack, match="none could") as err:
        solve(SolveRequest(arch), TABLE)
    assert err.value.exit_code == 2


def test_unreliable_override_is_not_used_and_said_so() -> None:
    with pytest.raises(NoStack, match="override is unreliable"):
        solve(SolveRequest("gfx1010"), TABLE)


def test_constraints_that_exclude_every_wheel_name_the_last_release_that_could() -> None:
    with pytest.raises(NoStack, match=r"last release that can run sm_61 is torch 2\.14\.1\+cu126"):
        solve(SolveRequest("sm_61", torch="2.15.0"), TABLE)
    with pytest.raises(
        NoStack, match=r"last release that can run gfx906 is torch 2\.9\.1\+rocm6\.3"
    ):
        solve(SolveRequest("gfx906", python="3.15"), TABLE)


def test_the_last_release_named_in_an_error_is_a_verified_variant() -> None:
    """2.15.0+cu134 is in the table as uncertain: the error names the verified +cu132."""
    with pytest.raises(NoStack) as err:
        solve(SolveRequest("sm_89", python="3.15"), TABLE)
    assert "last release that can run sm_89 is torch 2.15.0+cu132" in str(err.value)
    assert "cu134" not in str(err.value)


# sm_99 and other plain SMs are predicted now (test_predict.py); gfx1234 has no family.
@pytest.mark.parametrize("arch", ["gfx9999", "foo", "gfx1234"])
def test_unknown_arch_names_the_nearest_known(arch: str) -> None:
    with pytest.raises(UnknownArch, match="nearest known: ") as err:
        solve(SolveRequest(arch), TABLE)
    assert err.value.exit_code == 2
    if arch == "gfx1234":
        assert "gfx1201" in str(err.value)


def test_newest_release_with_code_for_the_arch() -> None:
    assert solve(SolveRequest("sm_89"), TABLE).stack.torch == "2.15.0"
    # Volta: cu126 of 2.14.1 is the last wheel with sm_70 code (2.15 has no cu126).
    v100 = solve(SolveRequest("sm_70"), TABLE)
    assert (v100.stack.torch, v100.stack.variant, v100.stack.via) == ("2.14.1", "cu126", "sass")
    pascal = solve(SolveRequest("sm_61"), TABLE)
    assert (pascal.stack.variant, pascal.stack.via, pascal.stack.runs) == (
        "cu126",
        "same-major",
        "sm_60",
    )
    # gfx906 is listed but broken from ROCm 6.4: the rocm6.3 wheels of 2.9.1 are the last.
    mi50 = solve(SolveRequest("gfx906"), TABLE)
    assert (mi50.stack.torch, mi50.stack.variant) == ("2.9.1", "rocm6.3")


def test_override_from_the_table_sets_the_env_var() -> None:
    solution = solve(SolveRequest("gfx1032"), TABLE)
    assert solution.stack.via == "override"
    env = solution.recipe_dict()["env"]["HSA_OVERRIDE_GFX_VERSION"]
    assert env["value"] == "10.3.0"
    assert env["confidence"] == "community"
    assert "https://github.com/ROCm/legacy-rocm-build/issues/1797" in env["evidence"]


def test_conservative_prefers_evidence_over_the_newest() -> None:
    latest = solve(SolveRequest("gfx1151", latest=True), TABLE)
    assert latest.stack.confidence == "uncertain"  # 2.15's ROCm variants are unconfirmed
    assert latest.mode == "latest"
    said = "--latest: the newest stack, uncertain choices allowed"
    assert any(n.startswith(said) for n in latest.notes)
    default = solve(SolveRequest("gfx1151"), TABLE)
    assert f"without --latest: {default.stack.label}" in " ".join(latest.notes)
    safe = solve(SolveRequest("gfx1151", conservative=True), TABLE)
    assert safe.stack.confidence == "verified"
    assert safe.stack.torch != "2.15.0"
    assert latest.runner_ups
    assert safe.runner_ups


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1151", "gfx942", "gfx1201"])
def test_the_default_is_the_newest_verified_stack(arch: str) -> None:
    """Issue 20 §3: not 2.15.0+rocm10.0 (no evidence found) but the newest verified stack,
    saying what --latest would choose."""
    default = solve(SolveRequest(arch), TABLE)
    latest = solve(SolveRequest(arch, latest=True), TABLE)
    assert default.mode == "verified"
    assert default.stack.confidence == "verified"
    assert latest.stack.confidence == "uncertain"
    assert (default.stack.torch, default.stack.variant) != ("2.15.0", "rocm10.0")
    assert f"--latest would choose {latest.stack.label}" in " ".join(default.notes)


def test_only_uncertain_stacks_are_still_solved_and_said_so() -> None:
    only = solve(SolveRequest("gfx1250"), TABLE)  # in the 2.15 nightly list only
    assert only.stack.confidence == "uncertain"
    assert only.stack.torch == "2.15.0"


def test_arm64_has_its_own_sass_list() -> None:
    """The linux/arm64 wheels carry sm_80 sm_90 sm_100 sm_110 sm_120, not sm_75/sm_86."""
    with pytest.raises(NoStack, match="on linux/arm64; the linux/amd64 wheels have code"):
        solve(SolveRequest("sm_75", platform="linux/arm64"), TABLE)
    ampere = solve(SolveRequest("sm_86", platform="linux/arm64"), TABLE)
    assert (ampere.stack.via, ampere.stack.runs, ampere.stack.platform) == (
        "same-major",
        "sm_80",
        "linux/arm64",
    )
    amd64 = solve(SolveRequest("sm_86"), TABLE)
    assert (amd64.stack.via, amd64.stack.platform) == ("sass", "linux/amd64")
    with pytest.raises(NoStack, match="linux/arm64"):
        solve(SolveRequest("gfx1100", platform="linux/arm64"), TABLE)


def test_thor_and_gb10_are_solved_on_arm64() -> None:
    thor = solve(SolveRequest("sm_110"), TABLE)
    assert (thor.stack.via, thor.stack.platform) == ("sass", "linux/arm64")
    assert thor.stack.confidence == "community"  # runtime on JetPack 7: third-party reports
    spark = solve(SolveRequest("sm_121"), TABLE)
    assert (spark.stack.via, spark.stack.runs, spark.stack.platform) == (
        "same-major",
        "sm_120",
        "linux/arm64",
    )
    with pytest.raises(NoStack, match="only on linux/arm64"):
        solve(SolveRequest("sm_121", platform="linux/amd64"), TABLE)


@pytest.mark.parametrize("arch", ["sm_53", "sm_62", "sm_72", "sm_87"])
def test_jetson_archs_are_routed_to_jetpack(arch: str) -> None:
    with pytest.raises(NoStack, match="JetPack wheels") as err:
        solve(SolveRequest(arch), TABLE)
    assert err.value.exit_code == 2
    assert "https://docs.nvidia.com/" in str(err.value)


def test_driver_floor_excludes_wheels_the_driver_cannot_load() -> None:
    old = solve(SolveRequest("sm_89", driver="550.54.14"), TABLE)
    assert old.stack.variant.startswith("cu12")
    assert any(p.key == "driver" and "550.54.14 meets" in p.reason for p in old.picks)
    new = solve(SolveRequest("sm_89", driver="580.65.06"), TABLE)
    assert new.stack.variant.startswith("cu13")
    with pytest.raises(NoStack, match="needs NVIDIA driver"):
        solve(SolveRequest("sm_89", driver="400"), TABLE)


def test_python_and_base_image_requests() -> None:
    py = solve(SolveRequest("sm_90", python="3.12"), TABLE)
    assert (py.stack.python, py.stack.base_image) == ("3.12", "ubuntu:24.04")
    img = solve(SolveRequest("sm_90", base_image="ubuntu:22.04"), TABLE)
    assert img.stack.python == "3.10"
    assert img.stack.torch == "2.14.1"  # 2.15 has no cp310 wheels
    with pytest.raises(NoStack, match=r"ships Python 3\.10, not 3\.12"):
        solve(SolveRequest("sm_90", python="3.12", base_image="ubuntu:22.04"), TABLE)


def test_numpy_bound_from_the_release_breaks() -> None:
    old = solve(SolveRequest("sm_86", torch="2.1.2"), TABLE)
    assert old.stack.numpy == "<2"
    assert validated(old) == []
    assert solve(SolveRequest("sm_86"), TABLE).stack.numpy == ">=1.26,<3"


def test_uncertain_table_facts_make_the_stack_uncertain() -> None:
    solution = solve(SolveRequest("gfx1103", torch="2.13.0"), TABLE)
    assert solution.stack.confidence == "uncertain"
    assert any("gfx1103" in d for d in solution.stack.doubts)
    issues = solution.recipe_dict()["known_issues"]
    assert "not confirmed" in issues[0]["symptom"]


def test_bad_constraints_are_one_line_errors() -> None:
    from envforge.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"--torch 9\.9\.9"):
        solve(SolveRequest("sm_90", torch="9.9.9"), TABLE)
    with pytest.raises(InvalidInput, match="--python 3"):
        solve(SolveRequest("sm_90", python="3"), TABLE)
    with pytest.raises(InvalidInput, match="--driver abc"):
        solve(SolveRequest("sm_90", driver="abc"), TABLE)


def test_evidence_links() -> None:
    assert evidence_links("ROCm/legacy-rocm-build#1797, #1698") == [
        "https://github.com/ROCm/legacy-rocm-build/issues/1797",
        "https://github.com/ROCm/legacy-rocm-build/issues/1698",
    ]
    assert evidence_links("unslothai/unsloth PR #8412") == [
        "https://github.com/unslothai/unsloth/issues/8412"
    ]


def test_known_archs_include_every_table_arch_and_cc() -> None:
    archs = known_archs(TABLE)
    for cc in NVIDIA_COMPUTE_CAPABILITIES:
        assert cc in archs
    assert all(vendor_of(a) for a in archs)
    assert isinstance(TABLE, CompatTable)


# --------------------------------------------------------------------------- CLI


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["solve", *args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("arch", SECTION_3)
def test_cli_json_stack_is_accepted_by_validate(
    arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, arch)
    path = tmp_path / f"{arch}.yaml"
    path.write_text(yaml.safe_dump(data["recipe"]), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    assert f"ok    {arch}" in capsys.readouterr().out


def test_cli_text_prints_every_choice_with_reason_and_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["solve", "sm_89"]) == 0
    out = capsys.readouterr().out
    for key in ("torch =", "variant =", "driver =", "python =", "base_image =", "numpy ="):
        assert key in out
    assert out.count("why: ") == out.count("source: ") >= 6
    assert "Runner-ups:" in out


def test_cli_write_gives_a_recipe_validate_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "out.yaml"
    assert main(["solve", "gfx1032", "--conservative", "--write", str(path)]) == 0
    recipe = load_recipe_file(path)
    assert recipe.name == "gfx1032"
    assert recipe.env_map["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0"
    capsys.readouterr()
    assert main(["validate", str(path)]) == 0


@pytest.mark.parametrize(
    ("arch", "text"),
    [("sm_35", "none could"), ("gfx803", "none could"), ("gfx1299", "nearest known: gfx1250")],
)
def test_cli_refusals_exit_2(arch: str, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", arch]) == 2
    err = capsys.readouterr().err
    assert text in err
    assert len(err.strip().splitlines()) == 1


def test_cli_auto_uses_the_detected_arch_and_driver(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "sm_89")
    monkeypatch.setenv("ENVFORGE_DRIVER_VERSION", "550.54.14")
    data = run_json(capsys, "auto")
    assert data["arch"] == "sm_89"
    stack = data["stack"]
    assert isinstance(stack, dict)
    assert str(stack["variant"]).startswith("cu12")
    assert "sm_89" in str(data["detected"])


def test_cli_auto_without_a_gpu_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_VENDOR", "none")
    assert main(["solve", "auto"]) == 2
    assert "no GPU" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arch", ["gfx1100", "gfx1151", "gfx942", "gfx1201", "gfx906", "sm_86", "sm_120", "sm_70"]
)
def test_the_default_has_every_choice_verified(arch: str) -> None:
    """Issue 20 §3: torch, variant, driver, Python, base image and NumPy all verified."""
    solution = solve(SolveRequest(arch), TABLE)
    assert [p.key for p in solution.picks if p.confidence != "verified"] == []


def test_rocm_default_python_is_one_whose_wheel_file_was_seen() -> None:
    """A ROCm variant's CPython range is assumed ([?]); python_files names the CPythons
    whose wheel file was seen: the default takes the newest of them, --latest the newest
    a base image ships (uncertain)."""
    default = solve(SolveRequest("gfx1100"), TABLE)
    assert (default.stack.label, default.stack.base_image) == (
        "torch 2.14.1+rocm7.2 py3.12",
        "ubuntu:24.04",
    )
    python = next(p for p in default.picks if p.key == "python")
    assert python.confidence == "verified"
    assert "cp312" in python.source
    latest = solve(SolveRequest("gfx1100", latest=True), TABLE)
    assert latest.stack.python == "3.13"
    assert next(p for p in latest.picks if p.key == "python").confidence == "uncertain"
    assert f"--latest would choose {latest.stack.label}" in " ".join(default.notes)
    assert f"without --latest: {default.stack.label}" in " ".join(latest.notes)
    asked = solve(SolveRequest("gfx1100", torch="2.14.1", python="3.13"), TABLE)
    assert next(p for p in asked.picks if p.key == "python").confidence == "uncertain"


def test_no_fully_verified_stack_says_so() -> None:
    solution = solve(SolveRequest("gfx1103"), TABLE)
    assert solution.stack.confidence == "uncertain"
    assert any(n.startswith("no stack has every choice verified") for n in solution.notes)


def test_latest_and_conservative_are_refused_together() -> None:
    from envforge.errors import InvalidInput

    with pytest.raises(InvalidInput, match="--latest and --conservative"):
        solve(SolveRequest("sm_86", latest=True, conservative=True), TABLE)


def test_conservative_keeps_its_own_meaning() -> None:
    """--conservative is not an alias of the default: the most evidence (not the table's
    newest release, the package-index default build)."""
    default = solve(SolveRequest("sm_86"), TABLE)
    safe = solve(SolveRequest("sm_86", conservative=True), TABLE)
    assert default.stack.torch == "2.15.0"
    assert (safe.stack.torch, safe.stack.variant) == ("2.14.1", "cu130")
    assert safe.mode == "conservative"


def test_rocm714_arch_list_is_inferred_so_the_default_is_rocm72() -> None:
    """2.14's rocm7.14 arch list is read from main, not release/2.14 (arch_confidence:
    uncertain): the default takes rocm7.2, as the curated recipes do; asked for, rocm7.14
    is uncertain and says why."""
    asked = solve(SolveRequest("gfx1100", torch="2.14.1+rocm7.14"), TABLE)
    assert asked.stack.confidence == "uncertain"
    assert any("gfx1100 in the rocm7.14 wheel is inferred" in d for d in asked.stack.doubts)
    for arch in ("gfx1100", "gfx942", "gfx1201", "gfx1151"):
        assert solve(SolveRequest(arch), TABLE).stack.variant == "rocm7.2", arch


def test_the_variant_note_reaches_the_output() -> None:
    """A19: rocm7.14 installs a pip ROCm SDK (rocm[libraries,device-all]) and triton-rocm;
    whoever takes it (--latest, --torch) reads that in the variant's reason."""
    asked = solve(SolveRequest("gfx1100", torch="2.14.1+rocm7.14"), TABLE)
    variant = next(p for p in asked.picks if p.key == "variant")
    assert "rocm[libraries,device-all]==7.14.*" in variant.reason


def test_the_sm_120_old_driver_workaround_names_what_solve_picks_for_that_driver() -> None:
    """Recipe prose must not lag the table (audit 2026-11-27 E10): the driver < 580
    workaround names the torch and CUDA that ``solve sm_120 --driver 570.86`` picks."""
    picked = solve(SolveRequest("sm_120", driver="570.86"), TABLE).stack
    recipe = load_recipe_file(ROOT / "recipes" / "sm_120.yaml")
    issue = next(k for k in recipe.known_issues if "driver" in k.symptom.lower())
    cuda = picked.variant.removeprefix("cu")
    assert f"--set torch.version={picked.torch}" in issue.workaround
    assert f"--set cuda={cuda[:-1]}.{cuda[-1]}" in issue.workaround
    assert f"whl/{picked.variant}" in issue.workaround


def test_thor_says_its_evidence_is_for_2_10_cu130_and_that_ptxas_may_reject_sm_110a(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The only Thor report is torch 2.10.0+cu130, and in it Triton's ptxas rejects
    sm_110a (vllm-project/vllm#34470): the answer says both (audit 2026-11-27 C8)."""
    assert main(["solve", "sm_110"]) == 0
    out = capsys.readouterr().out
    assert "2.10.0+cu130" in out
    assert "sm_110a" in out
    assert "vllm-project/vllm#34470" in out


def test_the_last_release_named_in_an_error_has_the_arch_confirmed_in_its_wheel() -> None:
    """2.14's rocm7.14 arch list is inferred: an error names 2.14.1+rocm7.2, whose list was
    read, not the unconfirmed +rocm7.14 (audit 2026-11-27 C15: an uncertain build is not
    presented as fact); with nothing confirmed the one named says it is uncertain."""
    with pytest.raises(NoStack) as err:
        solve(SolveRequest("gfx1100", python="3.15"), TABLE)
    assert str(err.value).endswith("last release that can run gfx1100 is torch 2.14.1+rocm7.2")
    with pytest.raises(NoStack) as err:
        solve(SolveRequest("gfx1250", python="3.15"), TABLE)
    assert str(err.value).endswith("(uncertain)")
