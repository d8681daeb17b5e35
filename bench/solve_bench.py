"""Wall time of `envforge solve ARCH` as a whole process (median of N runs per arch).

Usage: python bench/solve_bench.py [--runs 5] [ARCH ...]   (default: sm_89 gfx1151 sm_35)
The target (issue 10) is <= 0.5 s per arch; this prints figures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("archs", nargs="*", default=["sm_89", "gfx1151", "sm_35"])
    args = parser.parse_args()
    envforge = Path(sys.executable).with_name("envforge")
    for arch in args.archs:
        times: list[float] = []
        cpu: list[float] = []
        rc = 0
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run([str(envforge), "solve", arch], capture_output=True, check=False)
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            rc = done.returncode
        print(
            f"solve {arch:<8} exit {rc}  median {statistics.median(times):.3f} s  "
            f"min {min(times):.3f}  max {max(times):.3f}  "
            f"cpu median {statistics.median(cpu):.3f} s  ({args.runs} runs)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
