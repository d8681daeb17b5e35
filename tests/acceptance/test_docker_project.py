"""A project on the Docker backend, for real (issue 19 §3-§6): ``build --project`` makes
the project's image from its lock (torch from the wheel folder, the project's packages
from the package index), certifies it with the project's own checks, ``shell --project``
runs the project's script in it as the caller, and a requirements change rebuilds only
the project's layer (torch's comes from the build cache). One project, three builds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image

from .helpers import Envforge, build_args, docker_cli, parse_json

pytestmark = pytest.mark.engine

PYPROJECT = """\
[project]
name = "demo-trainer"
version = "0.1"
dependencies = [{deps}]

[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[tool.envforge]
recipe = "cpu"
checks = [{checks}]
"""

TRAIN = """\
import os, six, torch, demo_trainer
open("trained.txt", "w").write(f"{os.getcwd()} {demo_trainer.VALUE} {torch.__version__}")
"""


#: Two command checks; compileall writes bytecode: the folder is mounted read-only, so
#: it goes under /tmp (``envforge init`` itself writes a check that writes nothing).
CHECKS = '"python -c \'import six\'", "python -m compileall -q ."'


def write_project(root: Path, deps: str, checks: str = CHECKS) -> None:
    (root / "pyproject.toml").write_text(PYPROJECT.format(deps=deps, checks=checks))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("docker-project") / "demo-trainer"
    (root / "src" / "demo_trainer").mkdir(parents=True)
    (root / "src" / "demo_trainer" / "__init__.py").write_text("VALUE = 41\n")
    (root / "train.py").write_text(TRAIN)
    write_project(root, '"six"')
    yield root
    for line in docker_cli("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if line.startswith("envforge/demo-trainer-"):
            docker_cli("rmi", "-f", line)


def test_a_project_image_is_certified_runs_the_project_and_keeps_torchs_layer(  # noqa: PLR0917
    project: Path,
    envforge: Envforge,
    client: EngineClient,
    standin: str,
    wheelhouse: Path,
    ca_bundle: Path,
) -> None:
    # the quick probe: the project's steps run at both levels, and the recipe's full probe
    # is test_docker_build's (CI's time is short)
    args = build_args(
        "cpu",
        standin,
        wheelhouse,
        ca_bundle,
        "--project",
        str(project),
        "--backend",
        "docker",
        "--level",
        "quick",
        "--json",
    )
    first = envforge(*args, timeout=900)
    assert first.returncode == 0, first.stderr[-4000:]
    built = parse_json(first)
    (ref,) = built["tags"]
    assert ref.startswith("envforge/demo-trainer-")
    assert ref.endswith(":cpu-torch2.13.0-cpu-py3.11")
    assert "check:import demo_trainer" in first.stderr
    assert "check:python -c 'import six'" in first.stderr
    assert "check:python -m compileall -q ." in first.stderr
    assert not list(project.rglob("__pycache__"))  # certification wrote nothing there
    # resolved, hashed, kept: under ENVFORGE_HOME, nothing unasked in the project
    assert not (project / "envforge-cpu.lock.txt").exists()
    (home_lock,) = (envforge.home / "projects").glob("demo-trainer-*/envforge-cpu.lock.txt")
    assert str(home_lock) in first.stderr
    assert "(kept outside the project;" in first.stderr
    before = inspect_image(client, ref)
    assert before is not None
    recipes_own = inspect_image(client, "envforge/cpu:torch2.13.0-cpu-py3.11")
    assert recipes_own is None or recipes_own.id != before.id  # never the recipe's tag

    # the same `python train.py` a venv runs: the folder mounted, the project importable
    elsewhere = project.parent
    shell = envforge(
        "shell",
        "cpu",
        "--project",
        str(project),
        "--backend",
        "docker",
        "--",
        "python",
        "train.py",
        cwd=elsewhere,
    )
    assert shell.returncode == 0, shell.stderr[-3000:]
    made = project / "trained.txt"
    assert made.read_text() == "/workspace 41 2.13.0+cpu"
    assert (made.stat().st_uid, made.stat().st_gid) == (os.getuid(), os.getgid())

    # one dependency more: only the project's layer is new; torch's is the cached one
    write_project(project, '"six", "idna"')
    second = envforge(*args, timeout=900)
    assert second.returncode == 0, second.stderr[-4000:]
    after = inspect_image(client, ref)
    assert after is not None
    assert after.id != before.id
    assert after.layers[:-1] == before.layers[:-1]  # base, Python, torch, NumPy: reused
    assert after.layers[-1] != before.layers[-1]
    assert "idna==" in home_lock.read_text()

    # a failing check fails certification naming it, and the tag stays where it was
    write_project(project, '"six", "idna"', checks="\"python -c 'raise SystemExit(3)'\"")
    third = envforge(*args, timeout=900)
    assert third.returncode == 1
    assert "at step check:python -c 'raise SystemExit(3)'" in third.stderr
    kept = inspect_image(client, ref)
    assert kept is not None
    assert kept.id == after.id
