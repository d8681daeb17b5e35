"""In-process cost of ``import_documents`` (issue 21 §7): CPU and wall seconds.

    python bench/evidence_import_cpu.py [--import 10000] [--runs 3] [--root TREE]...

N synthetic probe reports (tests/helpers/matrix_synth.py; made once, not timed) go into a
new, empty store through ``evidence_store.import_documents``, ``--runs`` times, each into
a fresh temporary folder (deleted after). ``--root`` names envforge source trees to time
(default: this one); with several, the runs alternate between them, so each tree is
measured on the same minutes. CPU is this process's (``time.process_time``: parsing,
SQLite's work, the tallies); the load average is printed with the figures.
Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _imported(root: Path) -> Any:
    """``import_documents`` as the tree ``root`` has it (envforge imported from there)."""
    for name in [m for m in sys.modules if m == "envforge" or m.startswith("envforge.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module("envforge.evidence.evidence_store")
        records = importlib.import_module("envforge.evidence.records")
    finally:
        sys.path.remove(str(root))
    return module.import_documents, records.Redactor(())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--import", dest="n", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", type=Path, action="append", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.helpers.matrix_synth import corpus, make_report

    docs = [
        (str(i), json.loads(make_report(s).to_json()))
        for i, s in enumerate(corpus(args.n, seed=21))
    ]
    sys.path.remove(str(ROOT))
    roots = [r.resolve() for r in (args.root or [ROOT])]
    print(f"{args.n} reports made; load average {os.getloadavg()[0]:.1f}")
    for run in range(args.runs):
        for root in roots:
            import_documents, redact = _imported(root)
            with tempfile.TemporaryDirectory(prefix="envforge-import-cpu-") as folder:
                os.environ["ENVFORGE_HOME"] = folder
                cpu, wall = time.process_time(), time.perf_counter()
                added = len(import_documents(docs, redact=redact).added)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(
                f"run {run + 1} {root}: {added} added, CPU {cpu:.2f} s, wall {wall:.2f} s, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
