"""The committed Dockerfiles/ folder is exactly ``envforge render --all -o Dockerfiles``
for the shipped catalogue (recipes/): one folder per recipe holding its Dockerfile.

When this fails, regenerate (with ENVFORGE_RECIPE_PATH unset) and commit the result:
``envforge render --all -o Dockerfiles``.
"""

from __future__ import annotations

import subprocess

import pytest

from envforge.recipe.catalogue import Catalogue
from envforge.render import RenderOptions, plan_venv, render_dockerfile
from tests.helpers import paths
from tests.helpers.dockerfile_syntax import parse

ROOT = paths.ROOT
DOCKERFILES = ROOT / "Dockerfiles"
SHIPPED = Catalogue(folders=(ROOT / "recipes",))
FIX = "regenerate with `envforge render --all -o Dockerfiles` and commit it"


def test_the_catalogue_is_not_empty() -> None:
    assert len(SHIPPED.files()) >= 10


@pytest.mark.parametrize("name", sorted(SHIPPED.files()))
def test_dockerfile_is_fresh(name: str) -> None:
    recipe = SHIPPED.load(name)
    committed = DOCKERFILES / name / "Dockerfile"
    assert committed.is_file(), f"{committed} is missing: {FIX}"
    assert committed.read_bytes() == render_dockerfile(recipe).encode("utf-8"), (
        f"{committed} is stale: {FIX}"
    )


def test_no_extra_files() -> None:
    names = set(SHIPPED.files())
    present = {p.name for p in DOCKERFILES.iterdir()}
    assert present == names, f"Dockerfiles/ has {sorted(present - names)} extra: {FIX}"
    for name in names:
        files = {p.name for p in (DOCKERFILES / name).iterdir()}
        assert files == {"Dockerfile"}, f"Dockerfiles/{name}/ holds {sorted(files)}: {FIX}"


@pytest.mark.parametrize("name", sorted(SHIPPED.files()))
def test_shipped_recipes_render_valid_shell(name: str) -> None:
    """Every RUN of every shipped Dockerfile, and every venv setup script, parses as shell."""
    recipe = SHIPPED.load(name)
    for options in (RenderOptions(), RenderOptions(wheelhouse=True, ca_bundle=True)):
        for ins in parse(render_dockerfile(recipe, options)):
            if ins.keyword == "RUN":
                done = subprocess.run(
                    ["sh", "-n", "-c", ins.args], capture_output=True, check=False
                )
                assert done.returncode == 0, (name, ins.args, done.stderr)
        script = plan_venv(recipe, options).setup_script
        done = subprocess.run(
            ["bash", "-n"], input=script.encode(), capture_output=True, check=False
        )
        assert done.returncode == 0, (name, done.stderr)
