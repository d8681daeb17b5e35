"""Projects: pyproject.toml (PEP 621, PEP 735, [tool.envforge]) and requirements.txt."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.errors import ProjectError
from envforge.project.checks import project_checks
from envforge.project.init import COMPILE_CHECK, import_name, init_project
from envforge.project.read import load_project


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


PYPROJECT = """\
[project]
name = "My_Trainer"
requires-python = ">=3.10"
dependencies = ["torch>=2.4", "torchvision", "numpy<3", "pandas"]

[project.optional-dependencies]
hf = ["transformers", "accelerate"]
plot = ["matplotlib"]

[dependency-groups]
test = ["pytest>=8", {include-group = "lint"}]
lint = ["ruff"]
"""


def test_pyproject_dependencies_extras_and_groups(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", PYPROJECT)
    project = load_project(tmp_path, extras=["hf"], groups=["test"])
    assert project.name == "my-trainer"
    assert project.requirements == (
        "torch>=2.4",
        "torchvision",
        "numpy<3",
        "pandas",
        "transformers",
        "accelerate",
        "pytest>=8",
        "ruff",
    )
    assert project.requires_python == ">=3.10"
    assert project.installable
    assert project.recipe is None
    assert project.source == tmp_path.resolve() / "pyproject.toml"


def test_tool_envforge_settings_are_read_and_merged(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pyproject.toml",
        PYPROJECT
        + """
[tool.envforge]
recipe = "auto"
checks = ["pytest -x -q tests/gpu", "smoke.py"]
extras = ["plot"]
""",
    )
    project = load_project(tmp_path, extras=["hf"])
    assert project.recipe == "auto"
    assert project.checks == ("pytest -x -q tests/gpu", "smoke.py")
    assert project.extras == ("plot", "hf")
    assert "matplotlib" in project.requirements
    assert "transformers" in project.requirements


@pytest.mark.parametrize(
    ("extra_toml", "key", "fix"),
    [
        ('[tool.envforge]\nrecipee = "auto"\n', "tool.envforge.recipee", "did you mean 'recipe'"),
        ("[tool.envforge]\nrecipe = 3\n", "tool.envforge.recipe", 'recipe = "auto"'),
        ('[tool.envforge]\nchecks = "pytest"\n', "tool.envforge.checks", "checks = ["),
        ('[tool.envforge]\nchecks = [""]\n', "tool.envforge.checks", "one check per string"),
        ('[tool.envforge]\nextras = ["nope"]\n', "project.optional-dependencies", "known extras"),
        ('[tool.envforge]\ngroups = ["tset"]\n', "dependency-groups", "did you mean 'test'"),
        ("[tool]\nenvforge = 1\n", "envforge", "[envforge]"),
    ],
)
def test_bad_settings_are_one_line_naming_file_key_and_fix(
    tmp_path: Path, extra_toml: str, key: str, fix: str
) -> None:
    write(tmp_path, "pyproject.toml", PYPROJECT + "\n" + extra_toml)
    with pytest.raises(ProjectError) as caught:
        load_project(tmp_path)
    line = caught.value.one_line()
    assert "\n" not in line
    assert str(tmp_path.resolve() / "pyproject.toml") in line
    assert key in line
    assert fix in line


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[project]\nname = "x"\ndependencies = ["torch>>2"]\n', "project.dependencies[0]"),
        ('[project]\nname = "x"\ndependencies = "torch"\n', "project.dependencies"),
        ('[project]\nname = "x"\nrequires-python = "3.10+"\n', "project.requires-python"),
        ('[project]\nname = "x y"\n', "project.name"),
        (
            '[project]\nname = "x"\ndependencies = ["foo @ https://h/foo.whl"]\n',
            "project.dependencies[0]",
        ),
        (
            '[dependency-groups]\na = [{include-group = "a"}]\n[tool.envforge]\ngroups = ["a"]\n',
            "dependency-groups.a",
        ),
        ("[project\n", ""),
    ],
)
def test_bad_pyproject_is_refused_in_one_line(tmp_path: Path, toml: str, key: str) -> None:
    write(tmp_path, "pyproject.toml", toml)
    with pytest.raises(ProjectError) as caught:
        load_project(tmp_path)
    assert key in caught.value.one_line()
    assert caught.value.hint


def test_requirements_with_includes_constraints_and_continuations(tmp_path: Path) -> None:
    write(
        tmp_path,
        "requirements.txt",
        (
            "# training\n"
            "torch>=2.4\n"
            "torchvision  # vision models\n"
            "-r extra/more.txt\n"
            "-c constraints.txt\n"
            "numpy<3 \\\n"
            "  ; python_version >= '3.9'\n"
            "pandas==2.2.3 --hash=sha256:" + "a" * 64 + "\n"
        ),
    )
    write(tmp_path, "extra/more.txt", "transformers\n--requirement=../last.txt\n")
    write(tmp_path, "last.txt", "accelerate\n")
    write(tmp_path, "constraints.txt", "urllib3<3\n")
    project = load_project(tmp_path)
    assert project.requirements == (
        "torch>=2.4",
        "torchvision",
        "transformers",
        "accelerate",
        'numpy<3; python_version >= "3.9"',
        "pandas==2.2.3",
    )
    assert project.constraints == ("urllib3<3",)
    assert not project.installable
    assert project.name == tmp_path.resolve().name.lower().replace("_", "-")


@pytest.mark.parametrize(
    "line",
    [
        "--index-url https://example.invalid/simple",
        "-i https://example.invalid/simple",
        "--extra-index-url=https://example.invalid/",
        "-f ./wheels",
        "--find-links ./wheels",
        "--no-index",
        "--trusted-host example.invalid",
        "-e .",
    ],
)
def test_requirements_routing_options_are_refused(tmp_path: Path, line: str) -> None:
    write(tmp_path, "requirements.txt", f"torch\n{line}\n")
    with pytest.raises(ProjectError) as caught:
        load_project(tmp_path)
    text = caught.value.one_line()
    assert "line 2" in text
    assert re.split(r"[ =]", line, maxsplit=1)[0] in text
    assert "fix: remove the" in text


def test_requirements_include_loop_and_missing_include(tmp_path: Path) -> None:
    write(tmp_path, "requirements.txt", "-r a.txt\n")
    write(tmp_path, "a.txt", "-r requirements.txt\n")
    with pytest.raises(ProjectError, match="loop"):
        load_project(tmp_path)
    write(tmp_path, "requirements.txt", "-r missing.txt\n")
    with pytest.raises(ProjectError, match="is not a file"):
        load_project(tmp_path)


def test_requirements_project_refuses_extras(tmp_path: Path) -> None:
    write(tmp_path, "requirements.txt", "torch\n")
    with pytest.raises(ProjectError, match="no extras"):
        load_project(tmp_path, extras=["x"])


def test_folder_without_project_files(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match=r"neither pyproject\.toml nor requirements\.txt"):
        load_project(tmp_path)
    with pytest.raises(ProjectError, match="not a project folder"):
        load_project(tmp_path / "missing")


def test_fifo_requirements_is_refused_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "requirements.txt")
    with pytest.raises(ProjectError, match="not a regular file"):
        load_project(tmp_path)


def test_project_keys_differ_by_folder(tmp_path: Path) -> None:
    write(tmp_path / "a" / "app", "requirements.txt", "torch\n")
    write(tmp_path / "b" / "app", "requirements.txt", "torch\n")
    one = load_project(tmp_path / "a" / "app")
    two = load_project(tmp_path / "b" / "app")
    assert one.name == two.name == "app"
    assert one.key() != two.key()
    assert one.requirements_digest() == two.requirements_digest()


# --------------------------------------------------------------------------- init


def test_init_appends_section_keeping_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "pyproject.toml", PYPROJECT)
    write(tmp_path, "src/my_trainer/__init__.py", "")
    assert init_project(tmp_path) == path
    text = path.read_text("utf-8")
    assert text.startswith(PYPROJECT)
    project = load_project(tmp_path)
    assert project.recipe == "auto"
    assert project.checks == (COMPILE_CHECK,)  # the package: certification's check:import
    with pytest.raises(ProjectError, match="never overwrites"):
        init_project(tmp_path)
    assert path.read_text("utf-8") == text


def test_init_requirements_project_writes_envforge_toml(tmp_path: Path) -> None:
    write(tmp_path, "requirements.txt", "torch\n")
    write(tmp_path, "train.py", "print('hi')\n")
    path = init_project(tmp_path)
    assert path == tmp_path.resolve() / "envforge.toml"
    project = load_project(tmp_path)
    assert project.recipe == "auto"
    assert project.checks == (COMPILE_CHECK,)
    before = path.read_bytes()
    with pytest.raises(ProjectError, match="never overwrites"):
        init_project(tmp_path)
    assert path.read_bytes() == before


def test_inits_check_imports_once_and_writes_no_bytecode(tmp_path: Path) -> None:
    """Issue 29 §6: the project's package is imported by certification's own step, once;
    the check init writes compiles every script in memory and writes nothing."""
    write(tmp_path, "pyproject.toml", PYPROJECT)
    write(tmp_path, "src/my_trainer/__init__.py", "import sys\nsys.exit('imported')\n")
    write(tmp_path, "train.py", "print('hi')\n")
    write(tmp_path, ".venv/lib/site-packages/broken.py", "def (\n")
    init_project(tmp_path)
    project = load_project(tmp_path)
    steps = [c.step for c in project_checks(project)]
    assert steps == ["check:import my_trainer", f"check:{COMPILE_CHECK}"]
    argv = shlex.split(COMPILE_CHECK)
    done = subprocess.run(
        [sys.executable, *argv[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr  # nothing imported, .venv skipped
    assert not list(tmp_path.rglob("__pycache__"))
    write(tmp_path, "scripts/bad.py", "def (\n")
    done = subprocess.run(
        [sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "bad.py" in done.stderr
    assert not list(tmp_path.rglob("__pycache__"))


def test_import_name_layouts(tmp_path: Path) -> None:
    write(tmp_path / "flat", "pkg_x/__init__.py", "")
    write(tmp_path / "flat", "tests/__init__.py", "")
    assert import_name(tmp_path / "flat", "something-else") == "pkg_x"
    write(tmp_path / "named", "my_lib.py", "")
    assert import_name(tmp_path / "named", "my-lib") == "my_lib"
    assert import_name(tmp_path / "empty", "nothing") is None


def test_init_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "requirements.txt", "torch\n")
    assert main(["init", str(tmp_path)]) == 0
    assert "envforge.toml" in capsys.readouterr().err
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "never overwrites" in err
