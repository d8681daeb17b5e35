"""The README and docs/ stay true and short: the README leads with the user in at most 250
lines; every file it or docs/*.md names exists; every command and exit code is documented;
every ENVFORGE_* variable they name is one envforge or its scripts read."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from envforge.cli import COMMANDS
from envforge.errors import ExitCode
from tests.helpers import paths

ROOT = paths.ROOT
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
TOP = ("envforge", "templates", "recipes", "scripts", "tests", "bench", "docs", "Dockerfiles")
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".j2", ".json")

#: ``[text](target)`` links that are not URLs or anchors
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_CODE = re.compile(r"`([^`\n]+)`")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _paths_named(text: str) -> set[str]:
    """Repository paths in code spans: ``envforge/x.py``, ``scripts/test``, ``cli/build.py``."""
    found: set[str] = set()
    for span in _CODE.findall(text):
        for raw in span.split():
            word = raw.strip("(),;:")
            if not re.fullmatch(r"[\w.-]+(/[\w.-]+)+/?", word) or word.startswith("/"):
                continue
            first = word.split("/", 1)[0]
            ours = first in TOP or (ROOT / "envforge" / first).is_dir()  # not DIR/, VENV/
            if ours and (word.endswith(SUFFIXES) or word.endswith("/")):
                found.add(word)
    return found


def _exists(path: str, doc: Path) -> bool:
    bases = [ROOT, doc.parent, ROOT / "envforge"]
    return any((base / path).exists() for base in bases)


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(_text(README).splitlines()) <= 250


def test_the_readme_starts_with_what_envforge_is_then_how_to_install_it() -> None:
    headings = [line for line in _text(README).splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## Install", "## Quick start", "## Everyday commands"]


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_link_and_named_file_exists(doc: Path) -> None:
    text = _text(doc)
    links = [t for t in _LINK.findall(text) if "://" not in t]
    missing = [t for t in links if not (doc.parent / t).exists()]
    missing += sorted(p for p in _paths_named(text) if not _exists(p, doc))
    assert missing == []


def test_the_readme_links_every_file_in_docs() -> None:
    links = set(_LINK.findall(_text(README)))
    assert {f"docs/{d.name}" for d in DOCS} <= links


def test_every_command_has_a_row_in_the_readme() -> None:
    rows = [line for line in _text(README).splitlines() if line.startswith("| `")]
    missing = [name for name in COMMANDS if not any(f"`{name}" in row for row in rows)]
    assert missing == []


def test_every_exit_code_is_in_the_table() -> None:
    text = _text(ROOT / "docs" / "guarantees.md")
    rows = {line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")}
    assert {str(int(code)) for code in ExitCode} <= rows


def test_every_envforge_variable_named_is_read_somewhere() -> None:
    named: set[str] = set()
    for doc in (README, *DOCS):
        named |= set(re.findall(r"\bENVFORGE_[A-Z0-9_]*[A-Z0-9]\b", _text(doc)))
    sources = [
        *(ROOT / "envforge").rglob("*.py"),
        *(ROOT / "scripts").iterdir(),
        *(ROOT / "tests").rglob("*.py"),
    ]
    code = "\n".join(_text(p) for p in sources if p.is_file())
    assert sorted(name for name in named if name not in code) == []


# --------------------------------------------------------------------------- Quick start

#: A stand-in ``python3`` for the Quick start: ``-m venv DIR`` makes DIR/bin/pip (does
#: nothing) and DIR/bin/envforge (says which file ran and with what), nothing else.
_PYTHON3 = """#!/bin/sh
[ "$1 $2" = "-m venv" ] || exit 97
mkdir -p "$3/bin"
printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/pip"
printf '#!/bin/sh\\necho "$(readlink -f "$0") $*" >> "$HOME/ran"\\n' > "$3/bin/envforge"
chmod +x "$3/bin/pip" "$3/bin/envforge"
"""


def quick_start_commands() -> list[str]:
    """The Quick start block's commands, continuation lines joined, comments dropped."""
    text = _text(README).split("## Quick start", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", "", block)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def test_the_quick_start_is_two_commands_and_leaves_envforge_on_path(tmp_path: Path) -> None:
    """Issue 29 §1: after the first command, the same shell types ``envforge``; run here
    verbatim in a fresh home with a stand-in python3 (no install, no build)."""
    first, second = quick_start_commands()
    assert second == "bash scripts/test"
    assert "envforge build cpu" in first
    home, tools = tmp_path / "home", tmp_path / "tools"
    home.mkdir()
    tools.mkdir()
    (tools / "python3").write_text(_PYTHON3)
    (tools / "python3").chmod(0o755)
    script = f'{first}\ncommand -v envforge > "$HOME/found"'
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": str(home), "PATH": f"{tools}:/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    installed = home / ".envforge" / "bin" / "envforge"
    ran = (home / "ran").read_text().split()
    assert ran[0] == str(installed)  # the venv's envforge, reached by name
    assert ran[1:4] == ["build", "cpu", "--backend"]
    found = Path((home / "found").read_text().strip())
    assert found.resolve() == installed
    assert not (found.parent / "python").exists()  # only envforge on PATH, not the venv's python


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_commands_are_typed_envforge(doc: Path) -> None:
    """Every command shown runs as typed after the Quick start: by name, not by a path
    into the virtualenv."""
    text = _text(doc)
    assert "envforge/bin/envforge build" not in text
    assert "envforge/bin/envforge " not in text.replace("ln -sf ~/.envforge/bin/envforge ", "")
