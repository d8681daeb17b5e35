"""``packages: [{name: REQ, index: URL}]``: a package from its own index only (issue 18
§6): loading, refusals, the stack, and what each installer is given."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envforge import lock
from envforge.core.resources import recipes_dir
from envforge.errors import InvalidInput, RecipeError
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, plan_venv, render_dockerfile
from envforge.render.indexes import index_sources
from envforge.stack import stack_of

INDEX = "https://127.0.0.1:8443/rocm/simple"
ENTRY = {"name": "bitsandbytes==0.45.0", "index": INDEX}


@pytest.fixture
def recipe_file(tmp_path: Path) -> Path:
    folder = tmp_path / "recipes"
    folder.mkdir()
    shutil.copyfile(recipes_dir() / "cpu.yaml", folder / "cpu.yaml")
    return folder / "cpu.yaml"


def load(path: Path, *packages: object) -> Recipe:
    return Catalogue.default().load(str(path), [f"packages={list(packages)!r}"])


def test_an_entry_with_an_index_loads_and_keeps_its_place(recipe_file: Path) -> None:
    recipe = load(recipe_file, "idna==3.10", ENTRY)
    assert recipe.packages == ("idna==3.10", "bitsandbytes==0.45.0")
    assert recipe.index_of("bitsandbytes==0.45.0") == INDEX
    assert recipe.index_of("idna==3.10") is None
    assert recipe.to_dict()["packages"] == ["idna==3.10", ENTRY]
    assert recipe.hash != load(recipe_file, "idna==3.10", "bitsandbytes==0.45.0").hash
    other = load(recipe_file, "idna==3.10", {**ENTRY, "index": INDEX + "2"})
    assert recipe.hash != other.hash


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ({"name": "bitsandbytes>=0.45", "index": INDEX}, "packages[0].name", "not pinned"),
        ({"name": "torchvision==0.28.0", "index": INDEX}, "packages[0].name", "torch family"),
        ({"name": "torch==2.13.0", "index": INDEX}, "packages[0].name", "torch family"),
        (
            {"name": "bitsandbytes==0.45.0", "index": "http://10.0.0.1/simple"},
            "packages[0].index",
            "https",
        ),
        (
            {"name": "bitsandbytes==0.45.0", "index": "https://u:p@127.0.0.1/simple"},
            "packages[0].index",
            "https",
        ),
        ({"name": "bitsandbytes==0.45.0"}, "packages[0].index", "missing"),
        ({"name": "bitsandbytes==0.45.0", "index": INDEX, "url": "x"}, "packages[0]", "url"),
    ],
)
def test_a_bad_entry_is_one_line_naming_file_and_key(
    recipe_file: Path, entry: dict[str, str], key: str, words: str
) -> None:
    with pytest.raises(RecipeError) as err:
        load(recipe_file, entry)
    line = err.value.one_line()
    assert "cpu.yaml" in line
    assert key in line
    assert words in line
    assert "\n" not in line


def test_a_package_listed_twice_is_refused(recipe_file: Path) -> None:
    with pytest.raises(RecipeError, match=r"packages\[1\]\.name: bitsandbytes is listed twice"):
        load(recipe_file, ENTRY, ENTRY)


def test_uv_gets_an_explicit_index_pinned_by_sources(recipe_file: Path) -> None:
    recipe = load(recipe_file, "idna==3.10", ENTRY, {"name": "xformers==0.0.30", "index": INDEX})
    stack = stack_of(recipe)
    assert stack.install_lines() == ("torch==2.13.0+cpu", "numpy>=1.26,<3", "idna==3.10")
    assert "bitsandbytes" in stack.distributions()
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads("\n".join(index_sources(stack)))
    assert data["project"]["dependencies"] == ["bitsandbytes==0.45.0", "xformers==0.0.30"]
    assert data["tool"]["uv"]["sources"] == {
        "bitsandbytes": {"index": "envforge-0"},
        "xformers": {"index": "envforge-0"},
    }
    assert data["tool"]["uv"]["index"] == [{"name": "envforge-0", "url": INDEX, "explicit": True}]
    mirrored = index_sources(stack, (("https://127.0.0.1:8443", "https://127.0.0.1:9/m"),))
    assert 'url = "https://127.0.0.1:9/m/rocm/simple"' in mirrored


def test_venv_plan_and_dockerfile_install_it_only_from_its_index(recipe_file: Path) -> None:
    recipe = load(recipe_file, ENTRY)
    plan = plan_venv(recipe)
    assert "bitsandbytes==0.45.0" not in plan.requirements
    assert "explicit = true" in plan.index_sources
    script = plan.setup_script
    assert 'rest_source+=(-r "$indexed/pyproject.toml")' in script
    assert f'--no-deps --index-url {INDEX} -d "$indexed/0" -- bitsandbytes==0.45.0' in script
    assert 'requirements+=(bitsandbytes" @ file://' in script
    for installer in ("uv", "pip"):
        text = render_dockerfile(recipe, RenderOptions(installer=installer))
        assert "-- torch==2.13.0+cpu 'numpy>=1.26,<3'" in text
        assert (" -r /tmp/envforge/indexes/pyproject.toml --" in text) is (installer == "uv")
        download = (
            "download --no-cache-dir --disable-pip-version-check --no-input --progress-bar off"
            f" --no-deps --index-url {INDEX} -d /tmp/envforge/indexes/0 -- bitsandbytes==0.45.0"
        )
        assert download in text
        assert 'bitsandbytes" @ file://$indexed_0"' in text


def test_a_recipe_without_indexes_renders_as_before(recipe_file: Path) -> None:
    recipe = load(recipe_file, "idna==3.10")
    assert plan_venv(recipe).index_sources == ""
    assert "indexes" not in render_dockerfile(recipe, RenderOptions())
    assert "indexed" not in plan_venv(recipe).setup_script
    assert "package_indexes" not in stack_of(recipe).to_dict()


def test_lock_refuses_it_naming_the_url_form(recipe_file: Path) -> None:
    recipe = load(recipe_file, ENTRY)
    with pytest.raises(InvalidInput) as err:
        lock.write_lock(recipe, output=recipe_file.with_name("x.lock.txt"))
    assert "bitsandbytes comes from its own index" in err.value.one_line()
    assert "#sha256=" in err.value.one_line()
    assert not recipe_file.with_name("x.lock.txt").exists()
