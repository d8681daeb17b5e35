"""Compatibility table load time: the shipped table alone, with one overlay (a new
release, as ``knowledge refresh -o`` writes), and with a folder of 10 overlays; cold (a
fresh process's first ``load_table()``) and warm (cached per overlay set).

    python bench/knowledge_load_bench.py [--runs N]

Each cold figure is a new interpreter (``python -c``), so import time is measured apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OVERLAY = """\
schema: 1
releases:
  - series: "2.{minor}"
    versions: ["2.{minor}.0"]
    python: ["3.11", "3.15"]
    python_source: "bench"
    source: "bench"
    variants:
      - {{name: cpu, confidence: uncertain, source: "bench"}}
      - {{name: cu132, confidence: uncertain, source: "bench", sm: [sm_90], sm_source: bench}}
"""

PROBE = """
import json, time
t0 = time.perf_counter()
from envforge.knowledge import load_table
t1 = time.perf_counter()
table = load_table()
t2 = time.perf_counter()
for _ in range(1000):
    load_table()
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "cold": t2 - t1, "warm": (t3 - t2) / 1000,
                  "layers": len(table.layers)}))
"""


def measure(env: dict[str, str], runs: int) -> dict[str, float]:
    rows = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE], env=env, check=True, capture_output=True, text=True
        ).stdout
        rows.append(json.loads(out))
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.yaml"
        one.write_text(OVERLAY.format(minor=16), encoding="utf-8")
        folder = Path(tmp) / "many"
        folder.mkdir()
        for i in range(10):
            (folder / f"o{i:02d}.yaml").write_text(OVERLAY.format(minor=16 + i), encoding="utf-8")
        base = {**os.environ, "XDG_CONFIG_HOME": str(Path(tmp) / "none")}
        base.pop("ENVFORGE_KNOWLEDGE_PATH", None)
        cases = {
            "shipped only": base,
            "1 overlay": {**base, "ENVFORGE_KNOWLEDGE_PATH": str(one)},
            "10 overlays (folder)": {**base, "ENVFORGE_KNOWLEDGE_PATH": str(folder)},
        }
        print(f"median of {args.runs} runs (seconds / milliseconds)")
        for name, env in cases.items():
            m = measure(env, args.runs)
            print(
                f"{name:<22} layers {int(m['layers']):>2}  import {m['import']:.3f} s  "
                f"cold load {m['cold'] * 1000:.1f} ms  warm load {m['warm'] * 1e6:.1f} us"
            )


if __name__ == "__main__":
    main()
