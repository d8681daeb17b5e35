"""Golden files: the rendered outputs for the fixture recipes, byte for byte.

Fixtures: tests/fixtures/recipes/*.yaml; expected outputs: tests/golden/<recipe>/.
After an intended change to the templates or the context, refresh them with
``ENVFORGE_UPDATE_GOLDEN=1 python -m pytest tests/unit/render/test_render_golden.py`` and
review the diff; without that variable a mismatch fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.recipe.load import load_recipe_file
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, plan_venv, render_dockerfile
from tests.helpers import paths

TESTS = paths.TESTS
FIXTURES = TESTS / "fixtures" / "recipes"
GOLDEN = TESTS / "golden"
UPDATE = os.environ.get("ENVFORGE_UPDATE_GOLDEN") == "1"

WITH_CONTEXT = RenderOptions(wheelhouse=True, ca_bundle=True)

OUTPUTS: dict[str, Callable[[Recipe], str]] = {
    "Dockerfile": render_dockerfile,
    "Dockerfile.wheelhouse-ca": lambda r: render_dockerfile(r, WITH_CONTEXT),
    "setup.sh": lambda r: plan_venv(r).setup_script,
    "setup.wheelhouse-ca.sh": lambda r: plan_venv(r, WITH_CONTEXT).setup_script,
    "requirements.txt": lambda r: plan_venv(r).requirements_txt,
    "constraints.txt": lambda r: plan_venv(r).constraints_txt,
    "activate.sh": lambda r: plan_venv(r).activate_script,
}

FIXTURE_FILES = sorted(FIXTURES.glob("*.yaml"))


def test_there_are_fixtures() -> None:
    assert len(FIXTURE_FILES) >= 3


@pytest.mark.parametrize("output", sorted(OUTPUTS))
@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda p: p.stem)
def test_golden(fixture: Path, output: str) -> None:
    recipe = load_recipe_file(fixture)
    actual = OUTPUTS[output](recipe)
    expected_file = GOLDEN / recipe.name / output
    if UPDATE:
        expected_file.parent.mkdir(parents=True, exist_ok=True)
        expected_file.write_text(actual, encoding="utf-8", newline="")
    assert expected_file.is_file(), f"no golden file {expected_file}; set ENVFORGE_UPDATE_GOLDEN=1"
    expected = expected_file.read_text(encoding="utf-8")
    assert actual == expected, (
        f"{expected_file} differs from the rendered output; if the change is intended, "
        "refresh with ENVFORGE_UPDATE_GOLDEN=1 and review the diff"
    )


def test_no_stale_golden_folders() -> None:
    names = {load_recipe_file(f).name for f in FIXTURE_FILES}
    folders = {p.name for p in GOLDEN.iterdir()}
    assert folders == names
    for name in names:
        assert {p.name for p in (GOLDEN / name).iterdir()} == set(OUTPUTS)
