"""The README and docs/ stay true and short: the README leads with the user in at most 250
lines; every file it or docs/*.md names exists; every command and exit code is documented;
every ENVFORGE_* variable they name is one envforge or its scripts read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envforge.cli import COMMANDS
from envforge.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
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
    sources = [*(ROOT / "envforge").rglob("*.py"), *(ROOT / "scripts").iterdir(),
               *(ROOT / "tests").rglob("*.py")]
    code = "\n".join(_text(p) for p in sources if p.is_file())
    assert sorted(name for name in named if name not in code) == []
