"""Project builds on the venv backend (issue 19's targets), timed end to end.

What it measures, each with warm caches (uv's cache already holds torch and the project's
packages: a first, untimed build of each fills it):

* ``recipe``: ``envforge build cpu --backend venv`` into an empty ENVFORGE_HOME;
* ``project``: the same with ``--project`` for a project of five pure-Python dependencies
  (its own venv, the project installed editable, its import checked); target: at most
  1.3x ``recipe``;
* ``add one``: the project's rebuild after one more dependency is added (three times, one
  pure-Python package each, the median); target: at most 10 s. It starts from the
  certified venv (torch's files kept) and certifies incrementally (the new distribution's
  import and the project's steps); the table says how many of the three did.

Every build certifies (the recipe's full probe), as a user's would.

    python bench/project_bench.py [--runs N] [--write]

``--docker``: the Docker backend instead (issue 19: "the rebuild after adding one
dependency ... reusing torch's layer"): the project's image is built once (untimed: it
fills the build cache), then timed ``project`` = the same build again after the image
is removed (every layer from the cache but the project's resolution and certification),
and ``add one`` = the rebuild after one more dependency (pyparsing at a pin no earlier
build used; its lock re-resolved, only the project's layer rebuilt, certified); torch's
layer reused = every layer of the new image but the last (the project's packages) is the
previous image's. Needs an engine, the
stand-in base image (``--base-image``) and a CA bundle (``--ca-bundle``):

    python bench/project_bench.py --docker --base-image REF --ca-bundle FILE [--write]

``--write`` appends the table to bench/results-project.md. Needs the torch wheel in the
folder PIP_FIND_LINKS names and the package index for the project's dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
DEPS = ["tqdm", "six", "idna", "attrs", "tomli"]
ADDED = "pyparsing"
#: The venv mode adds these one after the other (a rebuild each).
VENV_ADDED = ("pyparsing", "iniconfig", "sortedcontainers")
#: Pins of ADDED the Docker mode draws from (each changes the project's layer).
ADDED_VERSIONS = (
    "3.0.0",
    "3.0.1",
    "3.0.2",
    "3.0.3",
    "3.0.4",
    "3.0.5",
    "3.0.6",
    "3.0.7",
    "3.0.8",
    "3.0.9",
    "3.1.0",
    "3.1.1",
    "3.1.2",
    "3.1.3",
    "3.1.4",
    "3.2.0",
    "3.2.1",
    "3.2.2",
    "3.2.3",
    "3.2.4",
    "3.2.5",
    "3.3.0",
    "3.3.1",
    "3.3.2",
)


def envforge(
    home: Path,
    *args: str,
    backend: str = "venv",
    out: list[str] | None = None,
    err: list[str] | None = None,
) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(home)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "envforge", *args, "--backend", backend, "--wheelhouse",
         str(WHEELS)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"envforge {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    if out is not None:
        out.append(done.stdout)
    if err is not None:
        err.append(done.stderr)
    return seconds


def write_project(folder: Path, deps: list[str]) -> Path:
    (folder / "trainer").mkdir(parents=True, exist_ok=True)
    (folder / "trainer" / "__init__.py").write_text("VERSION = '0.1'\n")
    listed = ", ".join(f'"{d}"' for d in deps)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "trainer"\nversion = "0.1"\ndependencies = [{listed}]\n'
        '[tool.setuptools]\npackages = ["trainer"]\n'
    )
    return folder


@dataclass(frozen=True)
class Run:
    recipe: float
    project: float
    adds: tuple[float, ...]
    incremental: int


def one_run(scratch: Path) -> Run:
    home = scratch / "home"
    project = write_project(scratch / "trainer", [*DEPS, *VENV_ADDED])
    envforge(home, "build", "cpu")  # warm-up: uv's cache holds torch
    shutil.rmtree(home / "venvs")
    recipe = envforge(home, "build", "cpu")
    envforge(home, "build", "cpu", "--project", str(project))  # warm-up: the dependencies
    for venv in (home / "venvs" / "cpu").iterdir():
        if "-" in venv.name and venv.name.count("-") > 3:  # the project's venv
            shutil.rmtree(venv)
    write_project(project, DEPS)
    proj = envforge(home, "build", "cpu", "--project", str(project))
    adds: list[float] = []
    incremental = 0
    for n in range(1, len(VENV_ADDED) + 1):
        write_project(project, [*DEPS, *VENV_ADDED[:n]])
        said: list[str] = []
        adds.append(envforge(home, "build", "cpu", "--project", str(project), err=said))
        incremental += "certifying cpu incrementally" in said[0]
    return Run(recipe, proj, tuple(adds), incremental)


def _layers(ref: str) -> list[str]:
    done = subprocess.run(["docker", "image", "inspect", "--format",
                           "{{range .RootFS.Layers}}{{.}} {{end}}", ref],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.split() if done.returncode == 0 else []


def docker_run(scratch: Path, base_image: str, ca_bundle: str, used: set[str]) -> dict[str, float]:
    home = scratch / "home"
    project = write_project(scratch / "trainer", DEPS)
    build = (
        "build",
        "cpu",
        "--project",
        str(project),
        "--base-image",
        base_image,
        "--ca-bundle",
        ca_bundle,
        "--json",
    )
    envforge(home, *build, backend="docker")  # warm-up: the build cache holds every layer
    sys.path.insert(0, str(ROOT))
    from envforge.backends.docker.projects import project_ref
    from envforge.project.read import load_project
    from envforge.recipe.catalogue import Catalogue

    ref = project_ref(Catalogue.default().load("cpu"), load_project(project))
    subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)
    proj = envforge(home, *build, backend="docker")
    before = _layers(ref)
    # one dependency more, at a version no earlier build used (a build cache from before
    # would hand the project's layer back): a pin drawn at random, drawn again when the
    # engine rebuilt nothing
    versions = [v for v in ADDED_VERSIONS if v not in used]
    random.shuffle(versions)
    for version in versions:
        used.add(version)
        write_project(project, [*DEPS, f"{ADDED}=={version}"])
        printed: list[str] = []
        added = envforge(home, *build, backend="docker", out=printed)
        data = json.loads(printed[0])
        if data["steps_rebuilt"]:
            break
    after = _layers(ref)
    subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)
    reused = bool(before) and before[:-1] == after[:-1] and before[-1] != after[-1]
    return {
        "project": proj,
        "add one": added,
        "reused": float(reused),
        "build": float(data["build_seconds"]),
        "cached": float(data["steps_cached"]),
        "steps": float(data["steps"]),
    }


def docker_main(args: argparse.Namespace) -> None:
    runs: list[dict[str, float]] = []
    used: set[str] = set()
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="envforge-project-bench-") as scratch:
            runs.append(docker_run(Path(scratch), args.base_image, args.ca_bundle, used))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    load = os.getloadavg()[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    reused = all(r["reused"] for r in runs)
    table = (
        f"\n### Docker: {when}: recipe cpu, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.runs} run(s), medians, load average {load:.1f} at the end\n\n"
        "| project image, cached layers (5 deps) | rebuild after adding one (end to end) "
        "| of which the image build | build steps from cache | torch's layer reused |\n"
        "|---|---|---|---|---|\n"
        f"| {med['project']:.1f} s | {med['add one']:.1f} s | {med['build']:.1f} s "
        f"| {med['cached']:.0f} of {med['steps']:.0f} | {'yes' if reused else 'NO'} |\n"
    )
    print(table)
    if args.write:
        with (ROOT / "bench" / "results-project.md").open("a", encoding="utf-8") as f:
            f.write(table)
    if not reused:
        sys.exit("torch's layer was not reused")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--docker", action="store_true")
    parser.add_argument("--base-image", default="envforge-standin/debian:bookworm-python3")
    parser.add_argument(
        "--ca-bundle", default=os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    )
    args = parser.parse_args()
    if args.docker:
        docker_main(args)
        return
    start_load = os.getloadavg()[0]
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="envforge-project-bench-") as scratch:
            runs.append(one_run(Path(scratch)))
    med = {
        "recipe": statistics.median(r.recipe for r in runs),
        "project": statistics.median(r.project for r in runs),
        "add one": statistics.median(a for r in runs for a in r.adds),
    }
    adds = [f"{a:.1f}" for r in runs for a in r.adds]
    incremental = sum(r.incremental for r in runs)
    load = os.getloadavg()[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table = (
        f"\n### {when}: recipe cpu, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.runs} run(s), medians, load average {load:.1f} at the end\n\n"
        "| recipe build | project build (5 deps) | project / recipe (target <= 1.3x) "
        "| rebuild after adding one (target <= 10 s) |\n|---|---|---|---|\n"
        f"| {med['recipe']:.1f} s | {med['project']:.1f} s | "
        f"{med['project'] / med['recipe']:.2f}x | {med['add one']:.1f} s |\n"
        f"\nThe rebuilds after adding one, each: {', '.join(adds)} s; certified incrementally:"
        f" {incremental} of {len(adds)}; load average at the start {start_load:.1f}.\n"
    )
    print(table)
    if args.write:
        out = ROOT / "bench" / "results-project.md"
        head = (
            ""
            if out.exists()
            else (
                "# Project builds (venv backend)\n\nProduced by `python bench/project_bench.py "
                "--write`; see the script's docstring for what each column measures.\n"
            )
        )
        with out.open("a", encoding="utf-8") as f:
            f.write(head + table)


if __name__ == "__main__":
    main()
