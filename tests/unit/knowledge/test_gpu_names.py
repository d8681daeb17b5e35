"""GPUs by the names people use (issue 29 §2): the table's product names → the arch, for
every command that takes an arch or a recipe (solve, show, render, build, validate,
certify, fleet plan --arch); an inexact name lists the real candidates, never other archs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.cli import common, main
from envforge.errors import InvalidInput
from envforge.knowledge import load_table
from envforge.knowledge.gpu_names import arch_for_name, match_gpu, words

NAMED = [
    ("RX 7900 XTX", "gfx1100"),
    ("rx 7900 xtx", "gfx1100"),
    ("AMD Radeon RX 7900 XTX", "gfx1100"),
    ("RX 7900 XT", "gfx1100"),
    ("Radeon RX 5700 XT", "gfx1010"),
    ("RTX 4090", "sm_89"),
    ("NVIDIA GeForce RTX 4090", "sm_89"),
    ("GeForce RTX 3060", "sm_86"),
    ("H200", "sm_90"),
    ("h100 80gb hbm3", "sm_90"),  # longer than the name: the longest name inside wins
    ("MI300X", "gfx942"),
    ("Instinct MI300X", "gfx942"),
    ("Strix Halo", "gfx1151"),  # the family's code name
    ("Radeon 8060S", "gfx1151"),
    ("Navi 31", "gfx1100"),
    ("GTX 1080 Ti", "sm_61"),
    ("gfx1100", "gfx1100"),
    ("SM_89", "sm_89"),
]


@pytest.mark.parametrize(("name", "arch"), NAMED)
def test_a_gpu_by_its_name_is_its_arch(name: str, arch: str) -> None:
    assert arch_for_name(name, load_table()) == arch


def test_brand_words_and_case_do_not_count() -> None:
    assert words("AMD Radeon RX 7900 XTX") == words("7900 xtx") == ("7900", "xtx")
    assert words("NVIDIA GeForce RTX 4090") == ("rtx", "4090")


def test_an_inexact_name_lists_the_real_candidates_with_their_archs() -> None:
    found = match_gpu("Radeon 7900", load_table())
    assert found.arch is None
    assert found.listing() == "RX 7900 XTX / RX 7900 XT / RX 7900 GRE → gfx1100"
    with pytest.raises(InvalidInput) as raised:
        arch_for_name("Radeon 7900", load_table())
    line = raised.value.one_line()
    assert "RX 7900 XTX / RX 7900 XT / RX 7900 GRE → gfx1100" in line
    assert "sm_" not in line
    assert raised.value.exit_code == 2


def test_a_name_of_two_archs_lists_both() -> None:
    found = match_gpu("Strix", load_table())
    assert found.arch is None
    assert found.listing() == "Strix Point → gfx1150; Strix Halo → gfx1151"
    assert {c.arch for c in match_gpu("MI300", load_table()).candidates} == {"gfx942"}


def test_an_unknown_name_names_no_arch() -> None:
    with pytest.raises(InvalidInput) as raised:
        arch_for_name("Voodoo 5 6000", load_table())
    message = raised.value.message
    assert "names no GPU 'Voodoo 5 6000'" in message
    assert "nearest" not in message
    assert "sm_35" not in raised.value.one_line()


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def invoke(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


Run = Callable[..., tuple[int, str, str]]


@pytest.mark.parametrize(
    ("args", "said", "first"),
    [
        (("solve", "RX 7900 XTX"), "RX 7900 XTX -> gfx1100", "gfx1100: RDNA3 Navi 31"),
        (("solve", "H200"), "H200 -> sm_90", "sm_90: Hopper"),
        (("show", "Radeon RX 5700 XT"), "Radeon RX 5700 XT -> gfx1010", "gfx1010: RDNA1"),
        (("show", "GeForce RTX 3060"), "GeForce RTX 3060 -> sm_86", "sm_86:"),
        (("render", "MI300X"), "MI300X -> gfx942", "# Rendered by envforge from recipe gfx942"),
        (("validate", "RTX 4090"), "", "ok    sm_89"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_commands_take_gpus_by_name(run: Run, args: tuple[str, ...], said: str, first: str) -> None:
    code, out, err = run(*args)
    assert code == 0, err
    assert said in err
    assert out.splitlines()[0].startswith(first)


@pytest.mark.parametrize("command", ["solve", "show", "render", "validate"])
def test_an_inexact_name_is_exit_2_with_the_candidates(run: Run, command: str) -> None:
    code, _out, err = run(command, "radeon 7900")
    assert code == 2
    assert "RX 7900 XTX / RX 7900 XT / RX 7900 GRE → gfx1100" in err
    assert "sm_35" not in err


def test_solve_of_an_unknown_name_says_so_without_unrelated_archs(run: Run) -> None:
    code, _out, err = run("solve", "RX 7900 XTZ")
    assert code == 2
    assert "sm_35" not in err


def test_fleet_plan_takes_a_gpu_name_for_arch(run: Run, tmp_path: Path) -> None:
    code, _out, err = run(
        "fleet",
        "plan",
        "--engine",
        "slurm",
        "--recipe",
        "gfx1100",
        "--arch",
        "RX 7900 XTX",
        "-o",
        str(tmp_path / "plan"),
        "--json",
    )
    assert code == 0, err
    assert "--arch RX 7900 XTX -> gfx1100" in err
    assert (tmp_path / "plan" / "certify-gfx1100-gpu1.sbatch").is_file()
    code, _out, err = run(
        "fleet",
        "plan",
        "--engine",
        "slurm",
        "--recipe",
        "gfx1100",
        "--arch",
        "Radeon 7900",
        "-o",
        str(tmp_path / "other"),
    )
    assert code == 2
    assert "--arch 'Radeon 7900'" in err


def test_build_and_certify_resolve_the_name_before_any_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """build and certify load RECIPE through the one loader: a name resolves there."""
    said: list[str] = []
    monkeypatch.setattr(common, "say", said.append)
    recipe = common.load_checked("RTX 4090")
    assert recipe.name == "sm_89"
    assert said == ["RTX 4090 -> sm_89: recipe for sm_89 (RTX 4090)"]
    assert common.load_checked("gfx1012").name == "gfx1010"  # an arch no recipe is named


def test_audit_takes_a_gpu_name_for_arch(run: Run) -> None:
    code, _out, err = run("audit", "--python", "/nonexistent/python", "--arch", "Radeon 7900")
    assert code == 2
    assert "--arch 'Radeon 7900' is not exactly one GPU" in err
    code, _out, err = run("audit", "--python", "/nonexistent/python", "--arch", "RTX 4090")
    assert "--arch RTX 4090 -> sm_89" in err
    assert code == 4  # then the missing interpreter, as for an arch
