"""House rules that hold for every module and every commit (issue 31 §6): modules of at
most 600 lines, and the pre-commit configuration that runs ruff, ruff format, mypy and the
72-character commit subject."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import paths

ROOT = paths.ROOT
MAX_LINES = 600
#: Modules still over the cap, each with the issue that splits it. A module that is under
#: the cap must leave this list (the test says so), so the list only shrinks.
OVER: dict[str, str] = {}


def _lines(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_every_module_is_at_most_600_lines() -> None:
    sizes = {
        p.relative_to(ROOT / "envforge").as_posix(): _lines(p)
        for p in sorted((ROOT / "envforge").rglob("*.py"))
    }
    over = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in OVER}
    assert not over, f"modules over {MAX_LINES} lines (split them): {over}"
    done = [name for name in OVER if sizes.get(name, 0) <= MAX_LINES]
    assert not done, f"now at most {MAX_LINES} lines: remove from OVER: {done}"


def _precommit() -> list[str]:
    exe = shutil.which("pre-commit") or str(Path(sys.executable).parent / "pre-commit")
    if not Path(exe).exists():
        pytest.fail("pre-commit is not installed: pip install -e '.[dev]'")
    return [exe]


def test_the_pre_commit_config_is_valid_and_runs_the_ci_checks() -> None:
    config = ROOT / ".pre-commit-config.yaml"
    done = subprocess.run(
        [*_precommit(), "validate-config", str(config)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = config.read_text(encoding="utf-8")
    for entry in ("entry: ruff check", "entry: ruff format", "entry: mypy"):
        assert entry in text


@pytest.mark.parametrize(
    ("message", "ok"),
    [
        ("audit: evaluate markers\n\n" + "a body line may be long " * 8 + "\n", True),
        ("x" * 72 + "\n", True),
        ("x" * 73 + "\n\nbody\n", False),
    ],
)
def test_the_commit_message_hook_caps_the_subject_at_72(
    tmp_path: Path, message: str, ok: bool
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copy(ROOT / ".pre-commit-config.yaml", repo / ".pre-commit-config.yaml")
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(message, encoding="utf-8")
    done = subprocess.run(
        [
            *_precommit(),
            "run",
            "subject-length",
            "--hook-stage",
            "commit-msg",
            "--commit-msg-filename",
            str(msg),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PRE_COMMIT_HOME": str(tmp_path / "pc"),
        },
    )
    assert (done.returncode == 0) is ok, done.stdout + done.stderr


def test_unit_tests_sit_in_folders_that_mirror_the_package() -> None:
    """tests/unit/README.md: a folder of test files is a package of envforge/ (or house/),
    with an __init__.py; a test file at the top is one of a top-level module."""
    unit, package = paths.UNIT, ROOT / "envforge"
    misplaced = []
    for test in sorted(unit.rglob("test_*.py")):
        folder = test.parent.relative_to(unit)
        if "fixtures" in folder.parts:
            continue
        if not (test.parent / "__init__.py").is_file():
            misplaced.append(f"{test.relative_to(unit)}: its folder has no __init__.py")
        elif folder == Path("."):
            if not list(package.glob(f"{test.stem.removeprefix('test_').split('_')[0]}*.py")):
                misplaced.append(f"{test.name}: no top-level module of envforge/ by that name")
        elif folder.parts[0] != "house" and not (package / folder / "__init__.py").is_file():
            misplaced.append(f"{folder}/: not a package of envforge/ (envforge/{folder})")
    assert not misplaced, "misplaced unit tests (see tests/unit/README.md): " + "; ".join(misplaced)
