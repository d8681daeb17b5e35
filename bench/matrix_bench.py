"""Wall time of ``envforge matrix`` over N synthetic reports (default 10,000), and the time
the page takes to draw in headless Chromium.

    python bench/matrix_bench.py [--reports 10000] [--runs 3] [--keep DIR] [--no-browser]

The reports are made with the real ProbeReport and certificate classes
(tests/helpers/matrix_synth.py): every 4th run is a certificate in a store-like folder
(``store/<hex>.json``), the others ``reports/run-N/probe.json``; one file per run, so N
files and N distinct reports. The command is timed as a user runs it (a fresh
``python -m envforge matrix --evidence reports --evidence store -o site`` process: start-up,
imports, reading, aggregating, rendering, writing), then once more in-process per phase.
The browser figure is what the page itself measures (``data-render-ms``: JSON.parse and
drawing the table; ``data-ready-ms``: from navigation start until the script finished,
so including reading the HTML) in ``chromium --headless --dump-dom``, plus that process's
wall time. The issue's target is <= 2 s for 10,000 reports. Not a test: timings depend on
the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def write_corpus(folder: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT))
    from envforge.publish.certificate import Certificate
    from tests.helpers import matrix_synth

    for i, spec in enumerate(matrix_synth.corpus(n, seed=10_000)):
        if i % 4 == 0:
            cert = Certificate(matrix_synth.make_certificate(spec))
            path = folder / "store" / (cert.digest.split(":")[1] + ".json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(cert.to_json(compact=False) + "\n", encoding="utf-8")
        else:
            matrix_synth.make_report(spec).write(folder / "reports" / f"run-{i:05d}")
        # the report folders also hold probe.junit.xml, as --report DIR writes them


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(folder: Path, out: Path) -> tuple[float, float, dict[str, object]]:
    """(wall seconds, CPU seconds, the --json summary) of one ``envforge matrix`` process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cpu = _child_cpu()
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envforge",
            "matrix",
            "--evidence",
            str(folder / "reports"),
            "--evidence",
            str(folder / "store"),
            "-o",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"envforge matrix failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, _child_cpu() - cpu, json.loads(done.stdout)


def time_phases(folder: Path, out: Path) -> dict[str, float]:
    from envforge.evidence.matrix import aggregate, write_site
    from envforge.evidence.records import Redactor, read_evidence

    t0 = time.perf_counter()
    found = read_evidence([folder / "reports", folder / "store"], Redactor.for_this_host())
    t1 = time.perf_counter()
    matrix = aggregate(found)
    t2 = time.perf_counter()
    write_site(matrix, out)
    t3 = time.perf_counter()
    return {"read": t1 - t0, "aggregate": t2 - t1, "render+write": t3 - t2}


def time_browser(index: Path) -> tuple[float, float, float] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("no chromium on PATH: browser figures skipped", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory(prefix="envforge-chromium-") as profile:
        started = time.perf_counter()
        done = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", index.as_uri()],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        wall = time.perf_counter() - started
    render = re.search(r'data-render-ms="([0-9.]+)"', done.stdout)
    ready = re.search(r'data-ready-ms="([0-9.]+)"', done.stdout)
    if not render or not ready:
        sys.exit(f"the page did not finish drawing: {done.stderr[-2000:]}")
    return float(render.group(1)), float(ready.group(1)), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the corpus and site here and keep them")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    work = args.keep or Path(tempfile.mkdtemp(prefix="envforge-matrix-bench-"))
    try:
        corpus = work / "evidence"
        if not corpus.exists():
            started = time.perf_counter()
            write_corpus(corpus, args.reports)
            print(
                f"wrote {args.reports} reports under {corpus} in "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
        site = work / "site"
        load = os.getloadavg()
        walls: list[float] = []
        cpus: list[float] = []
        summary: dict[str, object] = {}
        for i in range(args.runs):
            wall, cpu, summary = time_command(corpus, site)
            walls.append(wall)
            cpus.append(cpu)
            print(
                f"run {i + 1}: envforge matrix {wall:.2f} s wall, {cpu:.2f} s CPU", file=sys.stderr
            )
        phases = time_phases(corpus, site)
        sizes = {p.name: p.stat().st_size for p in (site / "index.html", site / "matrix.json")}
        print(
            f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, {platform.platform()}"
        )
        print(f"summary: {json.dumps(summary)}")
        print(
            f"sizes: index.html {sizes['index.html'] / 1e6:.2f} MB, "
            f"matrix.json {sizes['matrix.json'] / 1e6:.2f} MB"
        )
        print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(
            "\n| reports | envforge matrix wall, median | wall, min | CPU (user+sys), median "
            "| in-process: read | aggregate | render+write |"
        )
        print("|---|---|---|---|---|---|---|")
        print(
            f"| {args.reports} | {statistics.median(walls):.2f} s ({args.runs} runs) | "
            f"{min(walls):.2f} s | {statistics.median(cpus):.2f} s | {phases['read']:.2f} s | "
            f"{phases['aggregate']:.2f} s | {phases['render+write']:.2f} s |"
        )
        if not args.no_browser:
            figures = [time_browser(site / "index.html") for _ in range(args.runs)]
            got = [f for f in figures if f is not None]
            if got:
                print(
                    "\n| page in headless Chromium | JSON.parse + draw (data-render-ms) | "
                    "navigation start → drawn (data-ready-ms) | chromium --dump-dom wall |"
                )
                print("|---|---|---|---|")
                print(
                    f"| median of {len(got)} | {statistics.median(g[0] for g in got):.0f} ms | "
                    f"{statistics.median(g[1] for g in got):.0f} ms | "
                    f"{statistics.median(g[2] for g in got):.2f} s |"
                )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
