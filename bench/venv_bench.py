"""Venv backend benchmark: first build, second (no-op) build, and plain venv + pip.

For a recipe (default ``cpu``) and a wheel folder (default ``$PIP_FIND_LINKS``), each run
measures, in fresh temporary folders:

1. ``envforge build RECIPE --backend venv --wheelhouse DIR``, first time: wall time, and
   how much of it the certification probe took (from ``certified.json``);
2. the same command again (nothing changed: must say "up to date");
3. the floor: ``pythonX.Y -m venv`` then ``pip install`` of the same requirement set
   (torch from the same wheel folder, the same NumPy bound), no probe.

Caches: ``cold`` runs give uv and pip empty cache folders (packages other than torch come
from the index, torch from the wheel folder); ``warm`` runs reuse one uv cache and one pip
cache across runs, primed by a first unrecorded run. The uv cache is what makes a
*different* venv of the same set fast; the no-op build never calls uv at all.

    python bench/venv_bench.py [--recipe cpu] [--wheelhouse DIR] [--runs N] [--write]

Not a test: it prints figures (``--write`` appends them to bench/results-venv.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-venv.md"
sys.path.insert(0, str(ROOT))

from envforge.cli.common import load_checked  # noqa: E402
from envforge.render import RenderOptions, plan_venv  # noqa: E402


def timed(argv: Sequence[str], env: Mapping[str, str], cwd: Path = ROOT) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(
        list(argv), env=dict(env), cwd=cwd, capture_output=True, text=True, check=False
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(argv)}\n{done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def envforge_build(recipe: str, wheels: Path, env: Mapping[str, str]) -> tuple[float, float, str]:
    """(wall seconds, probe seconds, output) of one ``envforge build --backend venv``."""
    seconds, out = timed(
        [
            sys.executable,
            "-m",
            "envforge",
            "build",
            recipe,
            "--backend",
            "venv",
            "--wheelhouse",
            str(wheels),
        ],
        env,
    )
    path = Path([ln for ln in out.splitlines() if ln.startswith("/")][-1])
    cert = json.loads((path / ".envforge" / "certified.json").read_text())
    return seconds, float(cert["report"]["seconds"]), out


def pip_floor(
    python: str, requirements: Sequence[str], wheels: Path, env: Mapping[str, str], where: Path
) -> float:
    target = where / "pip-venv"
    start = time.monotonic()
    timed([python, "-m", "venv", str(target)], env)
    timed(
        [
            str(target / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            "--find-links",
            str(wheels),
            *requirements,
        ],
        env,
    )
    seconds = time.monotonic() - start
    shutil.rmtree(target)
    return seconds


def one_run(recipe_name: str, wheels: Path, python: str, caches: Path | None) -> dict[str, float]:
    recipe = load_checked(recipe_name)
    plan = plan_venv(recipe, RenderOptions(wheelhouse=True))
    with tempfile.TemporaryDirectory(prefix="envforge-bench-") as tmp:
        where = Path(tmp)
        env = dict(os.environ)
        env["ENVFORGE_HOME"] = str(where / "home")
        cache_root = caches if caches is not None else where
        env["UV_CACHE_DIR"] = str(cache_root / "uv-cache")
        env["PIP_CACHE_DIR"] = str(cache_root / "pip-cache")
        first, probe, _out = envforge_build(recipe_name, wheels, env)
        second, _probe, again = envforge_build(recipe_name, wheels, env)
        if "up to date" not in again:
            sys.exit(f"second build was not a no-op:\n{again}")
        floor = pip_floor(python, plan.requirements, wheels, env, where)
    return {
        "first": first,
        "probe": probe,
        "install": first - probe,
        "second": second,
        "pip": floor,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu")
    parser.add_argument(
        "--wheelhouse", type=Path, default=Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--write", action="store_true", help=f"append the figures to {RESULTS}")
    args = parser.parse_args(argv)
    recipe = load_checked(args.recipe)
    python = shutil.which(f"python{recipe.python}")
    if python is None:
        sys.exit(f"no python{recipe.python} on PATH")

    rows: list[tuple[str, dict[str, float]]] = []
    for i in range(args.runs):
        result = one_run(args.recipe, args.wheelhouse, python, None)
        print(
            f"cold run {i + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in result.items()),
            flush=True,
        )
        rows.append(("cold", result))
    with tempfile.TemporaryDirectory(prefix="envforge-bench-caches-") as caches:
        one_run(args.recipe, args.wheelhouse, python, Path(caches))  # prime both caches
        for i in range(args.runs):
            result = one_run(args.recipe, args.wheelhouse, python, Path(caches))
            print(
                f"warm run {i + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in result.items()),
                flush=True,
            )
            rows.append(("warm", result))

    lines = [
        "",
        f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: recipe {args.recipe}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {recipe.python}, "
        f"{args.runs} run(s) each, medians",
        "",
        "| caches | envforge first build | of which install | of which probe (full) "
        "| second build (no-op) | venv + pip install (floor, no probe) | install vs pip |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in ("cold", "warm"):
        picked = [r for k, r in rows if k == kind]
        med = {key: statistics.median(r[key] for r in picked) for key in picked[0]}
        lines.append(
            f"| {kind} | {med['first']:.1f} s | {med['install']:.1f} s | {med['probe']:.1f} s "
            f"| {med['second']:.2f} s | {med['pip']:.1f} s | {med['install'] / med['pip']:.2f}x |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        if not RESULTS.exists():
            RESULTS.write_text(
                "# Venv backend benchmark\n\nProduced by `python bench/venv_bench.py --write`; "
                "see the script's docstring for what each column measures.\n"
            )
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
