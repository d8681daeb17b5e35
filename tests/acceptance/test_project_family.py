"""A project's torchvision comes from the stack, for real (issue 26 §1, §6).

The pytorch/examples ``mnist`` shape (requirements.txt: torch, torchvision) on the venv
backend, with real wheels and real installers:

- served by a local index on 127.0.0.1 (a PEP 503 listing over the real torch 2.14.1 and
  torchvision 0.29.1 wheels and what they need, fetched with ``pip download``: a pairing
  that loads on this machine's CPU), the project is locked with the pairing release, built
  and probed: torchvision imports and its nms runs in the project's check; the index saw
  the request for torchvision, so it came from the stack's index;
- with the cpu stack's index unreachable (a closed port), or a wheelhouse without the
  companion, the build is exit 4 before anything is made, naming the exact wheel;
- mnist_hogwild's pin (torchvision==0.20.0 beside torch 2.13.0) is exit 2 naming 0.28.0.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from tests.helpers.httpserver import serving_folder

from .test_venv_cpu import WHEELS, base_env, envforge
from .test_venv_cpu import pytestmark as venv_marks

pytestmark = venv_marks

#: torch 2.14.1 and the torchvision released with it (the companion table's row).
FAMILY = ("torch==2.14.1", "torchvision==0.29.1", "numpy>=1.26,<3")
#: The index's port where it is free (below Linux's ephemeral range): uv caches an index's
#: wheels by its URL, and these are several GB to unpack again under a new one each run.
INDEX_PORT = 29613

NMS_CHECK = """\
import torch
import torchvision

boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [50.0, 50.0, 60.0, 60.0]])
keep = torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5)
assert keep.tolist() == [0, 2], keep
print("nms ok", torchvision.__version__, torch.__version__)
"""


def mnist(root: Path, *requirements: str) -> Path:
    root.mkdir(parents=True)
    (root / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    (root / "envforge.toml").write_text('checks = ["nms_check.py"]\n', encoding="utf-8")
    (root / "nms_check.py").write_text(NMS_CHECK, encoding="utf-8")
    return root


def simple_index(root: Path, wheels: Path) -> None:
    """A PEP 503 listing of ``wheels`` under ``root/<project>/`` (links to the files)."""
    for whl in sorted(wheels.glob("*.whl")):
        folder = root / parse_wheel_filename(whl.name)[0]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / whl.name).symlink_to(whl)
        page = folder / "index.html"
        old = page.read_text(encoding="utf-8") if page.is_file() else ""
        page.write_text(old + f'<a href="{whl.name}">{whl.name}</a>\n', encoding="utf-8")


#: Written last into a kept download folder: the download finished.
DOWNLOADED = ".downloaded"


def family_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheels of :data:`FAMILY` (2.9 GB), fetched with ``pip download``: once per
    machine into ``$ENVFORGE_TEST_DOWNLOADS/family-<hash of FAMILY>`` where that is set
    (CI), else into this run's temporary folder. Kept, the files keep their mtime, so the
    index below answers uv's revalidation "not modified" and uv keeps the ~5 GB it
    unpacked (a new download each run had uv unpack them again, the old copy orphaned)."""
    keep = os.environ.get("ENVFORGE_TEST_DOWNLOADS")
    tag = hashlib.sha256("\n".join(FAMILY).encode()).hexdigest()[:12]
    wheels = Path(keep) / f"family-{tag}" if keep else tmp_path_factory.mktemp("family-wheels")
    if keep and (wheels / DOWNLOADED).is_file():
        return wheels
    partial = wheels.with_name(wheels.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:",
         "-d", str(partial), *FAMILY],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    (partial / DOWNLOADED).write_text("\n".join(FAMILY) + "\n", encoding="utf-8")
    shutil.rmtree(wheels, ignore_errors=True)
    os.replace(partial, wheels)
    if keep:  # another FAMILY's download (an older pairing) is not needed any more
        for old in wheels.parent.glob("family-*"):
            if old != wheels:
                shutil.rmtree(old, ignore_errors=True)
    return wheels


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """(the index URL, the paths it was asked for) over the real wheels of :data:`FAMILY`."""
    base = tmp_path_factory.mktemp("family-index")
    simple_index(base / "root" / "simple", family_wheels(tmp_path_factory))
    # uv asks again for what it cached (a kept download: the same files, "not modified")
    with serving_folder(base / "root", INDEX_PORT, revalidate=True) as server:
        yield f"{server.url}/simple", server.requests


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def recipe_file(folder: Path, index_url: str) -> Path:
    """The cpu recipe on torch 2.14.1 from ``index_url`` (its wheels run on a CPU)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (Path(__file__).resolve().parents[2] / "recipes" / "cpu.yaml").read_text("utf-8")
    text = text.replace("name: cpu", "name: mnistlocal", 1)
    text = text.replace('version: "2.13.0+cpu"', 'version: "2.14.1"', 1)
    text = text.replace("index: https://download.pytorch.org/whl/cpu", f"index: {index_url}", 1)
    path = folder / "mnistlocal.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_mnist_gets_the_stacks_torchvision_and_runs_nms(
    index: tuple[str, list[str]], tmp_path: Path
) -> None:
    """The whole project path with real wheels: lock, build, probe. The only real torch
    and torchvision pair that loads here without a GPU is the package index's CUDA build
    (no +cpu torchvision wheel is reachable), so certification of the cpu recipe rightly
    fails on exactly one step, expected-versions (a CUDA build where the recipe wants the
    CPU one); every other step passes, the project's nms check among them."""
    url, seen = index
    recipe = recipe_file(tmp_path / "recipes", url)
    proj = mnist(tmp_path / "mnist", "torch", "torchvision")
    env = base_env(tmp_path / "home")
    locked = envforge("lock", str(recipe), "--project", str(proj), env=env)
    assert locked.returncode == 0, locked.stderr[-3000:]
    lines = (proj / "envforge-mnistlocal.lock.txt").read_text(encoding="utf-8")
    assert "\ntorchvision==0.29.1 \\" in lines
    built = envforge(
        "build", str(recipe), "--backend", "venv", "--project", str(proj), env=env, timeout=1500
    )
    assert any(p.startswith("/simple/torchvision/") for p in seen)
    steps = dict(
        line.split()[:2]
        for line in built.stderr.splitlines()
        if line.startswith("  ") and len(line.split()) >= 2
    )
    assert built.returncode == 1, built.stderr[-4000:]
    assert steps["expected-versions"] == "fail"
    assert "is a CUDA 13.0 build, recipe wants the CPU build" in built.stderr
    for step in ("import:torchvision", "torchvision-nms", "check:nms_check.py"):
        assert steps[step] == "pass", built.stderr[-4000:]
    failed = sorted(name for name, status in steps.items() if status == "fail")
    assert failed == ["expected-versions"]


def test_an_unreachable_stack_index_is_exit_4_naming_the_wheels(tmp_path: Path) -> None:
    proj = mnist(tmp_path / "mnist", "torch", "torchvision")
    dead = f"http://127.0.0.1:{closed_port()}/whl/cpu"
    done = envforge(
        "build",
        "cpu",
        "--backend",
        "venv",
        "--project",
        str(proj),
        "--set",
        f"torch.index={dead}",
        env=base_env(tmp_path / "home"),
    )
    assert done.returncode == 4, done.stderr[-3000:]
    assert "torchvision==0.28.0+cpu" in done.stderr
    assert f"--index-url {dead}" in done.stderr
    assert not (tmp_path / "home" / "venvs").exists() or not any(
        (tmp_path / "home" / "venvs").rglob("bin")
    )


def test_a_wheelhouse_without_torchvision_is_exit_4_naming_it(tmp_path: Path) -> None:
    proj = mnist(tmp_path / "mnist", "torch", "torchvision")
    done = envforge(
        "build",
        "cpu",
        "--backend",
        "venv",
        "--project",
        str(proj),
        "--wheelhouse",
        str(WHEELS),
        env=base_env(tmp_path / "home"),
    )
    assert done.returncode == 4, done.stderr[-3000:]
    assert "no wheel for torchvision==0.28.0+cpu" in done.stderr


def test_hogwilds_pin_is_exit_2_naming_the_pairing(tmp_path: Path) -> None:
    proj = mnist(tmp_path / "hogwild", "torch", "torchvision==0.20.0")
    done = envforge(
        "build",
        "cpu",
        "--backend",
        "venv",
        "--project",
        str(proj),
        "--wheelhouse",
        str(WHEELS),
        env=base_env(tmp_path / "home"),
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "torchvision==0.28.0+cpu fits" in done.stderr
    assert str(proj / "requirements.txt") in done.stderr
    assert not (proj / "envforge-cpu.lock.txt").exists()
