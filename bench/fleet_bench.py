"""Wall time of the Slurm fleet cycle: ``fleet plan -> submit -> status --wait -> collect``
for two recipes on the venv backend (``cpu`` passes, a copy with a failing check fails),
on the one-node cluster of ``scripts/ci-slurm.sh up``, with uv's cache warm.

    bash scripts/ci-slurm.sh up
    SLURM_CONF=/tmp/envforge-ci-slurm/slurm.conf python bench/fleet_bench.py [--runs 3]
        [--level quick] [--wheelhouse $PIP_FIND_LINKS]

The first run warms uv's cache (not counted unless it is the only one). Each phase is a
fresh ``python -m envforge`` process, as a user runs it; the cluster's start is timed
separately (``ci-slurm.sh down`` then ``up``) with ``--restart``. Issue 21's goal: at most
60 s for the cycle. Not a test: timings depend on the machine and its load.
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


def envforge(*args: str, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - started, done


def failing_recipe(folder: Path) -> Path:
    check = folder / "fails.py"
    check.write_text("raise SystemExit('this node is not good enough')\n")
    text = (ROOT / "recipes" / "cpu.yaml").read_text()
    text = text.replace("name: cpu\n", "name: cpu-fails\n", 1)
    text = text.replace("certify:\n", f"certify:\n  extra_checks: [{check}]\n", 1)
    path = folder / "cpu-fails.yaml"
    path.write_text(text)
    return path


def cycle(work: Path, wheelhouse: str, level: str, env: dict[str, str]) -> dict[str, float]:
    plan = work / "plan"
    times: dict[str, float] = {}
    for phase, args, want in (
        (
            "plan",
            [
                "fleet",
                "plan",
                "--engine",
                "slurm",
                "--recipe",
                "cpu",
                "--recipe",
                str(failing_recipe(work)),
                "--arch",
                "gfx942",
                "--backend",
                "venv",
                "--wheelhouse",
                wheelhouse,
                "--level",
                level,
                "-o",
                str(plan),
            ],
            0,
        ),
        ("submit", ["fleet", "submit", str(plan)], 0),
        (
            "status --wait",
            ["fleet", "status", str(plan), "--wait", "--timeout", "900", "--json"],
            1,
        ),
        ("collect", ["fleet", "collect", str(plan), "-o", str(work / "site")], 1),
    ):
        seconds, done = envforge(*args, env=env)
        if done.returncode != want:
            sys.exit(f"{phase}: exit {done.returncode}, expected {want}: {done.stderr[-800:]}")
        if phase.startswith("status"):
            states = [t["state"] for t in json.loads(done.stdout)["tasks"]]
            if states != ["passed", "failed"]:
                sys.exit(f"task states {states}, expected passed, failed: {done.stdout}")
        times[phase] = seconds
    times["cycle"] = sum(times.values())
    return times


def restart() -> float:
    subprocess.run(
        ["bash", str(ROOT / "scripts/ci-slurm.sh"), "down"], check=True, capture_output=True
    )
    started = time.perf_counter()
    subprocess.run(
        ["bash", str(ROOT / "scripts/ci-slurm.sh"), "up"], check=True, capture_output=True
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--level", default="quick", choices=["quick", "full"])
    parser.add_argument("--wheelhouse", default=os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
    parser.add_argument("--restart", action="store_true", help="also time the cluster's start")
    args = parser.parse_args()
    if args.restart:
        print(f"ci-slurm.sh up (packages installed): {restart():.2f} s")
    runs: list[dict[str, float]] = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="envforge-fleet-bench-") as folder:
            env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
            env["ENVFORGE_HOME"] = str(Path(folder) / "collector")
            load = os.getloadavg()[0]
            times = cycle(Path(folder), args.wheelhouse, args.level, env)
            runs.append(times)
            print(
                f"run {i + 1} (load {load:.1f}): "
                + ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
            )
    counted = runs[1:] or runs
    print(
        f"\ncycle, median of {len(counted)} warm run(s): "
        f"{statistics.median(r['cycle'] for r in counted):.1f} s "
        f"(min {min(r['cycle'] for r in counted):.1f} s)"
    )


if __name__ == "__main__":
    main()
