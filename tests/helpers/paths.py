"""Where the tests' files are, whatever folder a test module sits in (tests/unit/README.md):
a test names the repository, ``tests/`` or ``tests/unit/`` through these, never by counting
``Path(__file__).parents``."""

from __future__ import annotations

from pathlib import Path

#: the repository root (envforge/, docs/, recipes/, scripts/)
ROOT = Path(__file__).resolve().parents[2]
#: tests/: fixtures/, golden/, hostile/ (shared by the unit and acceptance tiers)
TESTS = ROOT / "tests"
#: tests/unit/: the unit tier, its conftest.py and its own fixtures/
UNIT = TESTS / "unit"
