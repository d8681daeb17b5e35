"""Where the shipped templates and recipes live, installed or in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


def shipped_dir(name: str) -> Path:
    """``templates`` or ``recipes``: inside the wheel, else the checkout's top level."""
    installed = _PACKAGE / "_shipped" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name


def templates_dir() -> Path:
    return shipped_dir("templates")


def recipes_dir() -> Path:
    return shipped_dir("recipes")


def data_file(name: str) -> Path:
    """A data file shipped inside the package (``envforge/data/NAME``)."""
    return _PACKAGE / "data" / name
