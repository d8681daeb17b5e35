"""The ``needs_torch`` marker: a test that needs torch importable in this interpreter.

``pip install -e '.[dev]'`` installs no torch, and the unit tier with mypy must pass on
that alone; ``scripts/test`` installs torch (CPU) and runs every test. So a marked test is
skipped, saying why, only where torch is missing, and never where it is there; with
``ENVFORGE_REQUIRE_TORCH=1`` (``scripts/test``) a missing torch is an error instead of a
skip, so CI cannot lose these tests to a broken install.

``tests/unit/house/test_torch_gate.py`` keeps the unit tier honest: a unit test that imports
torch carries the marker, and no unit module imports it at its top.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from typing import Protocol

import pytest

MARKER = "needs_torch"
REASON = (
    "needs torch, which this interpreter does not have (pip install -e '.[dev]' installs "
    "none; scripts/test installs it)"
)
REQUIRE = "ENVFORGE_REQUIRE_TORCH"


class Item(Protocol):
    """The part of ``pytest.Item`` the gate uses."""

    @property
    def nodeid(self) -> str: ...

    def get_closest_marker(self, name: str) -> pytest.Mark | None: ...

    def add_marker(self, marker: pytest.MarkDecorator) -> None: ...


def has_torch() -> bool:
    """Whether ``import torch`` would find it (without importing it: seconds)."""
    return importlib.util.find_spec("torch") is not None


def gate(items: Iterable[Item], *, torch_here: bool, environ: Mapping[str, str]) -> list[str]:
    """Skip the marked items when torch is missing (their node IDs, in order); raise
    :class:`pytest.UsageError` instead when ``ENVFORGE_REQUIRE_TORCH=1``."""
    marked = [item for item in items if item.get_closest_marker(MARKER) is not None]
    if torch_here or not marked:
        return []
    if environ.get(REQUIRE) == "1":
        raise pytest.UsageError(
            f"{REQUIRE}=1 and no torch here, for {len(marked)} test(s) marked {MARKER}"
            f" ({marked[0].nodeid}, ...): install torch into this interpreter"
        )
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=REASON))
    return [item.nodeid for item in marked]
