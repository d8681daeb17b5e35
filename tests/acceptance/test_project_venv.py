"""A user's project on the venv backend for real (issue 19): `build --project` resolves the
project's dependencies on the cpu stack (torch from PIP_FIND_LINKS, the rest from the
package index), installs the project editable in a venv of its own, certifies its import
and its checks with the probe; `shell --project` runs the same `python` a user would."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.backends import venvfs, venvscan
from envforge.backends.venv import share
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import ProbeSpec
from envforge.project.checks import project_checks
from envforge.project.read import load_project

from .helpers import certificate_view
from .test_venv_cpu import ROOT, WHEELS, base_env, envforge
from .test_venv_cpu import pytestmark as venv_marks

pytestmark = venv_marks

SP = "lib/python3.11/site-packages"

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "demo-trainer"
version = "0.1"
requires-python = ">=3.10"
dependencies = ["torch>=2.4", "six>=1.16"]

[project.optional-dependencies]
fast = ["sortedcontainers"]

[tool.envforge]
recipe = "cpu"
checks = ["tests/smoke.py", "python -c \\"import demo_trainer; assert demo_trainer.VALUE == 41\\""]
"""


@pytest.fixture(scope="module")
def proj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo-trainer")
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    pkg = root / "src" / "demo_trainer"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import six\n\nVALUE = 41\n", encoding="utf-8")
    (root / "tests").mkdir()
    (root / "tests" / "smoke.py").write_text(
        "import torch, demo_trainer\nassert torch.ones(2).sum().item() == 2.0\n", encoding="utf-8"
    )
    return root


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envforge-home")


@pytest.fixture(scope="module")
def built(proj: Path, home: Path) -> dict[str, object]:
    done = envforge(
        "build", "--project", str(proj), "--wheelhouse", str(WHEELS), "--json", env=base_env(home)
    )
    assert done.returncode == 0, done.stderr[-4000:]
    data: dict[str, object] = json.loads(done.stdout)
    data["stderr"] = done.stderr
    return data


def test_the_project_is_certified_in_a_venv_of_its_own(
    built: dict[str, object], home: Path
) -> None:
    path = Path(str(built["path"]))
    assert path.parent == home / "venvs" / "cpu"
    assert "-demo-trainer-" in path.name  # keyed by recipe and project
    assert "using the venv backend" in str(built["stderr"])  # no project image on docker
    probe = json.loads((path / ".envforge" / "probe.json").read_text(encoding="utf-8"))
    steps = {s["name"]: s["status"] for s in probe["steps"]}
    assert steps["check:import demo_trainer"] == "pass"
    assert steps["check:tests/smoke.py"] == "pass"
    assert steps["import:six"] == "pass"  # the project's requirements are imported too
    assert [n for n in steps if n.startswith("check:python -c")] != []
    # the recipe's own venv was not made or touched
    assert [p.name for p in (home / "venvs" / "cpu").iterdir()] == [path.name]


def test_shell_runs_the_project_editable_and_sees_source_edits(
    built: dict[str, object], proj: Path, home: Path
) -> None:
    del built
    code = "import demo_trainer, torch; print(demo_trainer.VALUE, torch.__version__)"
    done = envforge(
        "shell",
        "cpu",
        "--project",
        str(proj),
        "--backend",
        "venv",
        "--",
        "python",
        "-c",
        code,
        env=base_env(home),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["41", "2.13.0+cpu"]
    init = proj / "src" / "demo_trainer" / "__init__.py"
    init.write_text("import six\n\nVALUE = 42\n", encoding="utf-8")
    try:
        again = envforge(
            "shell",
            "cpu",
            "--project",
            str(proj),
            "--backend",
            "venv",
            "--",
            "python",
            "-c",
            code,
            env=base_env(home),
        )
    finally:
        init.write_text("import six\n\nVALUE = 41\n", encoding="utf-8")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.split()[0] == "42"  # no rebuild: the project is installed editable
    assert "installing" not in again.stderr


def test_a_failing_check_fails_certification_naming_it(
    built: dict[str, object], proj: Path, home: Path
) -> None:
    del built
    smoke = proj / "tests" / "smoke.py"
    before = smoke.read_text(encoding="utf-8")
    smoke.write_text("raise SystemExit('the GPU smoke test broke')\n", encoding="utf-8")
    try:
        done = envforge("certify", "cpu", "--project", str(proj), env=base_env(home))
    finally:
        smoke.write_text(before, encoding="utf-8")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "check:tests/smoke.py" in done.stdout + done.stderr


def test_pip_in_the_shell_installs_into_the_venv_and_marks_it_stale_once(
    built: dict[str, object], proj: Path, home: Path
) -> None:
    venv_bin = Path(str(built["path"])) / "bin"
    shell = ("shell", "cpu", "--project", str(proj), "--backend", "venv", "--")
    done = envforge(
        *shell,
        "sh",
        "-c",
        "command -v pip && pip install -q --no-deps iniconfig",
        env=base_env(home),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == str(venv_bin / "pip")
    code = "import iniconfig, demo_trainer; print('ok')"
    first = envforge(*shell, "python", "-c", code, env=base_env(home))
    second = envforge(*shell, "python", "-c", code, env=base_env(home))
    assert (first.returncode, first.stdout.strip()) == (0, "ok"), first.stderr[-2000:]
    assert "iniconfig" in first.stderr
    assert "stale" in first.stderr
    assert (second.returncode, second.stdout.strip()) == (0, "ok")
    assert "stale" not in second.stderr  # said once
    again = envforge("certify", "cpu", "--project", str(proj), env=base_env(home))
    assert again.returncode == 0, again.stderr[-2000:]
    third = envforge(*shell, "python", "-c", code, env=base_env(home))
    assert third.returncode == 0
    assert "stale" not in third.stderr


def test_a_clashing_requirement_stops_before_anything_is_built(tmp_path: Path, home: Path) -> None:
    (tmp_path / "requirements.txt").write_text("six\ntorch<2.0\n", encoding="utf-8")
    venvs = home / "venvs" / "cpu"
    before = sorted(p.name for p in venvs.iterdir()) if venvs.is_dir() else []
    done = envforge(
        "build", "cpu", "--project", str(tmp_path), "--backend", "venv", env=base_env(home)
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    assert "torch<2.0" in done.stderr
    assert "2.13.0" in done.stderr
    assert (sorted(p.name for p in venvs.iterdir()) if venvs.is_dir() else []) == before


def _build_killed_when(proj: Path, home: Path, reached: Callable[[str], bool]) -> bool:
    """Start a build of the project and SIGKILL it (and uv) as soon as ``reached`` says so
    of its stderr so far; whether it got there before it ended."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envforge",
            "build",
            "cpu",
            "--project",
            str(proj),
            "--backend",
            "venv",
            "--wheelhouse",
            str(WHEELS),
        ],
        cwd=ROOT,
        env=base_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stderr is not None
    said = ""
    try:
        while child.poll() is None and not reached(said):
            said += child.stderr.readline()
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stderr.close()
    return reached(said)


@pytest.mark.parametrize(
    "moment",
    [
        "starting from the certified",  # the clone is made: torch's files linked aside
        "installing the project",  # uv has synced the clone: old versions removed, new in
    ],
)
def test_a_kill_mid_rebuild_leaves_the_certified_venv_as_it_was(
    built: dict[str, object], proj: Path, home: Path, moment: str
) -> None:
    """SIGKILL while the rebuild works on the folder aside (whose torch files are links
    to the certified venv's): the certified venv is used as it was, not one file of it
    touched, nothing of the new one in its place."""
    path = Path(str(built["path"]))
    text = (proj / "pyproject.toml").read_text(encoding="utf-8")
    (proj / "pyproject.toml").write_text(
        text.replace('"six>=1.16"]', '"six>=1.16", "idna"]'), encoding="utf-8"
    )
    try:
        got_there = _build_killed_when(proj, home, lambda said: moment in said)
    finally:
        (proj / "pyproject.toml").write_text(text, encoding="utf-8")
    assert got_there, f"the rebuild ended before {moment!r}"
    assert list(path.parent.glob(f".{path.name}.tmp-*/{SP}/torch"))  # it was under way
    cert = certificate_view(path)
    assert cert["content"] == venvfs.content_digests(path)  # no file written through a link
    done = envforge(
        "shell",
        "cpu",
        "--project",
        str(proj),
        "--backend",
        "venv",
        "--",
        "python",
        "-c",
        "import torch, demo_trainer; print(torch.ones(2).sum())",
        env=base_env(home),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tensor(2.)" in done.stdout
    assert "installing" not in done.stderr  # used as it was: certified, no rebuild


def test_shell_rebuilds_when_the_requirements_change_keeping_torchs_files(
    built: dict[str, object], proj: Path, home: Path
) -> None:
    """A requirements change keeps torch's files (the same inodes) and certifies only what
    the change can affect, saying which certificate it extends; `certify` probes in full."""
    path = Path(str(built["path"]))
    torch_inode = os.stat(path / SP / "torch" / "__init__.py").st_ino
    before = hashlib.sha256((path / ".envforge" / "certified.json").read_bytes()).hexdigest()
    text = (proj / "pyproject.toml").read_text(encoding="utf-8")
    (proj / "pyproject.toml").write_text(
        text.replace('"six>=1.16"]', '"six>=1.16", "idna"]'), encoding="utf-8"
    )
    try:
        done = envforge(
            "shell",
            "cpu",
            "--project",
            str(proj),
            "--backend",
            "venv",
            "--wheelhouse",
            str(WHEELS),
            "--",
            "python",
            "-c",
            "import idna, demo_trainer; print('ok')",
            env=base_env(home),
        )
        cert = certificate_view(path)
        full = envforge("certify", "cpu", "--project", str(proj), env=base_env(home))
        again = certificate_view(path)
    finally:
        (proj / "pyproject.toml").write_text(text, encoding="utf-8")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
    assert os.stat(path / SP / "torch" / "__init__.py").st_ino == torch_inode
    assert list(path.parent.glob(f".{path.name}.*")) == []  # the killed one's swept
    inc = cert["incremental"]
    assert inc["extends"]["certificate_sha256"] == f"sha256:{before}"
    assert "import:idna" in inc["rerun"]
    assert "check:import demo_trainer" in inc["rerun"]
    assert [s["name"] for s in cert["report"]["steps"]] == inc["rerun"]  # no torch steps
    assert any(s["name"] == "matmul" for s in inc["base_report"]["steps"])
    assert any(label.startswith("torch ") for label in inc["unchanged_stack"])
    assert full.returncode == 0, full.stderr[-2000:]
    assert "incremental" not in again
    assert any(s["name"] == "matmul" for s in again["report"]["steps"])


def test_a_rebuild_reuses_the_wheelhouse_the_last_build_used(
    built: dict[str, object], proj: Path, home: Path, tmp_path: Path
) -> None:
    """Issue 29: after a requirements edit, `shell --project` without --wheelhouse rebuilds
    from the wheelhouse the last build used (said in one line), not from torch's index."""
    del built
    env = {**base_env(home), "XDG_CONFIG_HOME": str(tmp_path)}  # no user settings file
    text = (proj / "pyproject.toml").read_text(encoding="utf-8")
    (proj / "pyproject.toml").write_text(
        text.replace('"six>=1.16"]', '"six>=1.16", "certifi"]'), encoding="utf-8"
    )
    try:
        done = envforge(
            "shell",
            "cpu",
            "--project",
            str(proj),
            "--backend",
            "venv",
            "--",
            "python",
            "-c",
            "import certifi, demo_trainer; print('ok')",
            env=env,
        )
    finally:
        (proj / "pyproject.toml").write_text(text, encoding="utf-8")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
    said = [line for line in done.stderr.splitlines() if "what the last build of" in line]
    assert len(said) == 1, done.stderr[-3000:]
    assert f"--wheelhouse {WHEELS.resolve()}" in said[0]


def test_an_optional_extra_is_installed_certified_and_used_by_the_shell(
    built: dict[str, object], proj: Path, home: Path
) -> None:
    """``--extra NAME`` (issue 19 §1, §10): the extra's requirements are resolved on the stack,
    installed, imported by the probe; the shell with the same extra uses that venv as it is."""
    path = Path(str(built["path"]))
    done = envforge(
        "build",
        "cpu",
        "--project",
        str(proj),
        "--extra",
        "fast",
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        env=base_env(home),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cpu: certified incrementally (reinstalled in" in done.stderr
    probe = json.loads((path / ".envforge" / "probe.json").read_text(encoding="utf-8"))
    steps = {s["name"]: s["status"] for s in probe["steps"]}
    assert steps["import:sortedcontainers"] == "pass"
    assert steps["check:import demo_trainer"] == "pass"
    shell = envforge(
        "shell",
        "cpu",
        "--project",
        str(proj),
        "--extra",
        "fast",
        "--backend",
        "venv",
        "--",
        "python",
        "-c",
        "import sortedcontainers, demo_trainer; print('ok')",
        env=base_env(home),
    )
    assert (shell.returncode, shell.stdout.strip()) == (0, "ok"), shell.stderr[-2000:]
    assert "installing" not in shell.stderr  # certified with the extra: no rebuild
    wrong = envforge(
        "build",
        "cpu",
        "--project",
        str(proj),
        "--extra",
        "fsat",
        "--backend",
        "venv",
        env=base_env(home),
    )
    assert wrong.returncode == 2, wrong.stderr
    assert "'fsat'" in wrong.stderr
    assert "'fast'" in wrong.stderr  # the extra it has


def test_a_flat_requirements_project_builds_exactly_its_lock(tmp_path: Path, home: Path) -> None:
    """A requirements.txt project with a ``-r`` include and an envforge.toml check: locked
    around the stack, then built from that lock (uv pip sync --require-hashes), the
    included file's packages installed and imported, its check certified."""
    root = tmp_path / "flat-trainer"
    root.mkdir()
    (root / "requirements.txt").write_text("torch>=2.4\n-r more.txt\n", encoding="utf-8")
    (root / "more.txt").write_text("six\nnumpy<3\n", encoding="utf-8")
    (root / "envforge.toml").write_text('checks = ["smoke.py"]\n', encoding="utf-8")
    (root / "smoke.py").write_text(
        "import six, torch\nassert torch.ones(3).sum().item() == 3.0\n", encoding="utf-8"
    )
    env = base_env(home)
    locked = envforge("lock", "cpu", "--project", str(root), "--wheelhouse", str(WHEELS), env=env)
    assert locked.returncode == 0, locked.stderr[-3000:]
    done = envforge(
        "build",
        "cpu",
        "--project",
        str(root),
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        "--level",
        "quick",
        "--json",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    lock = root / "envforge-cpu.lock.txt"
    assert data["lock"] == str(lock)
    assert data["incremental"] is False  # a new venv: the full probe
    path = Path(str(data["path"]))
    assert "-flat-trainer-" in path.name
    pinned = {
        line.split("==")[0].strip().lower().replace("_", "-")
        for line in lock.read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    installed = {
        d.name.split("-")[0].lower().replace("_", "-") for d in (path / SP).glob("*.dist-info")
    }
    assert {"torch", "six", "numpy"} <= pinned
    assert installed - {"pip"} == pinned  # exactly the lock (and the venv's own pip)
    probe = json.loads((path / ".envforge" / "probe.json").read_text(encoding="utf-8"))
    steps = {s["name"]: s["status"] for s in probe["steps"]}
    assert steps["import:six"] == "pass"
    assert steps["check:smoke.py"] == "pass"
    assert not any(n.startswith("check:import ") for n in steps)  # nothing to install

    # the included file changes, the lock follows: the rebuild syncs the clone to the new
    # lock, torch's files kept, certified incrementally
    torch_inode = os.stat(path / SP / "torch" / "__init__.py").st_ino
    (root / "more.txt").write_text("six\nnumpy<3\nidna\n", encoding="utf-8")
    relocked = envforge("lock", "cpu", "--project", str(root), "--wheelhouse", str(WHEELS), env=env)
    assert relocked.returncode == 0, relocked.stderr[-3000:]
    again = envforge(
        "build",
        "cpu",
        "--project",
        str(root),
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        "--level",
        "quick",
        env=env,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "incrementally" in again.stderr
    assert os.stat(path / SP / "torch" / "__init__.py").st_ino == torch_inode
    cert = certificate_view(path)
    assert cert["incremental"]["rerun"] == ["import:idna", "check:smoke.py"]


def test_a_hung_command_check_is_stopped_at_its_deadline_with_its_children(
    tmp_path: Path,
) -> None:
    """A check that never ends (``sleep 600`` under a shell) is a hang at the step deadline,
    and nothing it started is left running."""
    marker = f"envforge-hung-check-{tmp_path.name}"
    root = tmp_path / "p"
    root.mkdir()
    (root / "requirements.txt").write_text("six\n", encoding="utf-8")
    (root / "envforge.toml").write_text(
        f"checks = [\"sh -c 'sleep 600; echo {marker}'\"]\n", encoding="utf-8"
    )
    (check,) = project_checks(load_project(root))
    spec = ProbeSpec(level="quick", vendor="none", step_timeout=15.0, checks=(check,))
    report = run_probe(spec, LocalPythonTarget(python=sys.executable, env=None))
    (step,) = [s for s in report.steps if s.name == check.step]
    assert step.status == "hang", step
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == ""


def test_a_second_project_on_the_stack_shares_torchs_files(
    built: dict[str, object], home: Path, tmp_path: Path
) -> None:
    """Issue 32 section 2: the second project's venv links torch's files from the store
    (one inode for both venvs) and adds at most 100 MB on disk."""
    first = Path(str(built["path"]))
    other = tmp_path / "other"
    other.mkdir()
    (other / "requirements.txt").write_text("six\n", encoding="utf-8")
    done = envforge(
        "build",
        "--project",
        str(other),
        "--wheelhouse",
        str(WHEELS),
        "--json",
        env=base_env(home),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    second = Path(json.loads(done.stdout)["path"])
    assert "files shared with other venvs:" in done.stderr
    torch = SP + "/torch/lib/libtorch_cpu.so"
    assert os.stat(first / torch).st_ino == os.stat(second / torch).st_ino
    # the link moved the ctime of the first venv's torch files, so its own memo misses
    # them: the store's memo has them as they are now (its next shell reads none again)
    shared = venvscan.read_list(share.home_memo(base_env(home))) or {}
    now = os.lstat(first / torch)
    assert shared[venvscan.inode_key(now)][0] == venvscan.stat_key(now)
    du = json.loads(envforge("du", "--json", env=base_env(home)).stdout)
    mine = {v["path"]: v for v in du["venvs"]}
    assert mine[str(second)]["own_bytes"] <= 100 * 10**6
    assert mine[str(second)]["bytes"] - mine[str(second)]["own_bytes"] > 500 * 10**6


def test_du_counts_the_project_venv_and_gc_removes_it_once_the_project_is_gone(
    built: dict[str, object], proj: Path, home: Path
) -> None:
    """On the real project venv: `du` measures it as `du` would and calls it in use; `gc`
    keeps it while its folder is there and removes it (and nothing half) once it is gone."""
    path = Path(str(built["path"]))
    du = envforge("du", "--json", env=base_env(home))
    assert du.returncode == 0, du.stderr[-2000:]
    data = json.loads(du.stdout)
    (entry,) = [v for v in data["venvs"] if v["path"] == str(path)]
    assert entry["verdict"] == "in use"
    assert entry["certified"]
    assert entry["bytes"] > 500 << 20  # torch's files are in it
    blocks = subprocess.run(
        ["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True
    )
    assert entry["bytes"] == int(blocks.stdout.split()[0])
    dry = envforge("gc", "--dry-run", "--json", env=base_env(home))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert str(path) not in [v["path"] for v in json.loads(dry.stdout)["would_remove"]]
    moved = proj.with_name(proj.name + "-moved")
    proj.rename(moved)
    try:
        done = envforge("gc", "--json", env=base_env(home))
    finally:
        moved.rename(proj)
    assert done.returncode == 0, done.stderr[-2000:]
    removed = {v["path"]: v for v in json.loads(done.stdout)["removed"]}
    assert removed[str(path)]["verdict"] == "project gone"
    assert not path.exists()
    assert list(path.parent.glob(f".{path.name}.*")) == []
