"""``envforge knowledge refresh`` benchmark: torch, numpy and the companions against the index.

Each run measures, with a fresh ENVFORGE_HOME per cold run:

1. **cold**: ``envforge knowledge refresh --no-pytorch-index --json`` with an empty cache
   (every listing, the PEP 658 metadata of one wheel per torch series and the JSON API
   fallback are fetched);
2. **warm**: the same command again with the cache of (1), within ``--max-age``
   (nothing is asked of the index; metadata is immutable, 404s are remembered);
3. **revalidate**: again with ``--max-age 0`` (listings are asked again, conditionally
   where the index gave an ETag/Last-Modified; metadata still from the cache).

Reported: wall time of the whole process (what a user waits for) and the ``seconds`` the
command itself reports (refresh only, without interpreter start and imports), plus the
request counts. Targets (issue 9): <= 10 s cold, <= 1 s warm.

    python bench/knowledge_refresh.py [--index URL] [--runs N] [--write]

The index defaults to the one pip is configured with. Not a test: it prints figures
(``--write`` appends them to bench/results-knowledge.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-knowledge.md"


def _run(home: Path, extra: list[str]) -> tuple[float, dict[str, Any]]:
    env = dict(os.environ)
    env["ENVFORGE_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    argv = [
        sys.executable,
        "-m",
        "envforge",
        "knowledge",
        "refresh",
        "--no-pytorch-index",
        "--json",
        *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"refresh failed (rc {done.returncode}): {done.stderr.strip()}")
    data: dict[str, Any] = json.loads(done.stdout)
    return wall, data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--index", help="simple-API root (default: pip's index)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="append to results-knowledge.md")
    args = parser.parse_args()
    extra = ["--index", args.index] if args.index else []

    rows: dict[str, list[tuple[float, dict[str, Any]]]] = {"cold": [], "warm": [], "revalidate": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="envforge-bench-") as tmp:
            home = Path(tmp)
            rows["cold"].append(_run(home, extra))
            rows["warm"].append(_run(home, extra))
            rows["revalidate"].append(_run(home, [*extra, "--max-age", "0"]))

    lines = []
    for mode, runs in rows.items():
        walls = [w for w, _ in runs]
        inner = [d["seconds"] for _, d in runs]
        req = runs[-1][1]["requests"]
        lines.append(
            f"| {mode} | {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}) "
            f"| {statistics.median(inner):.2f} s ({min(inner):.2f}-{max(inner):.2f}) "
            f"| {req['network']} / {req['revalidated']} / {req['cache']} / {req['failed']} |"
        )
    versions = rows["cold"][-1][1]["torch_versions"]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    block = "\n".join(
        [
            f"### {stamp}: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, {args.runs} run(s) each, medians (min-max)",
            "",
            f"{len(versions)} torch versions listed (newest {versions[-1]}).",
            "",
            "| cache | wall (process) | refresh itself | requests: network / revalidated / "
            "cache / failed (last run) |",
            "|---|---|---|---|",
            *lines,
            "",
        ]
    )
    print(block)
    if args.write:
        if not RESULTS.exists():
            RESULTS.write_text(
                "# knowledge refresh benchmark\n\nProduced by `python bench/knowledge_refresh.py"
                " --write`; see the script's docstring for what each row measures.\n\n",
                encoding="utf-8",
            )
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write(block + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
