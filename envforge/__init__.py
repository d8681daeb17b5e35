"""envforge: known-good GPU PyTorch stacks, built, probed under deadlines, certified."""

from __future__ import annotations

__version__ = "0.1.0"
