"""Lock files: where they are found, when they are stale, how uv failures are reported."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from envforge import lock
from envforge.errors import BuildFailed, InvalidInput, Unavailable
from envforge.proc import Completed
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.resources import recipes_dir


@pytest.fixture
def recipe_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "recipes"
    folder.mkdir()
    shutil.copyfile(recipes_dir() / "cpu.yaml", folder / "cpu.yaml")
    return folder / "cpu.yaml"


def load(path: Path, *overrides: str) -> Recipe:
    return Catalogue.default().load(str(path), overrides)


def write_lock_file(recipe: Recipe, path: Path) -> None:
    path.write_text(
        f"# envforge-lock: recipe={recipe.name} inputs={lock.inputs_digest(recipe)} python=3.11\n"
        "torch==2.13.0+cpu \\\n    --hash=sha256:" + "0" * 64 + "\n"
    )


def test_no_lock_file(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    assert lock.lock_path(recipe) is None
    assert lock.stale_lock(recipe) is None
    assert lock.default_lock_file(recipe) == recipe_copy.with_name("cpu.lock.txt")


def test_matching_lock_is_found(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    write_lock_file(recipe, recipe_copy.with_name("cpu.lock.txt"))
    assert lock.lock_path(recipe) == recipe_copy.with_name("cpu.lock.txt")


def test_changed_recipe_makes_the_lock_stale(recipe_copy: Path) -> None:
    write_lock_file(load(recipe_copy), recipe_copy.with_name("cpu.lock.txt"))
    changed = load(recipe_copy, 'numpy="<2"')
    assert lock.lock_path(changed) is None
    assert lock.stale_lock(changed) == recipe_copy.with_name("cpu.lock.txt")


def test_lock_without_header_is_stale(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    recipe_copy.with_name("cpu.lock.txt").write_text("torch==2.13.0\n")
    assert lock.lock_path(recipe) is None
    assert lock.stale_lock(recipe) is not None


def test_inputs_digest_ignores_descriptions(recipe_copy: Path) -> None:
    base = load(recipe_copy)
    assert lock.inputs_digest(load(recipe_copy, 'description="other words"')) == lock.inputs_digest(
        base
    )
    assert lock.inputs_digest(load(recipe_copy, 'python="3.12"')) != lock.inputs_digest(base)


def test_source_args(recipe_copy: Path, tmp_path: Path) -> None:
    recipe = load(recipe_copy)
    assert lock.source_args(recipe, None) == [
        "--extra-index-url",
        "https://download.pytorch.org/whl/cpu",
    ]
    assert lock.source_args(recipe, tmp_path) == ["--find-links", str(tmp_path.resolve())]


def test_uv_env_never_downloads_interpreters(tmp_path: Path) -> None:
    env = lock.uv_env(tmp_path / "ca.pem", {"VIRTUAL_ENV": "/x", "PATH": "/bin"})
    assert env["UV_PYTHON_DOWNLOADS"] == "never"
    assert env["SSL_CERT_FILE"] == str((tmp_path / "ca.pem").resolve())
    assert env["PIP_CERT"] == env["SSL_CERT_FILE"]
    assert "VIRTUAL_ENV" not in env


def done(stderr: str, *, code: int = 2, timed_out: bool = False) -> Completed:
    return Completed(("uv",), code, "", stderr, 1.0, timed_out)


def test_network_failures_are_unavailable(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    err = lock.uv_failure(
        "resolving",
        done("error: Failed to fetch: `https://x/simple/torch/`\n  Caused by: dns error"),
        recipe,
        hint="h",
    )
    assert isinstance(err, Unavailable)
    assert "cannot be reached (https://download.pytorch.org/whl/cpu)" in err.one_line()
    assert isinstance(
        lock.uv_failure("resolving", done("", timed_out=True), recipe, hint="h"), Unavailable
    )


def test_hash_mismatch_is_a_build_failure(recipe_copy: Path) -> None:
    stderr = (
        "Resolved 1 package in 73ms\nerror: Failed to download `torch==2.13.0+cpu`\n"
        "  cause: Hash mismatch for `torch==2.13.0+cpu`\n\n  Expected:\n  sha256:0000\n"
        "  Computed:\n  sha256:6746"
    )
    err = lock.uv_failure("installing", done(stderr), load(recipe_copy), hint="h")
    assert isinstance(err, BuildFailed)
    assert "Hash mismatch for `torch==2.13.0+cpu`" in err.one_line()


def test_resolution_failures_are_build_failures(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    err = lock.uv_failure(
        "resolving", done("  x No solution found when resolving dependencies"), recipe, hint="h"
    )
    assert isinstance(err, BuildFailed)
    assert "No solution found" in err.one_line()


def test_bad_wheelhouse_and_bundle(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not a directory"):
        lock.check_inputs(tmp_path / "missing", None)
    with pytest.raises(InvalidInput, match=r"no \.whl files"):
        lock.check_inputs(tmp_path, None)
    with pytest.raises(InvalidInput, match="not a file"):
        lock.check_inputs(None, tmp_path / "ca.pem")


def test_lock_needs_a_place(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    floating = replace(recipe, origin="<memory>")
    with pytest.raises(InvalidInput) as err:
        lock.write_lock(floating)
    assert "pass -o FILE" in err.value.one_line()


def test_uv_binary_is_there() -> None:
    assert Path(lock.uv_bin()).is_file()
