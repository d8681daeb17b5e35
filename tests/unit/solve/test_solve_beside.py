"""``solve`` beside the curated recipe (issue 26 §5): where both answer for one arch and
differ, ``solve ARCH`` and ``show RECIPE`` each say so, why, and what ``build auto`` uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.recipe.catalogue import Catalogue
from envforge.solve.beside import covering_recipe, recipe_reason


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


def _out(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_solve_names_the_curated_recipe_its_pins_and_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _out(capsys, "solve", "gfx1031")
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("  curated    "))
    assert lines[head] == (
        "  curated    recipe gfx1031 pins torch 2.5.1+rocm6.2 py3.10 for gfx1031, not this "
        "solution's torch 2.14.1+rocm7.2 py3.12; `build auto` on gfx1031 uses the recipe "
        "(envforge show gfx1031)"
    )
    assert lines[head + 1] == (
        "      reason: Same conservative stack as gfx1030: torch 2.5.1+rocm6.2 on Python 3.10."
    )
    assert "Module not initialized" in lines[head + 2]
    assert "stay on rocm6.2 wheels (this recipe)" in lines[head + 2]
    assert "https://github.com/ROCm/pytorch/issues/2241" in lines[head + 3]


def test_solve_json_has_the_curated_field(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_out(capsys, "solve", "gfx1031", "--json"))
    curated = data["curated"]
    assert curated["recipe"] == "gfx1031"
    assert curated["differs"] is True
    assert curated["recipe_stack"] == "torch 2.5.1+rocm6.2 py3.10"
    assert curated["solved_stack"] == "torch 2.14.1+rocm7.2 py3.12"
    assert curated["auto_uses"] == "gfx1031"
    assert "https://github.com/ROCm/pytorch/issues/2241" in curated["evidence"]
    assert curated["solve_why"].startswith("the newest release whose rocm7.2 wheel")


def test_where_they_agree_solve_says_nothing_more(capsys: pytest.CaptureFixture[str]) -> None:
    assert "curated" not in _out(capsys, "solve", "gfx1100")
    data = json.loads(_out(capsys, "solve", "gfx1100", "--json"))
    assert data["curated"]["differs"] is False


def test_an_arch_no_recipe_covers_has_no_curated_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = json.loads(_out(capsys, "solve", "gfx1150", "--json"))
    assert data["curated"] is None


def test_show_says_what_solve_would_pick_and_why_the_recipe_differs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = _out(capsys, "show", "gfx1031").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("  solve      "))
    assert lines[head].startswith(
        "  solve      envforge solve gfx1031 picks torch 2.14.1+rocm7.2 py3.12 (the newest "
        "release whose rocm7.2 wheel"
    )
    assert lines[head].endswith(
        "this recipe keeps torch 2.5.1+rocm6.2 py3.10 on purpose, and `build auto` on gfx1031 "
        "uses this recipe"
    )
    assert lines[head + 1].startswith("      reason: Same conservative stack as gfx1030")


def test_show_json_has_the_solve_field(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_out(capsys, "show", "gfx1031", "--json"))
    assert data["solve"]["solved_stack"] == "torch 2.14.1+rocm7.2 py3.12"
    assert data["solve"]["differs"] is True
    assert json.loads(_out(capsys, "show", "cpu", "--json"))["solve"] is None


def test_show_where_solve_finds_no_stack_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    line = next(
        ln for ln in _out(capsys, "show", "gfx1010").splitlines() if ln.startswith("  solve      ")
    )
    assert line.startswith("  solve      envforge solve gfx1010 finds no stack (no published")
    assert "this recipe keeps torch 1.13.1+rocm5.2 py3.10 on purpose" in line


def test_the_reason_comes_from_the_recipe_fields() -> None:
    recipe = Catalogue.default().load("gfx908")
    why, avoids, evidence = recipe_reason(recipe)
    assert "torch 2.9.1+rocm6.3" in why
    assert "(envforge solve gfx908 gives them)" in why  # sentences naming solve too
    assert "hipBLASLt" not in why  # the others are left out
    assert len(avoids) == 1
    assert "stay on the rocm6.3 wheels (this recipe)" in avoids[0]
    assert evidence  # the kept issue's links


def test_auto_takes_the_recipe_that_sets_the_override_for_an_arch_without_its_own() -> None:
    recipe = covering_recipe("gfx1034")
    assert recipe is not None
    assert recipe.env_map["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0"
    assert covering_recipe("sm_87") is None  # sm_86's recipe serves it, but does not cover it
