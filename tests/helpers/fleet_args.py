"""``fleet plan``'s command line, as the tests write it."""

from __future__ import annotations

from pathlib import Path


def plan_args(out: Path, *options: str, engine: str = "slurm", recipe: str = "cpu") -> list[str]:
    """``fleet plan --engine ENGINE --recipe RECIPE OPTIONS... -o OUT``, without the program."""
    return ["fleet", "plan", "--engine", engine, "--recipe", recipe, *options, "-o", str(out)]
