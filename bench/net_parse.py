"""Listing parser benchmark: hostile project pages that used to take minutes (issue 22,
class 5: "10^5 versions or a 200 KB hostile HTML page take minutes").

Cases (generated, nothing is read from the network):

- ``json-100k``: a PEP 691 page with 100,000 versions (one wheel each, half yanked):
  parse, ``versions()``, ``yanked_versions()``;
- ``html-100k``: the same as a PEP 503 HTML page;
- ``html-<name>``: 200 KB of hostile HTML after one good anchor (unclosed ``<a ``,
  unclosed comments, a lone ``<`` flood, unterminated attribute quotes).

Each case runs in its own process (``python -c``) against the envforge found first on
``PYTHONPATH`` (``--root`` names a checkout, e.g. an older one for "before" figures),
with a time cap; reported: CPU seconds of the case (``time.process_time``), or "> cap".

    python bench/net_parse.py [--root CHECKOUT] [--cap 120] [--write]

Not a test: it prints figures (``--write`` appends them to bench/results-net.md).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-net.md"

CASE = r"""
import json, sys, time
from envforge.knowledge.index import parse_listing
kind = sys.argv[1]
W = "torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl"
url = "http://127.0.0.1:9/simple/torch/"
if kind.endswith("-100k"):
    names = [W.format(v=f"2.{i // 1000}.{i % 1000}") for i in range(100_000)]
    if kind.startswith("json"):
        body = json.dumps({"meta": {"api-version": "1.1"}, "files": [
            {"filename": n, "url": "/p/" + n, "yanked": i % 2 == 0}
            for i, n in enumerate(names)]}).encode()
        ctype = "application/vnd.pypi.simple.v1+json"
    else:
        body = "".join(f'<a href="/p/{n}"{" data-yanked" if i % 2 == 0 else ""}>{n}</a>\n'
                       for i, n in enumerate(names)).encode()
        ctype = "text/html"
else:
    unit = {"unclosed-a": "<a ", "comment": "<!--", "lt": "<", "quote": "<a href='",
            "amp": "&"}[kind.split("-", 1)[1]]
    good = W.format(v="2.15.0")
    body = (f'<html><a href="/p/{good}">{good}</a>' + unit * (200_000 // len(unit))).encode()
    ctype = "text/html"
start = time.process_time()
listing = parse_listing(body, ctype, url, "torch")
versions = listing.versions()
yanked = listing.yanked_versions()
print(f"{time.process_time() - start:.3f} {len(body)} {len(versions)} {len(yanked)}")
"""

CASES = (
    "json-100k",
    "html-100k",
    "html-unclosed-a",
    "html-comment",
    "html-lt",
    "html-quote",
    "html-amp",
)


def run(case: str, root: Path, cap: float) -> str:
    env = dict(os.environ, PYTHONPATH=str(root))
    try:
        done = subprocess.run(
            [sys.executable, "-c", CASE, case],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=cap,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"| {case} | > {cap:g} s (stopped) | | |"
    if done.returncode != 0:
        return f"| {case} | failed: {done.stderr.strip().splitlines()[-1][:80]} | | |"
    seconds, size, versions, yanked = done.stdout.split()
    return f"| {case} | {float(seconds):.2f} s | {int(size) // 1024} KB | {versions} / {yanked} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--cap", type=float, default=120.0)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"### {now}: {commit or args.root}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}",
        "",
        "| case | CPU (parse + versions + yanked) | page | versions / yanked |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        lines.append(run(case, args.root, args.cap))
        print(lines[-1], flush=True)
    if args.write:
        head = (
            ""
            if RESULTS.exists()
            else (
                "# listing parser benchmark\n\nProduced by `python bench/net_parse.py --write`; "
                "see the script's docstring.\n\n"
            )
        )
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write(head + "\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
