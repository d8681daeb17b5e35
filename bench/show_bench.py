"""Wall time of ``envforge show RECIPE`` (its "Evidence: certified on …" line reads the
local evidence store) over a store of N synthetic reports, against an empty store.

    python bench/show_bench.py [--reports 10000] [--runs 5] [--recipe gfx1031]

Half of the runs are certificates (``certificates/``), half probe reports (``reports/``),
made with the real classes (tests/helpers/matrix_synth.py). Each run is a fresh
``python -m envforge show RECIPE`` process, as a user runs it. Not a test: timings depend
on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.matrix_synth import corpus, make_certificate, make_report  # noqa: E402


def _fill(home: Path, n: int) -> None:
    (home / "reports").mkdir(parents=True)
    (home / "certificates").mkdir()
    for i, spec in enumerate(corpus(n)):
        if i % 2:
            (home / "reports" / f"{i}.json").write_text(make_report(spec).to_json())
        else:
            text = json.dumps(make_certificate(spec))
            (home / "certificates" / f"{i}.json").write_text(text)


def _time(home: Path, recipe: str, runs: int) -> list[float]:
    env = {**os.environ, "ENVFORGE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "envforge", "show", recipe],
            env=env,
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--recipe", default="gfx1031")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envforge-show-bench-") as folder:
        full, empty = Path(folder) / "full", Path(folder) / "empty"
        _fill(full, args.reports)
        empty.mkdir()
        for name, home in (("empty store", empty), (f"{args.reports} reports", full)):
            times = _time(home, args.recipe, args.runs)
            print(
                f"{name:>15}: median {statistics.median(times):.2f} s, "
                f"min {min(times):.2f} s, max {max(times):.2f} s ({args.runs} runs)"
            )


if __name__ == "__main__":
    main()
