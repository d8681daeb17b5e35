"""What the benchmarks here do with their figures: a median with its range, printed, and
appended to the benchmark's results file when asked (``--write``). Imported by its
siblings (Python puts a script's own folder first on ``sys.path``)."""

from __future__ import annotations

import statistics
from pathlib import Path


def median_range(values: list[float], unit: float = 1.0, fmt: str = "{:.3f}") -> str:
    """``median (min low, max high)`` of ``values`` times ``unit``, each in ``fmt``."""
    med, low, high = (
        fmt.format(v * unit) for v in (statistics.median(values), min(values), max(values))
    )
    return f"{med} (min {low}, max {high})"


def publish(text: str, results: Path, write: bool) -> None:
    """Print ``text``; with ``write``, append it to ``results`` too (a line end added
    where it has none)."""
    print(text)
    if write:
        with results.open("a", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
