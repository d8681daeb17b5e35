"""Wall time of ``envforge probe --level full`` against the floor of importing torch and
running one Conv2d forward+backward, measured side by side (alternating runs).

    python bench/probe_bench.py [--runs N] [--recipe cpu] [--python PATH]
    python bench/probe_bench.py --torchvision --python VENV/bin/python [--runs N]

Prints each run and the medians as a Markdown table row; the issue's target is a ratio of
at most 1.3 on CPU. Not a test: timings depend on the machine.

``--torchvision`` measures what a stack with torchvision adds (issue 18 §5, goal: at most
10 % over the torch-only probe): the same interpreter (one with torch and torchvision
installed) probed alternately with the import steps of torch and numpy only, and with
torchvision's import and device steps too (``run_probe`` on the CPU, no recipe pins).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process tree (user + system), stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, done.stdout


def step_seconds(report_json: str) -> dict[str, float]:
    return {s["name"]: float(s["seconds"]) for s in json.loads(report_json)["steps"]}


def torchvision_added(python: str, runs: int, level: str) -> int:
    """Torch-only probe vs the probe of a stack with torchvision, in one interpreter."""
    sys.path.insert(0, str(ROOT))
    from envforge.probe.runner import LocalPythonTarget, run_probe
    from envforge.probe.spec import ProbeSpec

    specs = {
        name: ProbeSpec(
            level="quick" if level == "quick" else "full",
            vendor="none",
            step_timeout=300.0,
            distributions=dists,
        )
        for name, dists in (
            ("torch", ("torch", "numpy")),
            ("torchvision", ("torch", "numpy", "torchvision")),
        )
    }
    target = LocalPythonTarget(python=python)
    wall: dict[str, list[float]] = {name: [] for name in specs}
    cpu: dict[str, list[float]] = {name: [] for name in specs}
    steps: list[dict[str, float]] = []
    for i in range(runs + 1):  # the first round warms the page cache and is not kept
        for name, spec in specs.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            report = run_probe(spec, target)
            seconds = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if not report.passed:
                sys.exit(f"{name} probe failed: {report.first_problem}")
            if i == 0:
                continue
            wall[name].append(seconds)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if name == "torchvision":
                steps.append({s.name: s.seconds for s in report.steps})
        if i:
            print(
                f"run {i}: "
                + "  ".join(f"{k} {wall[k][-1]:.2f}s wall/{cpu[k][-1]:.2f}s cpu" for k in specs),
                file=sys.stderr,
            )
    host = f"{platform.node() or 'host'} ({os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})"
    print("| host | level | runs | measure | torch only | with torchvision | added |")
    print("|---|---|---|---|---|---|---|")
    for label, data in (("wall", wall), ("cpu", cpu)):
        med = {name: statistics.median(v) for name, v in data.items()}
        added = med["torchvision"] / med["torch"] - 1.0
        print(
            f"| {host} | {level} | {runs} | {label} median | {med['torch']:.2f} s "
            f"| {med['torchvision']:.2f} s | {added * 100:+.1f} % |"
        )
    names = [n for n in steps[0] if "torchvision" in n] if steps else []
    print(
        "\nmedian seconds of torchvision's steps (worker-measured): "
        + ", ".join(f"{n} {statistics.median(s[n] for s in steps):.3f}" for n in names)
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--recipe", default="cpu")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--level", default="full", choices=["quick", "full"])
    parser.add_argument(
        "--torchvision",
        action="store_true",
        help="torch-only probe vs a stack with torchvision (--python has both)",
    )
    args = parser.parse_args()
    if args.torchvision:
        return torchvision_added(args.python, args.runs, args.level)

    commands = {
        "floor": [args.python, "-c", FLOOR],
        "floor+ckpt": [args.python, "-c", FLOOR_CKPT],
        "probe": [
            args.python,
            "-m",
            "envforge",
            "probe",
            "--recipe",
            args.recipe,
            "--level",
            args.level,
            "--json",
        ],
    }
    for argv in commands.values():  # warm the page cache for all
        timed(argv)
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    steps: list[dict[str, float]] = []
    for i in range(args.runs):
        for name, argv in commands.items():
            w, c, out = timed(argv)
            wall[name].append(w)
            cpu[name].append(c)
            if name == "probe":
                steps.append(step_seconds(out))
        print(
            f"run {i + 1}: "
            + "  ".join(f"{k} {wall[k][-1]:.2f}s wall/{cpu[k][-1]:.2f}s cpu" for k in commands)
            + f"  (probe steps: {json.dumps(steps[-1])})",
            file=sys.stderr,
        )
    host = f"{platform.node() or 'host'} ({os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})"
    print(
        "| host | level | runs | measure | floor | floor+ckpt | probe "
        "| probe/floor | probe/floor+ckpt |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, data in (("wall", wall), ("cpu", cpu)):
        med = {name: statistics.median(v) for name, v in data.items()}
        print(
            f"| {host} | {args.level} | {args.runs} | {label} median "
            f"| {med['floor']:.2f} s | {med['floor+ckpt']:.2f} s | {med['probe']:.2f} s "
            f"| {med['probe'] / med['floor']:.2f} | {med['probe'] / med['floor+ckpt']:.2f} |"
        )
    names = list(steps[0]) if steps else []
    medians = {n: statistics.median(s.get(n, 0.0) for s in steps) for n in names}
    print(
        "\nmedian seconds per probe step (worker-measured): "
        + ", ".join(f"{n} {v:.3f}" for n, v in medians.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
