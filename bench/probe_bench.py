"""Wall time of ``envforge probe --level full`` against the floor of importing torch and
running one Conv2d forward+backward, measured side by side (alternating runs).

    python bench/probe_bench.py [--runs N] [--recipe cpu] [--python PATH]

Prints each run and the medians as a Markdown table row; the issue's target is a ratio of
at most 1.3 on CPU. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOOR = (
    "import torch\n"
    "conv = torch.nn.Conv2d(8, 16, 3, padding=1)\n"
    "x = torch.randn(2, 8, 44, 44, requires_grad=True)\n"
    "conv(x).sum().backward()\n"
)
#: The floor plus what the probe's grad-checkpoint step inherently costs in torch >= 2.x:
#: torch.utils.checkpoint(use_reentrant=False) imports torch._dynamo on first use.
FLOOR_CKPT = FLOOR + (
    "import torch.utils.checkpoint as ckpt\n"
    "ckpt.checkpoint(conv, x, use_reentrant=False).sum().backward()\n"
)


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--recipe", default="cpu")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--level", default="full", choices=["quick", "full"])
    args = parser.parse_args()

    commands = {
        "floor": [args.python, "-c", FLOOR],
        "floor+ckpt": [args.python, "-c", FLOOR_CKPT],
        "probe": [args.python, "-m", "envforge", "probe", "--recipe", args.recipe,
                  "--level", args.level],
    }
    for argv in commands.values():  # warm the page cache for all
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(args.runs):
        for name, argv in commands.items():
            times[name].append(timed(argv))
        print(f"run {i + 1}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()),
              file=sys.stderr)
    med = {name: statistics.median(v) for name, v in times.items()}
    print("| host | level | runs | floor | floor+ckpt | probe | probe/floor | probe/floor+ckpt |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {platform.node() or 'host'} ({platform.machine()}) | {args.level} | {args.runs} "
          f"| {med['floor']:.2f} s | {med['floor+ckpt']:.2f} s | {med['probe']:.2f} s "
          f"| {med['probe'] / med['floor']:.2f} | {med['probe'] / med['floor+ckpt']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
