"""Issue 13 on the real engine: both builders, layers that survive a package change (and a
push that uploads only what changed), and lock-driven images with the venv's package set.

These test how images are built, not torch: they build with the stand-in torch wheel
(``torch_standin``: ``torch.__version__`` and nothing else) and never probe."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from envforge.backends import docker as backend
from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import find_buildkit, inspect_image, push, tag_image
from envforge.cli.common import load_checked

from .helpers import BUILD_TIMEOUT, Envforge, build_args, docker_cli, parse_json, unavailable

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
#: Lists what is installed, the same way in the image and in the venv.
LIST_DISTS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({d.metadata['Name'].lower().replace('_', '-'): d.version "
    "for d in m.distributions()}.items())))"
)


def _build(
    envforge: Envforge, recipe: str, standin: str, torch_standin: Path, ca: Path, *extra: str
) -> dict[str, object]:
    done = envforge(
        *build_args(recipe, standin, torch_standin, ca, "--no-certify", "--json", *extra),
        timeout=BUILD_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    data = parse_json(done)
    data["stderr"] = done.stderr
    return data


def test_auto_picks_buildkit_where_a_cli_drives_it(
    client: EngineClient, envforge: Envforge, standin: str, torch_standin: Path, ca_bundle: Path
) -> None:
    cli, why = find_buildkit(client, dict(os.environ))
    if cli is None:
        unavailable(f"no BuildKit here: {why} (Debian's docker.io CLI provides it)")
    data = _build(envforge, "cpu", standin, torch_standin, ca_bundle)
    assert "builder: BuildKit" in str(data["stderr"])
    # a successful build shows no BuildKit ERROR line (the stand-in base is only local:
    # BuildKit's registry lookup of it is held back, docker/buildkit_lines.py)
    assert not re.search(r"^#\d+ ERROR: ", str(data["stderr"]), re.MULTILINE)
    forced = _build(envforge, "cpu", standin, torch_standin, ca_bundle, "--builder", "buildkit")
    assert forced["candidate"] == data["candidate"]  # every step from BuildKit's cache


def test_classic_builder_forced_by_the_environment(
    envforge: Envforge, standin: str, torch_standin: Path, ca_bundle: Path
) -> None:
    done = envforge(
        *build_args("cpu", standin, torch_standin, ca_bundle, "--no-certify", "--json"),
        timeout=BUILD_TIMEOUT,
        extra_env={"ENVFORGE_BUILDER": "classic"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "builder: classic (ENVFORGE_BUILDER=classic)" in done.stderr
    assert "Step 1/" in done.stderr  # the classic builder's own output
    ref = parse_json(done)["candidate"]
    run = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        str(ref),
        "python",
        "-c",
        "import torch, numpy; print(torch.__version__)",
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("2.13.0")


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_a_package_change_keeps_the_torch_layer_and_pushes_only_the_change(  # noqa: PLR0917 - fixtures
    builder: str,
    client: EngineClient,
    envforge: Envforge,
    standin: str,
    torch_standin: Path,
    ca_bundle: Path,
    registry: str,
) -> None:
    if builder == "buildkit" and find_buildkit(client, dict(os.environ))[0] is None:
        unavailable("no docker CLI here builds with BuildKit")
    old = _build(
        envforge,
        "cpu",
        standin,
        torch_standin,
        ca_bundle,
        "--builder",
        builder,
        "--set",
        "packages=[six==1.16.0]",
    )
    new = _build(
        envforge,
        "cpu",
        standin,
        torch_standin,
        ca_bundle,
        "--builder",
        builder,
        "--set",
        "packages=[six==1.17.0]",
    )
    old_info = inspect_image(client, str(old["candidate"]))
    new_info = inspect_image(client, str(new["candidate"]))
    base = inspect_image(client, standin)
    assert old_info is not None
    assert new_info is not None
    assert base is not None
    n = len(base.layers)
    # base, (python step), torch's venv, the rest: only the last layer differs
    assert list(new_info.layers[:-1]) == list(old_info.layers[:-1])
    assert new_info.layers[-1] != old_info.layers[-1]
    assert len(new_info.layers) >= n + 2
    # a repository of its own each run: blobs of an earlier run are not "already there"
    repo = f"{registry}/envforge-test/images-{builder}-{uuid.uuid4().hex[:8]}"
    statuses: dict[str, list[str]] = {"old": [], "new": []}
    for name, info in (("old", old_info), ("new", new_info)):
        tag_image(client, info.id, f"{repo}:{name}")
        push(client, f"{repo}:{name}", on_line=statuses[name].append)
    # every layer but one was already there; that one was uploaded (or mounted from
    # another repository of this registry that has it since an earlier run)
    last: dict[str, str] = {}
    for line in statuses["new"]:
        layer, _, status = line.partition(" ")
        if status in {"Layer already exists", "Pushed"} or status.startswith("Mounted from"):
            last[layer] = status
    moved = [layer for layer, status in last.items() if status != "Layer already exists"]
    assert len(moved) == 1, statuses["new"]
    # what the registry holds for the new image's layers: one new blob, a small one
    path = repo.split("/", 1)[1]
    manifests = {}
    for name in ("old", "new"):
        req = urllib.request.Request(
            f"http://{registry}/v2/{path}/manifests/{name}",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            manifests[name] = json.loads(resp.read())
    old_blobs = {layer["digest"] for layer in manifests["old"]["layers"]}
    changed = [layer for layer in manifests["new"]["layers"] if layer["digest"] not in old_blobs]
    assert len(changed) == 1
    # the new blob is the rest's layer (the last), not torch's or the base's
    assert changed[0]["digest"] == manifests["new"]["layers"][-1]["digest"]


def test_lock_drives_the_image_and_matches_the_venv(  # noqa: PLR0917 - pytest fixtures
    client: EngineClient,
    envforge: Envforge,
    standin: str,
    torch_standin: Path,
    ca_bundle: Path,
    tmp_path: Path,
) -> None:
    recipe = tmp_path / "cpu.yaml"
    shutil.copyfile(ROOT / "recipes" / "cpu.yaml", recipe)
    locked = envforge(
        "lock",
        str(recipe),
        "--wheelhouse",
        str(torch_standin),
        "--ca-bundle",
        str(ca_bundle),
        timeout=900,
    )
    assert locked.returncode == 0, locked.stderr
    lock_file = tmp_path / "cpu.lock.txt"
    pins = {
        line.split(" ", 1)[0].split("==")[0]: line.split(" ", 1)[0].split("==")[1]
        for line in lock_file.read_text().splitlines()
        if line and not line[0].isspace() and not line.startswith("#")
    }
    assert pins["torch"] == "2.13.0+cpu"
    image = _build(envforge, str(recipe), standin, torch_standin, ca_bundle)
    assert f"installed exactly the lock {lock_file.name}" in str(image["stderr"])
    venv = envforge(
        "build",
        str(recipe),
        "--backend",
        "venv",
        "--no-certify",  # the stand-in torch is installed, never probed
        "--wheelhouse",
        str(torch_standin),
        "--ca-bundle",
        str(ca_bundle),
        "--json",
        timeout=BUILD_TIMEOUT,
    )
    assert venv.returncode == 0, venv.stderr[-4000:]
    venv_python = Path(parse_json(venv)["path"]) / "bin" / "python"
    in_image = docker_cli(
        "run", "--rm", "--network", "none", str(image["candidate"]), "python", "-c", LIST_DISTS
    )
    assert in_image.returncode == 0, in_image.stderr
    in_venv = subprocess.run(
        [str(venv_python), "-c", LIST_DISTS], capture_output=True, text=True, check=True
    ).stdout
    image_set = dict(json.loads(in_image.stdout))
    venv_set = dict(json.loads(in_venv))
    # the image's venv was made by `python -m venv`, which seeds pip (the fallback
    # installer) and, before Python 3.12, setuptools; the lock's set is the rest
    for seeded in ("pip", "setuptools"):
        if seeded not in pins:
            image_set.pop(seeded, None)
            venv_set.pop(seeded, None)
    assert image_set == venv_set
    assert {name.lower(): v for name, v in pins.items()} == image_set


def test_pip_only_builds_the_same_stack(
    client: EngineClient, standin: str, torch_standin: Path, ca_bundle: Path
) -> None:
    """The fallback installer on the real engine: no uv step, pip in both install layers."""
    lines: list[str] = []
    result = backend.build(
        load_checked("cpu", ()),
        backend.DockerOptions(
            wheelhouse=torch_standin,
            ca_bundle=ca_bundle,
            base_image=standin,
            certify=False,
            installer="pip",
            builder="classic",
            no_cache=True,  # pip must really run
            output=_Collect(lines),
        ),
        client=client,
    )
    log = "\n".join(lines)
    assert "uv==" not in log
    assert "/opt/envforge-uv" not in log
    assert "Successfully installed" in log  # pip's own words
    run = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        result.image_id,
        "python",
        "-c",
        "import torch, numpy; print(torch.__version__, numpy.__version__)",
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("2.13.0")


class _Collect:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def close(self) -> None:
        pass
