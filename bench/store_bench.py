"""The store step of a venv build: a fresh venv's files joining the store of shared files.

uv installs a venv by hard links from its cache; :func:`envforge.backends.venv.share.add_to_store`
then copies each of those files into the store (hashing it while copying) and links the
venv to the copy, so that no venv file is uv's cache file. This is the cost every first
venv of a stack pays in an empty ``ENVFORGE_HOME`` (each acceptance test that builds).

Each run makes a venv with uv (``--link-mode hardlink``, the torch wheel from a wheel
folder, uv's cache warm after the first run) in a fresh folder, then times
``add_to_store`` alone: wall time and this process's user and system CPU.

    python bench/store_bench.py [--wheelhouse DIR] [--torch REQ] [--runs N] [--write]

Not a test: it prints figures (``--write`` appends them to bench/results-venv.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import median_range, publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-venv.md"
sys.path.insert(0, str(ROOT))

from envforge.backends.venv import share  # noqa: E402 - after the path is set
from envforge.lock import uv_bin  # noqa: E402 - after the path is set


def hard_linked_venv(root: Path, wheelhouse: Path, torch: str) -> Path:
    venv = root / "venv"
    env = {**os.environ, "UV_LINK_MODE": "hardlink"}
    uv = uv_bin()
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True, env=env)
    subprocess.run(
        [
            uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
            "--find-links", str(wheelhouse), torch, "numpy<3",
        ],
        check=True,
        env=env,
    )  # fmt: skip
    return venv


def one_run(wheelhouse: Path, torch: str) -> tuple[int, float, float, float]:
    """(files added, wall, user CPU, system CPU) of one add_to_store."""
    with tempfile.TemporaryDirectory(prefix="envforge-store-bench-") as tmp:
        venv = hard_linked_venv(Path(tmp), wheelhouse, torch)
        start, before = time.perf_counter(), os.times()
        added = share.add_to_store(venv, Path(tmp) / "store" / "sha256")
        after = os.times()
        wall = time.perf_counter() - start
        shutil.rmtree(venv, ignore_errors=True)
    return added, wall, after.user - before.user, after.system - before.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    wheels = os.environ.get("PIP_FIND_LINKS", "")
    parser.add_argument("--wheelhouse", type=Path, default=Path(wheels))
    parser.add_argument("--torch", default="torch==2.13.0", help="the torch requirement")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    runs = [one_run(args.wheelhouse, args.torch) for _ in range(args.runs)]
    files = runs[0][0]
    rows = []
    for label, index in (("wall", 1), ("user CPU", 2), ("system CPU", 3)):
        values = [r[index] for r in runs]
        rows.append(f"| {label} | {median_range(values, fmt='{:.2f}')} s |")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = (
        f"\n### {stamp}: the store step of a first venv (`bench/store_bench.py`),"
        f" {files} files, {platform.machine()}, {os.cpu_count()} CPUs,"
        f" {args.runs} runs, median (min, max)\n\n| what | figure |\n|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    publish(text, RESULTS, args.write)


if __name__ == "__main__":
    main()
