"""Start-up time of the light commands (``--help``, list, show, validate, solve, render,
detect), before and after a change, next to the floor ``python -c "import click, yaml"``.

Every case runs ``--runs`` times (default 11) with the same interpreter, interleaved round
by round so that load on a shared machine hits every case alike, after one unrecorded
warm-up round (file-system caches, bytecode, envforge's listing and compiled-table
caches). Each run records its wall time and its CPU time (user + system of the child,
``os.wait4``): on a machine others use, CPU time moves less with load than wall time.
Bytecode is written to a private ``PYTHONPYCACHEPREFIX`` (as an installed wheel has its
``.pyc`` files; ``PYTHONDONTWRITEBYTECODE`` is dropped). A tree is put first on
``PYTHONPATH``, so ``--before DIR`` can be an export of an older commit, e.g.::

    git archive 4d4f53e | tar -x -C /tmp/base
    python bench/startup.py --before /tmp/base [--runs 11] [--write] [--only solve ...]

``--only WORD`` (repeatable) measures the floor and the cases whose name has WORD. The
table gives the median and the least CPU time of each case beside the wall time, and the
load average at the start and end of the run (the least CPU time is the one least
inflated by other processes on a shared machine).

Not a test: it prints figures (``--write`` appends them to bench/results-startup.md).
Targets (issue 32): ``envforge list`` at most 1.25x the floor; ``solve sm_89``,
``validate cpu`` and ``show cpu`` at most 2.5x. The "cold caches" cases run with an
``ENVFORGE_HOME`` and ``ENVFORGE_CACHE_DIR`` that can be neither read nor written: every
recipe and every table is parsed from YAML on each run.
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

from _results import publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-startup.md"
FLOOR = "python -c 'import click, yaml'"
NO_GPU = ROOT / "tests" / "fixtures" / "sysfs" / "none"

#: (command, target x floor or None)
COMMANDS: tuple[tuple[tuple[str, ...], float | None], ...] = (
    (("list",), 1.25),
    (("--help",), None),
    (("solve", "sm_89"), 2.5),
    (("validate", "cpu"), 2.5),
    (("show", "cpu"), 2.5),
    (("render", "cpu"), None),
    (("detect", "--root", str(NO_GPU)), None),
)

#: envforge's state folder for the runs: its caches are warm after the first round.
HOME = Path(tempfile.mkdtemp(prefix="envforge-startup-"))
#: Bytecode of every tree measured (a wheel ships or writes its .pyc files).
PYCACHE = Path(tempfile.mkdtemp(prefix="envforge-startup-pyc-"))
#: A state and cache folder that can be neither read nor written: every run parses every
#: file (the listing cache is in ENVFORGE_HOME, the compiled tables in ENVFORGE_CACHE_DIR).
NO_CACHE = "/dev/null/envforge"

Case = tuple[list[str], dict[str, str]]


def _case(tree: Path | None, argv: Sequence[str], home: str | None = None) -> Case:
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "ENVFORGE_KNOWLEDGE_PATH"):
        env.pop(name, None)
    # one state and cache folder per tree: each tree's caches are bound to its own code
    mine = HOME / ("before" if tree not in (None, ROOT) else "after")
    env["ENVFORGE_HOME"] = home or str(mine)
    env["ENVFORGE_CACHE_DIR"] = home or str(mine / "cache")  # the compiled tables
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env["XDG_CONFIG_HOME"] = str(HOME / "config")  # no user overlays
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return [sys.executable, *argv], env


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run. From a neutral folder: ``python -m`` puts
    the current folder first on sys.path, which would shadow the tree on PYTHONPATH."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def cases(before: Path | None) -> dict[str, Case]:
    out: dict[str, Case] = {FLOOR: _case(None, ["-c", "import click, yaml"])}
    for argv, _ in COMMANDS:
        name = " ".join(a if a != str(NO_GPU) else "NONE" for a in argv)
        out[f"envforge {name} (after)"] = _case(ROOT, ["-m", "envforge", *argv])
        if before is not None:
            out[f"envforge {name} (before)"] = _case(before, ["-m", "envforge", *argv])
    for argv in (("list",), ("solve", "sm_89")):
        out[f"envforge {' '.join(argv)} (after, cold caches)"] = _case(
            ROOT, ["-m", "envforge", *argv], NO_CACHE
        )
    return out


def measure(
    before: Path | None, runs: int, only: Sequence[str] = ()
) -> dict[str, list[tuple[float, float]]]:
    todo = {
        name: case
        for name, case in cases(before).items()
        if name == FLOOR or not only or any(word in name for word in only)
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in todo}
    for round_no in range(runs + 1):
        for name, (argv, env) in todo.items():
            sample = _once(argv, env)
            if round_no:  # round 0 warms the caches and writes the bytecode
                times[name].append(sample)
    return times


#: Where ``envforge solve sm_89`` spends its time after the interpreter started, phase by
#: phase, in one fresh interpreter with warm caches.
_PHASES = """
import time, io, contextlib, json, importlib
t0 = time.perf_counter()
import click, yaml
t1 = time.perf_counter()
from envforge.cli import COMMANDS, main
t2 = time.perf_counter()
importlib.import_module(COMMANDS["solve"].split(":")[0])
t3 = time.perf_counter()
from envforge.knowledge import load_table
load_table()
t4 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    main(["solve", "sm_89"])
t5 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]))
"""
PHASES = (
    "import click, yaml (the floor's imports)",
    "import the CLI group (commands load when used)",
    "import solve's module (solver, recipe model; the loader on a miss only)",
    "load the table (compiled cache)",
    "run solve sm_89",
)


def breakdown(runs: int) -> str:
    argv, env = _case(ROOT, ["-c", _PHASES])
    samples: list[list[float]] = []
    for _ in range(runs + 1):
        done = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, check=True)
        samples.append(json.loads(done.stdout))
    samples = samples[1:]
    lines = ["| phase of `envforge solve sm_89` (after) | median ms |", "|---|---|"]
    for i, name in enumerate(PHASES):
        lines.append(f"| {name} | {1000 * statistics.median(s[i] for s in samples):.1f} |")
    return "\n".join(lines) + "\n"


def table(times: dict[str, list[tuple[float, float]]], before: Path | None, load: str = "") -> str:
    floor_wall = statistics.median(w for w, _ in times[FLOOR])
    floor_cpu = statistics.median(c for _, c in times[FLOOR])
    floor_min = min(c for _, c in times[FLOOR])
    lines = [
        f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}",
        "",
        f"Runs per case: {len(times[FLOOR])}, interleaved. Before: "
        f"{_describe(before) if before else 'not measured'}. After: {_describe(ROOT)}."
        + (f" Load average (1 min) {load}." if load else ""),
        "",
        "| command | median wall s | min wall s | x floor (wall) | median CPU s | x floor (CPU) "
        "| min CPU s | x floor (min CPU) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, values in times.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        least = min(c for _, c in values)
        lines.append(
            f"| `{name}` | {wall:.3f} | {min(w for w, _ in values):.3f} "
            f"| {wall / floor_wall:.2f} | {cpu:.3f} | {cpu / floor_cpu:.2f} "
            f"| {least:.3f} | {least / floor_min:.2f} |"
        )
    lines.append("")
    for argv, target in COMMANDS:
        values = times.get(f"envforge {' '.join(argv)} (after)", [])
        if target is None or not values:
            continue
        wall = statistics.median(w for w, _ in values) / floor_wall
        cpu = statistics.median(c for _, c in values) / floor_cpu
        verdict = "met" if max(wall, cpu) <= target else "MISSED"
        lines.append(
            f"- target `envforge {' '.join(argv)}` <= {target}x floor: {verdict} "
            f"({wall:.2f}x wall, {cpu:.2f}x CPU)"
        )
    return "\n".join(lines) + "\n"


def _describe(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{tree} at `{done.stdout.strip()[:60]}`" if done.returncode == 0 else str(tree)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", type=Path, help="a tree of the commit to compare with")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--write", action="store_true", help=f"append to {RESULTS.name}")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="WORD",
        help="measure only the cases whose name has WORD (repeatable; the floor always)",
    )
    args = parser.parse_args(argv)
    start = os.getloadavg()[0]
    times = measure(args.before, args.runs, args.only)
    load = f"{start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    text = table(times, args.before, load) + "\n" + breakdown(args.runs)
    publish(text, RESULTS, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
