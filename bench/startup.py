"""Start-up time of light commands: ``envforge list`` and ``envforge --help``, before and
after a change, next to the floor ``python -c "import click, yaml"``.

Every case runs ``--runs`` times (default 10) with the same interpreter, interleaved
round by round so that load on a shared machine hits every case alike, after one
unrecorded warm-up round (file-system caches). A tree is put first on ``PYTHONPATH``, so
``--before DIR`` can be a checkout of an older commit, e.g.::

    git worktree add --detach /tmp/base 79d9f4a
    python bench/startup.py --before /tmp/base [--runs 10] [--write]

Not a test: it prints figures (``--write`` appends them to bench/results-startup.md).
The target (issue 8): ``envforge list`` at most 1.5x ``python -c "import click, yaml"``.
``envforge list`` keeps each recipe's row in a cache (envforge/recipe/listing.py); the
"no listing cache" case shows the cost of loading and checking every recipe each time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-startup.md"
FLOOR = "python -c 'import click, yaml'"
TARGET = 1.5


#: envforge's state folder for the runs: its listing cache is warm after the first round.
HOME = Path(tempfile.mkdtemp(prefix="envforge-startup-"))
#: A state folder that can be neither read nor written: every run loads every recipe.
NO_CACHE = "/dev/null/envforge"


def _case(
    tree: Path | None, argv: Sequence[str], home: str | None = None
) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["ENVFORGE_HOME"] = home or str(HOME)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return [sys.executable, *argv], env


def _once(argv: list[str], env: dict[str, str]) -> float:
    # From a neutral folder: ``python -m`` puts the current folder first on sys.path,
    # which would shadow the tree named by PYTHONPATH.
    start = time.perf_counter()
    subprocess.run(
        argv,
        env=env,
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def measure(before: Path | None, runs: int) -> dict[str, list[float]]:
    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        FLOOR: _case(None, ["-c", "import click, yaml"]),
        "envforge list (after)": _case(ROOT, ["-m", "envforge", "list"]),
        "envforge list (after, no listing cache)": _case(
            ROOT, ["-m", "envforge", "list"], NO_CACHE
        ),
        "envforge --help (after)": _case(ROOT, ["-m", "envforge", "--help"]),
    }
    if before is not None:
        cases["envforge list (before)"] = _case(before, ["-m", "envforge", "list"])
        cases["envforge --help (before)"] = _case(before, ["-m", "envforge", "--help"])
    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_no in range(runs + 1):
        for name, (argv, env) in cases.items():
            seconds = _once(argv, env)
            if round_no:  # round 0 warms the caches
                times[name].append(seconds)
    return times


#: Where ``envforge list`` spends its time after the interpreter started, phase by phase,
#: in one fresh interpreter (each phase's imports are what the previous ones lacked), with
#: a warm listing cache.
_PHASES = """
import time, io, contextlib, json
t0 = time.perf_counter()
import click
t1 = time.perf_counter()
from envforge.cli import main
t2 = time.perf_counter()
import envforge.cli.recipes
t3 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    main(["list"])
t4 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3]))
"""
PHASES = (
    "import click",
    "import the CLI group (commands load when used)",
    "import list's module (catalogue, listing cache; no loader, no packaging)",
    "run list (rows of every recipe from the cache)",
)


def breakdown(runs: int) -> str:
    argv, env = _case(ROOT, ["-c", _PHASES])
    samples: list[list[float]] = []
    for _ in range(runs + 1):
        done = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, check=True)
        samples.append(json.loads(done.stdout))
    samples = samples[1:]
    lines = ["| phase of `envforge list` (after) | median ms |", "|---|---|"]
    for i, name in enumerate(PHASES):
        lines.append(f"| {name} | {1000 * statistics.median(s[i] for s in samples):.1f} |")
    return "\n".join(lines) + "\n"


def table(times: dict[str, list[float]], before: Path | None) -> str:
    floor = statistics.median(times[FLOOR])
    lines = [
        f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}",
        "",
        f"Runs per case: {len(times[FLOOR])}, interleaved. Before: "
        f"{_describe(before) if before else 'not measured'}. After: {_describe(ROOT)}.",
        "",
        "| command | median s | min s | max s | x floor |",
        "|---|---|---|---|---|",
    ]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(
            f"| `{name}` | {median:.3f} | {min(values):.3f} | {max(values):.3f} "
            f"| {median / floor:.2f} |"
        )
    after = statistics.median(times["envforge list (after)"]) / floor
    verdict = "met" if after <= TARGET else "MISSED"
    lines += ["", f"Target `envforge list` <= {TARGET}x floor: {verdict} ({after:.2f}x).", ""]
    return "\n".join(lines)


def _describe(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{tree} at `{done.stdout.strip()[:60]}`" if done.returncode == 0 else str(tree)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="checkout of the commit to compare with")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--write", action="store_true", help=f"append to {RESULTS.name}")
    args = parser.parse_args(argv)
    text = table(measure(args.before, args.runs), args.before) + "\n" + breakdown(args.runs)
    print(text)
    if args.write:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
