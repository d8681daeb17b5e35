"""What binding a venv's certificate to its files costs, and how fast ``shell`` forwards a signal.

On a built venv (``--home H``: the ENVFORGE_HOME holding a certified cpu venv; without it a
temporary home is built first with ``--wheelhouse DIR``, default ``$PIP_FIND_LINKS``):

1. ``content_digests`` (the cheap re-check before every use: one ``lstat`` per file the
   RECORDs list), the RECORD fingerprint and ``state()`` (what ``shell`` calls), N runs;
2. ``verify_records`` (the full sha256 check, run only when the cheap one differs), 2 runs;
3. ``envforge shell RECIPE --backend venv -- true``: wall time, N runs;
4. ``envforge shell RECIPE --backend venv -- sleep 600`` sent SIGTERM once the sleep runs:
   seconds from the signal to envforge's exit (with status 143), N runs.

    python bench/venv_recheck.py [--home H | --wheelhouse DIR] [--runs N] [--write]

Not a test: it prints figures (``--write`` appends them to bench/results-venv.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _results import median_range, publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results-venv.md"
sys.path.insert(0, str(ROOT))

from envforge.backends import venv, venvfs  # noqa: E402 - after the path is set
from envforge.recipe.catalogue import Catalogue  # noqa: E402


def timed(func: Callable[[], object], runs: int) -> list[float]:
    found = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        found.append(time.perf_counter() - start)
    return found


def sleeper_running(seconds: str) -> bool:
    wanted = b"sleep\0" + seconds.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == wanted:
                    return True
            except OSError:
                continue
    return False


def forward_once(env: dict[str, str], recipe: str, n: int) -> float:
    seconds = f"600.{os.getpid() % 1000:03d}{n:03d}"
    argv = [sys.executable, "-m", "envforge", "shell", recipe, "--backend", "venv", "--"]
    with subprocess.Popen([*argv, "sleep", seconds], env=env) as proc:
        while not sleeper_running(seconds):
            time.sleep(0.005)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        took = time.perf_counter() - sent
    if code != 143:
        raise SystemExit(f"shell exited {code}, not 143")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path)
    parser.add_argument(
        "--wheelhouse", type=Path, default=Path(os.environ.get("PIP_FIND_LINKS", ""))
    )
    parser.add_argument("--recipe", default="cpu")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="envforge-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT)
    if args.home is None:
        subprocess.run(
            [sys.executable, "-m", "envforge", "build", args.recipe, "--backend", "venv",
             "--wheelhouse", str(args.wheelhouse), "--level", "quick"],
            env=env, check=True,
        )  # fmt: skip
    recipe = Catalogue.default().load(args.recipe)
    path = venv.venv_location(recipe, env)
    files = sum(
        len(venvfs.parse_record((d / "RECORD").read_text())) for _, d in venvfs.distributions(path)
    )
    digests = timed(lambda: venvfs.content_digests(path), args.runs)
    fingerprint = timed(lambda: venv.fingerprint(path), args.runs)
    state = timed(lambda: venv.state(recipe, env), args.runs)
    full = timed(lambda: venvfs.verify_records(path), 2)
    shell_argv = [
        sys.executable, "-m", "envforge", "shell", args.recipe, "--backend", "venv", "--", "true"
    ]  # fmt: skip
    shell = timed(lambda: subprocess.run(shell_argv, env=env, check=True), args.runs)
    forward = [forward_once(env, args.recipe, n) for n in range(args.runs)]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ms = {"unit": 1e3, "fmt": "{:.0f}"}
    text = (
        f"\n### {when}: certificate re-check and shell signals, recipe {args.recipe},"
        f" {platform.machine()}, {os.cpu_count()} CPUs, {args.runs} run(s), median (min, max)\n\n"
        f"| what | figure |\n|---|---|\n"
        f"| files the RECORDs list | {files} |\n"
        f"| `content_digests` (cheap re-check: an lstat per file) |"
        f" {median_range(digests, **ms)} ms |\n"
        f"| RECORD fingerprint | {median_range(fingerprint, 1e3, '{:.1f}')} ms |\n"
        f"| `state()` (what `shell` checks) | {median_range(state, **ms)} ms |\n"
        f"| `verify_records` (full sha256, only on a mismatch) | {median_range(full)} s |\n"
        f"| `envforge shell {args.recipe} --backend venv -- true` | {median_range(shell)} s |\n"
        f"| SIGTERM to `shell -- sleep 600` until envforge exits 143 |"
        f" {median_range(forward, **ms)} ms |\n"
    )
    publish(text, RESULTS, args.write)


if __name__ == "__main__":
    main()
