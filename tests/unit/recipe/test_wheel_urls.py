"""``packages: [name @ URL#sha256=...]``: which wheel URLs a recipe takes, and the lock
that carries them (issue 18 §6)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envforge import lock
from envforge.core.resources import recipes_dir
from envforge.errors import InvalidInput, RecipeError
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.checks import pin_problem
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, render_dockerfile
from envforge.render.context import venv_context
from envforge.stack import stack_of

DIGEST = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
WHEEL = "https://127.0.0.1:8443/files/six-1.17.0-py2.py3-none-any.whl"
ENTRY = f"six @ {WHEEL}#sha256={DIGEST}"


@pytest.mark.parametrize(
    "entry",
    [
        ENTRY,
        f"six @ http://127.0.0.1:8000/six-1.17.0-py2.py3-none-any.whl#sha256={DIGEST}",
        f"flash-attn @ https://127.0.0.1/v2/flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-"
        f"cp311-cp311-linux_x86_64.whl#sha256={DIGEST}",
    ],
)
def test_a_hashed_https_wheel_url_is_taken(entry: str) -> None:
    assert pin_problem(entry) is None


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (f"six @ {WHEEL}", "not pinned"),
        (f"six @ {WHEEL}#sha256={DIGEST[:-1]}", "not pinned"),
        (f"six @ {WHEEL}#sha256={DIGEST.upper()}", "not pinned"),
        (f"six @ {WHEEL}#md5=0123456789abcdef0123456789abcdef", "not pinned"),
        (f"six @ http://10.0.0.1/six-1.17.0-py2.py3-none-any.whl#sha256={DIGEST}", "https"),
        (f"six @ file:///tmp/six-1.17.0-py2.py3-none-any.whl#sha256={DIGEST}", "https"),
        (f"six @ {WHEEL}?token=x#sha256={DIGEST}", "https"),
        (f"six @ https://127.0.0.1/six-1.17.0.tar.gz#sha256={DIGEST}", "not a wheel"),
        (f"six @ git+https://127.0.0.1/six.git#sha256={DIGEST}", "https"),
        (f"idna @ {WHEEL}#sha256={DIGEST}", "is six, not idna"),
        (f"torchvision @ {WHEEL}#sha256={DIGEST}", "torch family"),
        (f"torch @ {WHEEL}#sha256={DIGEST}", "torch family"),
        (f"six[x] @ {WHEEL}#sha256={DIGEST}", "extras"),
    ],
)
def test_anything_else_is_refused_with_the_fix(entry: str, words: str) -> None:
    problem = pin_problem(entry)
    assert problem is not None
    assert words in problem[0]
    assert "@" in problem[1] or "wheelhouse" in problem[1]


@pytest.fixture
def recipe_file(tmp_path: Path) -> Path:
    folder = tmp_path / "recipes"
    folder.mkdir()
    shutil.copyfile(recipes_dir() / "cpu.yaml", folder / "cpu.yaml")
    return folder / "cpu.yaml"


def load(path: Path, *packages: str) -> Recipe:
    overrides = [f"packages={list(packages)!r}"] if packages else []
    return Catalogue.default().load(str(path), overrides)


def test_the_loader_names_file_key_and_fix(recipe_file: Path) -> None:
    with pytest.raises(RecipeError) as err:
        load(recipe_file, "idna==3.10", f"six @ {WHEEL}")
    line = err.value.one_line()
    assert "cpu.yaml" in line
    assert "packages[1]" in line
    assert "#sha256=" in line
    assert "\n" not in line


def test_a_url_entry_reaches_every_install_as_written(recipe_file: Path) -> None:
    recipe = load(recipe_file, ENTRY)
    stack = stack_of(recipe)
    assert ENTRY in stack.requirement_lines()
    assert "six" in stack.distributions()
    plan = venv_context(recipe, RenderOptions(), stack)
    assert ENTRY in plan.requirement_lines
    for installer in ("uv", "pip"):
        dockerfile = render_dockerfile(recipe, RenderOptions(installer=installer))
        assert f"'{ENTRY}'" in dockerfile


def _lock(recipe: Recipe, path: Path, line: str) -> Path:
    path.write_text(
        f"# envforge-lock: recipe={recipe.name} inputs={lock.inputs_digest(recipe)} python=3.11\n"
        f"torch==2.13.0+cpu \\\n    --hash=sha256:{'0' * 64}\n"
        f"{line} \\\n    --hash=sha256:{DIGEST}\n    # via -r requirements.in\n"
    )
    return path


def test_a_lock_carries_the_recipes_own_url_with_its_hash(recipe_file: Path) -> None:
    recipe = load(recipe_file, ENTRY)
    path = _lock(recipe, recipe_file.with_name("cpu.lock.txt"), ENTRY)
    assert lock.lock_path(recipe) == path
    split = lock.split_lock(path)
    assert split.rest == (f"{ENTRY} --hash=sha256:{DIGEST}",)


@pytest.mark.parametrize(
    "line",
    [
        f"six @ https://127.0.0.1:8443/other/six-1.17.0-py2.py3-none-any.whl#sha256={DIGEST}",
        f"six @ {WHEEL}",
        f"idna @ {WHEEL}#sha256={DIGEST}",
    ],
)
def test_a_lock_with_another_url_is_refused(recipe_file: Path, line: str) -> None:
    recipe = load(recipe_file, ENTRY)
    _lock(recipe, recipe_file.with_name("cpu.lock.txt"), line)
    with pytest.raises(InvalidInput, match="is not a pinned requirement"):
        lock.lock_path(recipe)
