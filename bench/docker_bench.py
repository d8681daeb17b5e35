"""Docker backend benchmark: layer reuse and image size for a recipe (default: cpu).

Measures, on the engine the docker CLI would use (DOCKER_HOST / context honoured):

1. first build, no cache (``nocache=True``): wall time;
2. second build, nothing changed: wall time, and that every step came from the cache
   and the image ID is the same;
3. one env value changed (``--set env.ENVFORGE_BENCH=...``): wall time and which steps
   were rebuilt (only those after that ENV line may be);
4. image size against the floor: base image size + installed packages (``du`` of the
   virtualenv inside the image), as a ratio.

Usage (the figures are appended to bench/results-docker.md with ``--write``)::

    python bench/docker_bench.py --base-image envforge-standin/debian:bookworm-python3 \\
        --wheelhouse "$PIP_FIND_LINKS" --ca-bundle "$PIP_CERT" [--write]

Not a test: it prints figures; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _results import publish

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.containers import run_capture
from envforge.backends.docker.engine import connect
from envforge.backends.docker.images import (
    BuildResult,
    assemble_context,
    build_image,
    inspect_image,
)
from envforge.cli.common import load_checked
from envforge.render import RenderOptions, render_dockerfile

RESULTS = Path(__file__).resolve().parent / "results-docker.md"
ENV_KEY = "ENVFORGE_BENCH"


def _build(
    client: EngineClient,
    dockerfile: str,
    *,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    nocache: bool = False,
) -> BuildResult:
    context = Path(tempfile.mkdtemp(prefix="envforge-bench-"))
    try:
        assemble_context(context, dockerfile, wheelhouse=wheelhouse, ca_bundle=ca_bundle)
        return build_image(client, context, nocache=nocache)
    finally:
        shutil.rmtree(context, ignore_errors=True)


def _cpus() -> int:

    return os.cpu_count() or 0


def _mib(n: float) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu")
    parser.add_argument("--base-image")
    parser.add_argument("--wheelhouse", type=Path)
    parser.add_argument("--ca-bundle", type=Path)
    parser.add_argument("--venv", default="/opt/venv", help="Virtualenv path in the image.")
    parser.add_argument("--write", action="store_true", help=f"Append figures to {RESULTS}.")
    parser.add_argument(
        "--no-cache-first",
        action="store_true",
        help="First build with nocache (note: the next build then does not reuse its layers "
        "with the classic builder); default: a normal build, which is cold only on an "
        "engine whose cache holds nothing for this recipe (e.g. a fresh private engine).",
    )
    args = parser.parse_args(argv)

    client = connect()
    base_recipe = load_checked(args.recipe)
    base_image = args.base_image or base_recipe.base_image
    options = RenderOptions(
        base_image=base_image,
        wheelhouse=args.wheelhouse is not None,
        ca_bundle=args.ca_bundle is not None,
    )
    # Both variants are rendered before any build, so that nothing (an edited template)
    # can change between the builds being compared.
    one = render_dockerfile(load_checked(args.recipe, [f"env.{ENV_KEY}=1"]), options)
    two = render_dockerfile(load_checked(args.recipe, [f"env.{ENV_KEY}=2"]), options)

    def build(dockerfile: str, nocache: bool = False) -> BuildResult:
        return _build(
            client,
            dockerfile,
            wheelhouse=args.wheelhouse,
            ca_bundle=args.ca_bundle,
            nocache=nocache,
        )

    first = build(one, nocache=args.no_cache_first)
    # Cold: nothing came from an earlier build. The final stage's copy of a build-stage
    # step (same instruction, same parent) is reused within the build itself.
    seen: set[str] = set()
    cold = True
    for step in first.steps:
        if step.cached and step.instruction not in seen:
            cold = False
        seen.add(step.instruction)
    second = build(one)
    changed = build(two)

    all_reused = not second.rebuilt and second.image_id == first.image_id
    env_step = next(
        (s.number for s in changed.steps if s.instruction.startswith(f"ENV {ENV_KEY}=")), None
    )
    rebuilt_ok = env_step is not None and all(s.number >= env_step for s in changed.rebuilt)

    image = inspect_image(client, first.image_id)
    base = inspect_image(client, base_image)
    if image is None or base is None:
        print("image or base image vanished", file=sys.stderr)
        return 1
    # Apparent size (bytes), as layer sizes are counted; block-rounded du overstates it.
    code, out = run_capture(client, first.image_id, ["du", "-sb", args.venv])
    if code != 0:
        print(f"du failed: {out}", file=sys.stderr)
        return 1
    venv_bytes = int(out.split()[0])
    floor = base.size + venv_bytes
    ratio = image.size / floor

    lines = [
        f"## {args.recipe} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {_cpus()} CPUs)",
        "",
        f"- engine: Docker {client.version().get('Version', '?')}, storage driver "
        f"{client.info().get('Driver', '?')}; base `{base_image}`",
        f"- first build ({'no cache' if args.no_cache_first else 'normal'}"
        f"{', cold: nothing cached' if cold else ', NOT cold: some steps came from cache'}): "
        f"**{first.seconds:.1f} s** ({len(first.steps)} steps)",
        f"- second build, nothing changed: **{second.seconds:.1f} s**; steps rebuilt: "
        f"{len(second.rebuilt)}; same image ID: {second.image_id == first.image_id} "
        f"-> every layer reused: **{all_reused}**",
        f"- `{ENV_KEY}` 1 -> 2: **{changed.seconds:.1f} s**; rebuilt steps: "
        + ", ".join(f"{s.number} `{s.instruction[:40]}`" for s in changed.rebuilt)
        + f" (ENV is step {env_step}; only steps from it on rebuilt: **{rebuilt_ok}**)",
        f"- image size {_mib(image.size)}; floor = base {_mib(base.size)} + {args.venv} "
        f"{_mib(venv_bytes)} = {_mib(floor)}; ratio **{ratio:.3f}**",
        "",
    ]
    text = "\n".join(lines)
    publish(text, RESULTS, args.write)
    return 0 if all_reused and rebuilt_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
