"""Lock files: where they are found, when they are stale, how uv failures are reported."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from envforge import lock
from envforge.core.proc import Completed
from envforge.core.resources import recipes_dir
from envforge.errors import BuildFailed, InvalidInput, Unavailable
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe


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


HASH = "--hash=sha256:" + "ab" * 32
#: What ``uv pip compile --generate-hashes`` writes: pins, extras, markers, hashes, comments.
UV_STYLE = (
    "torch==2.13.0+cpu \\\n"
    f"    {HASH} \\\n"
    f"    {HASH}\n"
    "    # via -r requirements.in\n"
    "jinja2[i18n]==3.1.6 ; python_full_version >= '3.9' \\\n"
    f"    {HASH}\n"
    "    # via\n"
    "    #   torch\n"
    "\n"
    f"numpy==2.4.6 {HASH}  # inline comment\n"
)


def lock_file_with(recipe: Recipe, path: Path, body: str) -> Path:
    path.write_text(
        f"# envforge-lock: recipe={recipe.name} inputs={lock.inputs_digest(recipe)} python=3.11\n"
        + body
    )
    return path


def test_a_uv_style_lock_is_accepted(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    path = lock_file_with(recipe, recipe_copy.with_name("cpu.lock.txt"), UV_STYLE)
    assert lock.lock_path(recipe) == path


@pytest.mark.parametrize(
    "line",
    [
        "--extra-index-url https://elsewhere.invalid/simple",
        "--extra-index-url=https://elsewhere.invalid/simple",
        "-i https://elsewhere.invalid/simple",
        "--index-url https://elsewhere.invalid/simple",
        "-f /tmp/wheels",
        "--find-links=/tmp/wheels",
        "--trusted-host elsewhere.invalid",
        "--no-index",
        "-r other.txt",
        "-c other.txt",
        "-e .",
        f"    {HASH} --index-url https://elsewhere.invalid/simple",
        f"numpy==2.4.6 --extra-index-url https://elsewhere.invalid/simple {HASH}",
    ],
)
def test_options_in_a_lock_are_refused(recipe_copy: Path, line: str) -> None:
    recipe = load(recipe_copy)
    path = lock_file_with(recipe, recipe_copy.with_name("cpu.lock.txt"), UV_STYLE + line + "\n")
    with pytest.raises(InvalidInput) as err:
        lock.lock_path(recipe)
    text = err.value.one_line()
    assert text.startswith(f"{path}:12: option -")
    assert "not allowed in a lock file" in text
    assert "envforge lock cpu" in text


@pytest.mark.parametrize(
    "line",
    [
        "evil @ https://elsewhere.invalid/evil-1.0-py3-none-any.whl",
        "https://elsewhere.invalid/evil-1.0-py3-none-any.whl",
        "./evil-1.0-py3-none-any.whl",
        "/tmp/evil-1.0-py3-none-any.whl",
        "git+https://elsewhere.invalid/evil.git",
        "evil>=1.0",
        "evil==${VERSION}",
    ],
)
def test_direct_references_and_loose_pins_are_refused(recipe_copy: Path, line: str) -> None:
    recipe = load(recipe_copy)
    path = lock_file_with(recipe, recipe_copy.with_name("cpu.lock.txt"), UV_STYLE + line + "\n")
    with pytest.raises(InvalidInput, match="is not a pinned requirement") as err:
        lock.lock_path(recipe)
    assert err.value.one_line().startswith(f"{path}:12: ")


def test_text_on_a_continuation_line_is_refused(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    body = f"torch==2.13.0+cpu \\\n    evil==1.0 {HASH}\n"
    lock_file_with(recipe, recipe_copy.with_name("cpu.lock.txt"), body)
    with pytest.raises(InvalidInput, match=r"cpu\.lock\.txt:3: unexpected 'evil==1\.0'"):
        lock.lock_path(recipe)


def test_a_stale_lock_is_ignored_not_checked(recipe_copy: Path) -> None:
    recipe = load(recipe_copy)
    lock_file_with(recipe, recipe_copy.with_name("cpu.lock.txt"), "--index-url https://x\n")
    changed = load(recipe_copy, 'numpy="<2"')
    assert lock.lock_path(changed) is None


@pytest.mark.parametrize("code", [28, 30, 13, 122])
def test_a_full_or_read_only_file_system_under_uv_is_unavailable(
    recipe_copy: Path, code: int
) -> None:
    stderr = f"error: Failed to install: x.whl\n  cause: failed to copy file: (os error {code})"
    err = lock.uv_failure("installing", done(stderr), load(recipe_copy), hint="h")
    assert isinstance(err, Unavailable)
    assert f"(os error {code})" in err.one_line()
    assert "ENVFORGE_HOME" in err.one_line()


def test_a_shipped_recipe_locks_under_envforge_home_not_in_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:

    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    recipe = Catalogue.default().load("cpu")
    target = lock.default_lock_file(recipe)
    assert target == tmp_path / "home" / "locks" / "cpu.lock.txt"
    assert recipes_dir().resolve() not in target.resolve().parents
