"""Image build benchmark (issue 13): cold builds vs the floor, a package change, size.

Run it against a private engine (it prunes that engine's build cache between cold builds;
never point it at an engine others use)::

    DOCKER_HOST=unix:///tmp/images-engine/docker.sock ENVFORGE_CI_STATE=/tmp/images-engine \\
        bash scripts/ci-engine.sh up
    set -a; . /tmp/images-engine/env; set +a
    python bench/image_bench.py --wheelhouse "$PIP_FIND_LINKS" --ca-bundle "$PIP_CERT" \\
        --registry-dir "$(cat /tmp/images-engine/registry.dir)" [--write]

What it measures (medians of ``--runs``, with min-max; figures appended to
bench/results-images.md with ``--write``):

1. cold first build of ``cpu`` (no certification) vs the floor, bench/floor/Dockerfile (a
   hand-written two-stage Dockerfile installing the same wheels with uv in one RUN), both
   from an empty build cache (BuildKit cache pruned, images removed), interleaved (the
   order alternating from pair to pair);
2. one entry of ``packages`` changed (``six==1.16.0`` -> ``six==1.17.0``): rebuild time,
   whether torch's layer kept its diff ID, and the bytes the push of the new image added to
   the registry's storage against the compressed size of the layers that changed;
3. image size against base + installed packages (``du -sb /opt/venv``);
4. the first ``import torch`` in a fresh container: uv-built (byte-compiled) vs pip-built.

Not a test: it prints figures; nothing here asserts on time.
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
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from _results import publish

from envforge.backends import docker as backend
from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.containers import run_capture
from envforge.backends.docker.engine import connect
from envforge.backends.docker.images import (
    assemble_context,
    find_buildkit,
    inspect_image,
    push,
    tag_image,
)
from envforge.cli.common import load_checked

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results-images.md"
FLOOR = HERE / "floor" / "Dockerfile"
STANDIN = "envforge-standin/debian:bookworm-python3"
OLD, NEW = "six==1.16.0", "six==1.17.0"


def _cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def _cold(client: EngineClient, cli: str, env: dict[str, str]) -> None:
    """Empty the engine's build cache: bench images, dangling images, BuildKit cache."""
    for image in client.images.list():  # type: ignore[attr-defined]
        for tag in image.tags:
            if tag.startswith(("imgbench/", "envforge/cpu:")):
                client.images.remove(tag, force=True)  # type: ignore[attr-defined]
    _cli(cli, "image", "prune", "-f", env=env)
    _cli(cli, "builder", "prune", "-af", env=env)


def _floor(cli: str, env: dict[str, str], wheelhouse: Path, ca: Path, tag: str) -> float:
    ctx = Path(tempfile.mkdtemp(prefix="envforge-floor-"))
    try:
        assemble_context(
            ctx, FLOOR.read_text(encoding="utf-8"), wheelhouse=wheelhouse, ca_bundle=ca
        )
        start = time.monotonic()
        _cli(
            cli, "build", "--network=host", "-t", tag, str(ctx), env={**env, "DOCKER_BUILDKIT": "1"}
        )
        return time.monotonic() - start
    finally:
        shutil.rmtree(ctx, ignore_errors=True)


def _envforge(
    recipe_ref: str, sets: Sequence[str], options: backend.DockerOptions, tag: str
) -> tuple[float, str]:
    recipe = load_checked(recipe_ref, tuple(sets))
    start = time.monotonic()
    result = backend.build(recipe, replace(options, tags=(tag,)))
    return time.monotonic() - start, result.image_id


def _blobs(storage: Path) -> dict[str, int]:
    root = storage / "docker" / "registry" / "v2" / "blobs"
    return {p.parent.name: p.stat().st_size for p in root.rglob("data")} if root.is_dir() else {}


def _manifest(registry: str, repo: str, tag: str) -> dict[str, object]:
    req = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{tag}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        data: dict[str, object] = json.loads(resp.read())
    return data


def _import_seconds(client: EngineClient, image: str, runs: int) -> list[float]:
    code = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
    out = []
    for _ in range(runs):
        _rc, text = run_capture(client, image, ["python", "-c", code])
        out.append(float(text.strip().splitlines()[-1]))
    return out


def _fmt(values: Sequence[float]) -> str:
    return (
        f"median **{statistics.median(values):.1f} s** (min {min(values):.1f}, max "
        f"{max(values):.1f}; runs {', '.join(f'{v:.1f}' for v in values)})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--ca-bundle", type=Path, required=True)
    parser.add_argument("--registry-dir", type=Path, required=True, help="the registry's folder")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--cold-only", action="store_true", help="Only part 1 (cold builds).")
    args = parser.parse_args(argv)
    registry = os.environ["ENVFORGE_TEST_REGISTRY"]
    env = dict(os.environ)
    client = connect(env)
    buildkit, why = find_buildkit(client, env)
    if buildkit is None:
        raise SystemExit(f"no BuildKit here: {why}")
    cli = buildkit.argv[0]
    options = backend.DockerOptions(
        wheelhouse=args.wheelhouse,
        ca_bundle=args.ca_bundle,
        base_image=STANDIN,
        certify=False,
        environ=env,
        say=lambda line: print("  " + line, file=sys.stderr),
    )
    lines = [
        "## cpu, cold builds and a package change"
        f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" {platform.machine()}, {os.cpu_count()} CPUs, shared)",
        "",
        f"- engine: Docker {client.api.version().get('Version')}; builder: BuildKit via "
        f"`{buildkit.describe()}`; base `{STANDIN}`",
    ]

    # 1. cold builds, interleaved
    floor_s: list[float] = []
    forge_s: list[float] = []
    for i in range(args.runs):
        # alternate which goes first, so that what the previous build left (pruning,
        # write-back) weighs on both alike
        for which in ("floor", "envforge") if i % 2 == 0 else ("envforge", "floor"):
            _cold(client, cli, env)
            if which == "floor":
                seconds = _floor(cli, env, args.wheelhouse, args.ca_bundle, f"imgbench/floor:{i}")
                floor_s.append(seconds)
            else:
                seconds, _ = _envforge("cpu", (), options, f"imgbench/cpu:cold{i}")
                forge_s.append(seconds)
            print(f"{which} {i}: {seconds:.1f}s", file=sys.stderr)
    ratio = statistics.median(forge_s) / statistics.median(floor_s)
    lines += [
        f"- cold first build, floor (bench/floor/Dockerfile): {_fmt(floor_s)}",
        f"- cold first build, `envforge build cpu --no-certify`: {_fmt(forge_s)}",
        f"- envforge / floor (medians): **{ratio:.2f}x** (target <= 1.1x)",
    ]

    if args.cold_only:
        return _finish(lines, write=args.write)

    # 2. one entry of packages changed; pushes to the local registry
    repo = "imgbench/cpu"
    old_s, old_id = _envforge("cpu", (f"packages=[{OLD}]",), options, f"{repo}:old")
    storage = args.registry_dir / "storage"
    before = _blobs(storage)
    tag_image(client, old_id, f"{registry}/{repo}:old")
    push(client, f"{registry}/{repo}:old")
    first = _blobs(storage)
    first_bytes = sum(size for d, size in first.items() if d not in before)
    new_s, new_id = _envforge("cpu", (f"packages=[{NEW}]",), options, f"{repo}:new")
    tag_image(client, new_id, f"{registry}/{repo}:new")
    push(client, f"{registry}/{repo}:new")
    second = _blobs(storage)
    added = {d: size for d, size in second.items() if d not in first}
    pushed = sum(added.values())
    old_diff = client.images.get(old_id).attrs["RootFS"]["Layers"]
    new_diff = client.images.get(new_id).attrs["RootFS"]["Layers"]
    shared = [d for d in new_diff if d in old_diff]
    manifest_old = _manifest(registry, repo, "old")
    manifest_new = _manifest(registry, repo, "new")
    old_blobs = {layer["digest"] for layer in manifest_old["layers"]}  # type: ignore[attr-defined]
    changed = [
        layer
        for layer in manifest_new["layers"]
        if layer["digest"] not in old_blobs  # type: ignore[attr-defined]
    ]
    changed_bytes = sum(int(layer["size"]) for layer in changed)
    lines += [
        f"- `packages: [{OLD}]` build (cache warm from the cold runs): {old_s:.1f} s; first push"
        f" added {first_bytes / 1e6:.1f} MB to the registry",
        f"- `packages: [{NEW}]` (one entry changed): rebuild **{new_s:.1f} s**; layers shared with"
        f" the old image: {len(shared)} of {len(new_diff)} (torch's layer"
        f" {new_diff[-2][:19]}... {'kept' if new_diff[-2] in old_diff else 'CHANGED'}); push"
        f" added **{pushed / 1e6:.3f} MB** ({len(added)} blobs incl. config) for {len(changed)}"
        f" changed layer(s) of {changed_bytes / 1e6:.3f} MB compressed: ratio"
        f" **{pushed / max(changed_bytes, 1):.2f}** (target <= 1.1)",
    ]

    # 3. size
    info = inspect_image(client, new_id)
    base = inspect_image(client, STANDIN)
    assert info is not None
    assert base is not None
    du = int(run_capture(client, new_id, ["du", "-sb", "/opt/venv"])[1].split()[0])
    floor_bytes = base.size + du
    lines.append(
        f"- image size {info.size / 2**20:.0f} MiB; base {base.size / 2**20:.0f} MiB + /opt/venv"
        f" {du / 2**20:.0f} MiB = {floor_bytes / 2**20:.0f} MiB; ratio"
        f" **{info.size / floor_bytes:.3f}** (target <= 1.05)"
    )

    # 4. first import torch: uv (byte-compiled) vs pip
    pip_s, pip_id = _envforge("cpu", (), replace(options, installer="pip"), "imgbench/cpu:pip")
    uv_import = _import_seconds(client, new_id, args.runs)
    pip_import = _import_seconds(client, pip_id, args.runs)
    lines += [
        f"- first `import torch` in a fresh container: uv-built {_fmt(uv_import)}; pip-built"
        f" {_fmt(pip_import)} (pip-only build took {pip_s:.1f} s, cache warm for the base steps)",
    ]
    lines.append("")
    return _finish(lines, write=args.write)


def _finish(lines: list[str], *, write: bool) -> int:
    text = "\n".join(lines)
    publish(text, RESULTS, write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
