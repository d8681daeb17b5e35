"""Time ``envforge audit`` as a user runs it: a fresh process, wall time and the peak
memory of its whole process tree (the collector and the reading pool included).

    python bench/audit_bench.py .venv --runs 5
    python bench/audit_bench.py /tmp/cudaenv --arch sm_90 --runs 3 --drop-caches

Peak memory is the largest sum of VmRSS over the process and its descendants, sampled
every 10 ms from /proc. ``--drop-caches`` (root) empties the page cache before each run
(cold reads); ``--fresh-cache`` gives each run an empty facts cache. Prints one line
bench/results-audit.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envforge.core.proc import descendants, process_table


def rss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def one_run(argv: list[str], drop: bool, fresh: bool) -> tuple[float, float, int]:
    """(seconds, peak MiB of the tree, exit code)."""
    env = dict(os.environ)
    if fresh:  # no facts cache: every shared object is read
        env["ENVFORGE_HOME"] = tempfile.mkdtemp(prefix="audit-bench-")
    if drop:
        subprocess.run(["sync"], check=False)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    began = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = 0
    while child.poll() is None:
        table = process_table()
        pids = [child.pid, *descendants(child.pid, table)]
        peak = max(peak, sum(rss_kib(p) for p in pids))
        time.sleep(0.01)
    return time.monotonic() - began, peak / 1024, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", help="a venv folder (or an image)")
    parser.add_argument("--arch", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--drop-caches", action="store_true")
    parser.add_argument(
        "--fresh-cache", action="store_true", help="a new ENVFORGE_HOME each run: no facts cache"
    )
    args = parser.parse_args()
    argv = [sys.executable, "-m", "envforge", "audit", args.target]
    if args.arch:
        argv += ["--arch", args.arch]
    times: list[float] = []
    peaks: list[float] = []
    for i in range(args.runs):
        seconds, peak, code = one_run(argv, args.drop_caches, args.fresh_cache)
        times.append(seconds)
        peaks.append(peak)
        print(f"run {i + 1}: {seconds:.2f} s, peak {peak:.0f} MiB, exit {code}")
    print(
        f"median {statistics.median(times):.2f} s (min {min(times):.2f}), peak {max(peaks):.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
