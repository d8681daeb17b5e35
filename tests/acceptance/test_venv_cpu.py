"""The venv backend for real: uv, the torch wheel from PIP_FIND_LINKS, the full probe.

Nothing is mocked: ``envforge`` runs as a child process (``python -m envforge``), uv
creates and fills real virtualenvs under a temporary ENVFORGE_HOME, the probe runs torch
in them. Needs the wheel folder named by ``PIP_FIND_LINKS`` (torch 2.13.0+cpu for this
Python), a Python 3.11 on PATH and the package index (PyPI) for torch's dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from envforge import backends, lock
from envforge.backends import venv, venvfs
from envforge.backends.venv.certifying import CONTENT_FORMAT
from envforge.evidence import evidence_db
from envforge.evidence.local_store import opened
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Gpu

from .helpers import certificate_view

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not any(WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl")) if WHEELS.is_dir() else True,
        reason=f"no torch 2.13.0+cpu cp311 wheel in {WHEELS} (PIP_FIND_LINKS)",
    ),
    pytest.mark.skipif(shutil.which("python3.11") is None, reason="no python3.11 on PATH"),
]


def envforge(
    *args: str, env: Mapping[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(home)
    env["UV_HTTP_RETRIES"] = "0"
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envforge-home")


@pytest.fixture(scope="module")
def built(home: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    done = envforge(
        "build", "cpu", "--backend", "venv", "--wheelhouse", str(WHEELS), env=base_env(home)
    )
    assert done.returncode == 0, done.stderr
    return done, Path(done.stdout.strip().splitlines()[-1])


def test_first_build_makes_a_certified_env_with_torch_2_13_cpu(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path
) -> None:
    done, path = built
    assert path.parent == home / "venvs" / "cpu"
    assert path.name.startswith("torch2.13.0-cpu-py3.11-")
    version = subprocess.run(
        [str(path / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == "2.13.0+cpu"
    cert = certificate_view(path)
    recipe = Catalogue.default().load("cpu")
    assert cert["recipe_hash"] == recipe.hash
    assert cert["fingerprint"] == venv.fingerprint(path)
    report = cert["report"]
    assert report["status"] == "pass"
    assert report["level"] == "full"
    names = [s["name"] for s in report["steps"]]
    assert {"conv2d", "autocast", "grad-checkpoint"} <= set(names)
    assert all(s["status"] == "pass" for s in report["steps"])
    assert "certified (built" in done.stderr
    # Nothing half-written next to it.
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_the_venv_certification_is_kept_as_evidence(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path
) -> None:
    """Issue 12: the venv build's certification is in the evidence store (no interpreter
    path, no environment), and ``show`` counts it."""
    _done, path = built
    # the store as every reader opens it: its folders' new files read in (a venv's
    # certificate is written to certificates/, as a Docker one is)
    with opened({"ENVFORGE_HOME": str(home)}) as (conn, problems):
        texts = evidence_db.documents(conn)
    assert texts
    assert problems == ()
    assert not any(str(path) in t or '"executable"' in t for t in texts)
    shown = envforge("show", "cpu", env=base_env(home))
    assert shown.returncode == 0, shown.stderr
    assert "Evidence: certified on CPU only, 1 host" in shown.stdout


def test_second_build_is_a_no_op(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path
) -> None:
    _done, path = built
    before = {p: p.stat().st_mtime_ns for p in (path / ".envforge").iterdir()}
    inode = path.stat().st_ino
    again = envforge(
        "build", "cpu", "--backend", "venv", "--wheelhouse", str(WHEELS), env=base_env(home)
    )
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr
    assert "certifying" not in again.stderr
    assert path.stat().st_ino == inode
    assert {p: p.stat().st_mtime_ns for p in (path / ".envforge").iterdir()} == before


def test_activation_script_carries_the_recipe_env(
    built: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _done, path = built
    assert (path / "bin" / "envforge-env.sh").is_file()
    assert "envforge-env.sh" in (path / "bin" / "activate").read_text()


PRINT_PREFIXES = (
    "import os, sys, torch; print(torch.__version__, sys.prefix, os.environ['VIRTUAL_ENV'])"
)


def test_shell_runs_in_the_venv_and_passes_the_exit_code(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path
) -> None:
    _done, path = built
    env = base_env(home)
    ran = envforge(
        "shell", "cpu", "--backend", "venv", "--",
        "python", "-c", PRINT_PREFIXES,
        env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["2.13.0+cpu", str(path), str(path)]
    code = envforge(
        "shell", "cpu", "--backend", "venv", "--", "python", "-c", "raise SystemExit(5)", env=env
    )
    assert code.returncode == 5


def test_shell_auto_with_fallback_runs_here(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path
) -> None:
    env = base_env(home)
    env["ENVFORGE_GPU_VENDOR"] = "none"  # this machine has no GPU; say so for any runner
    ran = envforge(
        "shell", "auto", "--fallback", "cpu", "--backend", "venv", "--",
        "python", "-c", "import torch; print(torch.__version__)",
        env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "2.13.0+cpu"
    assert "auto -> cpu" in ran.stderr


def only_python311_path(tmp: Path) -> str:
    """A PATH with python3.11 (as python3) and sh, and no Python 3.10 anywhere."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    # this interpreter when it is 3.11: a pyenv shim found on PATH would not run there
    real = sys.executable if sys.version_info[:2] == (3, 11) else shutil.which("python3.11")
    assert real is not None
    for name in ("python3", "python3.11"):
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(real)
    for tool in ("sh", "bash"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_gfx1010_without_python310_exits_4_naming_it(tmp_path: Path, home: Path) -> None:
    env = base_env(home)
    env["PATH"] = only_python311_path(tmp_path)
    env["HOME"] = str(tmp_path)  # no ~/.pyenv to point at either
    done = envforge("build", "gfx1010", "--backend", "venv", env=env)
    assert done.returncode == 4, done.stderr
    # torch 1.13.1 has wheels for CPython 3.7-3.10 only: none of them is here
    assert "no usable Python interpreter" in done.stderr
    assert "3.9, 3.10" in done.stderr
    assert "this host has Python 3.11" in done.stderr
    assert "uv python install 3.10" in done.stderr
    assert not (home / "venvs" / "gfx1010").exists()


def test_fallback_when_the_gpu_recipe_cannot_be_built(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path, tmp_path: Path
) -> None:
    env = base_env(home)
    env["PATH"] = only_python311_path(tmp_path)
    env["HOME"] = str(tmp_path)
    # auto -> gfx1010, whose torch 1.13.1 has wheels for CPython 3.7-3.10 only
    env["ENVFORGE_GPU_ARCH"] = "gfx1010"
    ran = envforge(
        "shell", "auto", "--fallback", "cpu", "--backend", "venv", "--",
        "python", "-c", "import torch; print(torch.__version__)",
        env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "2.13.0+cpu"
    assert "gfx1010 cannot be used here: no usable Python interpreter" in ran.stderr
    assert "falling back to cpu" in ran.stderr


def test_fallback_when_the_gpu_probe_finds_no_device(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path
) -> None:
    # A GPU recipe that installs here (the CPU wheel standing in): its certification
    # reports no-device, so shell runs in cpu instead, and the GPU venv stays uncertified.
    cpu = Catalogue.default().load("cpu")
    gpu = replace(cpu, name="fake-gfx1030", gpu=Gpu(vendor="amd", arch="gfx1030"))
    options = backends.Options(wheelhouse=WHEELS, environ=base_env(home))
    notes: list[str] = []
    code = backends.shell(
        venv, gpu, ["python", "-c", "raise SystemExit(0)"], options, fallback=cpu, say=notes.append
    )
    assert code == 0
    assert notes[0].startswith("fake-gfx1030 cannot be used here:")
    assert "no-device" in notes[0]
    assert notes[1] == "falling back to cpu"
    state = venv.state(gpu, base_env(home))
    assert state.exists
    assert not state.certified
    assert not (state.path / ".envforge" / "certified.json").exists()
    # Again: the installed set is unchanged, so only the probe runs (no reinstall).
    said: list[str] = []
    again = replace(options, say=said.append)
    assert backends.shell(venv, gpu, ["true"], again, fallback=cpu, say=notes.append) == 0
    assert any("installed set unchanged; certifying" in s for s in said)
    assert not any(s.startswith("installing") for s in said)

    # Certified once (say, before the GPU went away): shell still quick-probes it first.
    markers = state.path / ".envforge"
    certified = {
        "recipe": gpu.name,
        "recipe_hash": gpu.hash,
        "fingerprint": venv.fingerprint(state.path),
        "content": venvfs.content_digests(state.path),  # bound to the files as they are
        "content_format": CONTENT_FORMAT,
        "level": "full",
        "report": {},
    }
    (markers / "certified.json").write_text(json.dumps(certified))
    assert venv.state(gpu, base_env(home)).certified
    notes.clear()
    assert backends.shell(venv, gpu, ["true"], options, fallback=cpu, say=notes.append) == 0
    assert notes[0].startswith("fake-gfx1030 cannot be used here: quick probe: device: no-device")
    assert notes[1] == "falling back to cpu"


def test_lock_then_build_from_the_lock(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = tmp_path / "recipes"
    folder.mkdir()
    shutil.copyfile(ROOT / "recipes" / "cpu.yaml", folder / "cpu.yaml")
    env = base_env(home)
    locked = envforge("lock", str(folder / "cpu.yaml"), "--wheelhouse", str(WHEELS), env=env)
    assert locked.returncode == 0, locked.stderr
    text = (folder / "cpu.lock.txt").read_text()
    assert text.startswith("# envforge-lock: recipe=cpu inputs=sha256:")
    assert "torch==2.13.0+cpu \\\n    --hash=sha256:" in text
    assert str(tmp_path) not in text  # no temporary paths in a file meant to be committed

    done = envforge(
        "build", str(folder / "cpu.yaml"), "--backend", "venv", "--wheelhouse", str(WHEELS), env=env
    )
    assert done.returncode == 0, done.stderr
    assert f"from the lock {folder / 'cpu.lock.txt'}" in done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    frozen = subprocess.run(
        [lock.uv_bin(), "pip", "freeze", "--python", str(path / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # pip is added after the locked set (`pip install X` in the shell goes to the venv)
    assert sum(1 for x in frozen if x.startswith("pip==")) == 1
    frozen = [x for x in frozen if not x.startswith("pip==")]
    pins = [
        line.split(" ")[0]
        for line in text.splitlines()
        if "==" in line and not line.startswith("#")
    ]
    assert sorted(frozen) == sorted(pins)

    # A lock whose hash does not match the wheel: the install fails (exit 3) and the
    # certified venv that was there is left exactly as it was.
    marker = (path / ".envforge" / "certified.json").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("torch=="):
            lines[i + 1] = "    --hash=sha256:" + "0" * 64
    (folder / "cpu.lock.txt").write_text("\n".join(lines) + "\n")
    bad = envforge(
        "build", str(folder / "cpu.yaml"), "--backend", "venv", "--wheelhouse", str(WHEELS), env=env
    )
    assert bad.returncode == 3, bad.stderr
    assert "hash" in bad.stderr.lower()
    assert (path / ".envforge" / "certified.json").read_text() == marker
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_lock_without_network_is_exit_4(tmp_path: Path) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    shutil.copyfile(ROOT / "recipes" / "cpu.yaml", folder / "cpu.yaml")
    env = base_env(tmp_path / "home")
    # Every request goes to a proxy that refuses connections: no index can be reached.
    for name in (
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ):
        env[name] = "http://127.0.0.1:9"
    for name in ("NO_PROXY", "no_proxy"):
        env.pop(name, None)
    done = envforge("lock", str(folder / "cpu.yaml"), env=env)
    assert done.returncode == 4, done.stderr
    assert "a package index cannot be reached (https://download.pytorch.org/whl/cpu)" in done.stderr
    assert not (folder / "cpu.lock.txt").exists()


def test_shell_uses_venv_when_no_engine_answers(
    built: tuple[subprocess.CompletedProcess[str], Path], home: Path, tmp_path: Path
) -> None:
    _done, path = built
    env = base_env(home)
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"
    ran = envforge("shell", "cpu", "--", "python", "-c", "import sys; print(sys.prefix)", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == str(path)
    assert "using the venv backend (no Docker engine answers" in ran.stderr


def test_a_login_node_builds_without_certifying_and_a_gpu_node_certifies_without_flags(
    tmp_path: Path,
) -> None:
    """Fleet use on a shared file system: `build --no-certify` where there is no GPU
    (records how it was built), `shell` refuses the uncertified venv naming `certify`
    instead of reinstalling it, and `certify` needs none of the build's flags."""
    env = base_env(tmp_path / "home")
    done = envforge(
        "build", "cpu", "--backend", "venv", "--no-certify", "--wheelhouse", str(WHEELS), env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "built without certification" in done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    built = json.loads((path / ".envforge" / "build.json").read_text())
    assert built["certify"] is False
    assert built["sources"] == ["--find-links", str(WHEELS.resolve())]
    assert not (path / ".envforge" / "certified.json").exists()
    shell = envforge("shell", "cpu", "--backend", "venv", "--", "true", env=env)
    assert shell.returncode == 1
    assert "built without certification" in shell.stderr
    assert "envforge certify cpu --backend venv" in shell.stderr
    assert "installing" not in shell.stderr  # nothing reinstalled
    certified = envforge("certify", "cpu", "--backend", "venv", "--level", "quick", env=env)
    assert certified.returncode == 0, certified.stderr[-3000:]
    ran = envforge(
        "shell",
        "cpu",
        "--backend",
        "venv",
        "--",
        "python",
        "-c",
        "import torch; print(torch.__version__)",
        env=env,
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "2.13.0+cpu"), ran.stderr[-2000:]
