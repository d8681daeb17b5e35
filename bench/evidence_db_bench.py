"""The evidence database at fleet scale (issue 21 §7): import time, ``show`` and ``matrix``.

    python bench/evidence_db_bench.py [--import 100000] [--grow 1000000] [--runs 3]
        [--matrix-at 100000] [--keep DIR]

1. ``import``: N synthetic probe reports (tests/helpers/matrix_synth.py, the real
   classes; making them is not timed) go into an empty store through
   ``evidence_store.import_documents`` (what ``evidence import`` and ``fleet collect``
   call): one transaction. Target: 100,000 in at most 60 s.
2. ``matrix``: a fresh ``python -m envforge matrix -o SITE --json`` over the default store
   when it holds ``--matrix-at`` reports (after the import, or after growing: ``--runs``
   times).
3. ``show``: the store is grown to ``--grow`` rows by copying the imported rows under new
   keys in SQL (same columns and documents, distinct keys; one commit per copy), then
   ``python -m envforge show gfx1031`` is timed in fresh processes, against an empty store
   too. Target: 0.3 s at 1,000,000 reports; ``matrix``: 10 s at 1,000,000.

``--keep DIR``: the store lives in ``DIR/home`` and is kept; a later run with the same
``--keep`` reuses it (no import when it has rows; growing only what is missing), so the
1,000,000-row store is made once. Delete ``DIR`` when done (it is gigabytes).
Not a test: timings depend on the machine and its load (reported with the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envforge.evidence.evidence_store import import_documents  # noqa: E402
from envforge.evidence.records import Redactor  # noqa: E402
from tests.helpers.matrix_synth import corpus, make_report  # noqa: E402


def run(home: Path, *args: str) -> tuple[float, str]:
    """A fresh ``python -m envforge ARGS``: wall seconds, stdout. Bytecode is cached as for
    an installed envforge (``PYTHONDONTWRITEBYTECODE`` is dropped: with it every run
    compiles envforge's modules again, +0.2-0.3 s here); callers run once untimed first."""
    env = {**os.environ, "ENVFORGE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - started, done.stdout


def count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM reports").fetchone()[0])


def grow(db: Path, target: int) -> int:
    """Copy the imported rows (keys without ``-``) under new keys up to ``target`` rows."""
    conn = sqlite3.connect(db)
    try:
        originals = int(
            conn.execute("SELECT COUNT(*) FROM reports WHERE key NOT LIKE '%-%'").fetchone()[0]
        )
        have = count(db)
        columns = [r[1] for r in conn.execute("PRAGMA table_info(reports)")]
        rest = ", ".join(columns[1:])
        copy = have // max(originals, 1)
        while have < target:  # one commit per copy: a bounded WAL, progress kept
            take = min(originals, target - have)
            conn.execute(
                f"INSERT INTO reports (key, {rest}) SELECT key || '-{copy}', {rest} "
                f"FROM reports WHERE key NOT LIKE '%-%' LIMIT {take}"
            )
            conn.commit()
            have += take
            copy += 1
            print(f"  grown to {have} rows", flush=True)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return count(db)


def load(home: Path, n: int) -> None:
    started = time.perf_counter()
    docs = [
        (str(i), json.loads(make_report(s).to_json())) for i, s in enumerate(corpus(n, seed=21))
    ]
    print(f"made {len(docs)} reports in {time.perf_counter() - started:.1f} s (not timed)")
    os.environ["ENVFORGE_HOME"] = str(home)
    started = time.perf_counter()
    result = import_documents(docs, redact=Redactor(()))
    print(f"import: {len(result.added)} added in {time.perf_counter() - started:.1f} s")


def matrix(home: Path, site: Path, runs: int) -> None:
    started = time.perf_counter()
    run(home, "show", "cpu")  # untimed: a store from before is migrated on first open
    print(f"first open of the store (migration, if any): {time.perf_counter() - started:.1f} s")
    times, reports = [], 0
    for _ in range(runs):
        seconds, out = run(home, "matrix", "-o", str(site), "--json")
        times.append(seconds)
        reports = json.loads(out)["reports"]
    print(
        f"matrix over {reports} reports: "
        + " / ".join(f"{t:.2f}" for t in times)
        + f" s ({runs} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--import", dest="n", type=int, default=100_000)
    parser.add_argument("--grow", type=int, default=1_000_000)
    parser.add_argument("--matrix-at", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    with ExitStack() as stack:
        folder = args.keep or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="envforge-db-bench-"))
        )
        home, empty = folder / "home", folder / "empty"
        empty.mkdir(parents=True, exist_ok=True)
        db = home / "evidence.sqlite"
        if count(db) == 0:
            load(home, args.n)
        if count(db) == args.matrix_at < args.grow:
            matrix(home, folder / "site", 1)
        rows = grow(db, args.grow)
        print(f"store: {rows} rows ({db.stat().st_size / 1e9:.1f} GB)")
        if rows == args.matrix_at:
            matrix(home, folder / "site", args.runs)
        for name, where in (("empty store", empty), (f"{rows} reports", home)):
            run(where, "show", "gfx1031")  # untimed: bytecode written, store opened once
            times = [run(where, "show", "gfx1031")[0] for _ in range(args.runs)]
            print(
                f"show gfx1031, {name}: median {statistics.median(times):.2f} s, "
                f"min {min(times):.2f} s ({args.runs} runs)"
            )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
