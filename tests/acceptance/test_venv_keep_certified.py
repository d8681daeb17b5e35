"""The venv backend keeps a certified venv until a new one passes, and trusts it only while
its files are what was certified (real uv, real torch, real signals; nothing mocked).

The tests run in file order on one ENVFORGE_HOME: each leaves the cpu venv certified.
Needs what ``test_venv_cpu.py`` needs (the torch wheel in ``PIP_FIND_LINKS``, python3.11);
the full-disk case needs root (a tmpfs mount) and is skipped without it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from envforge.backends import venv, venvfs
from envforge.recipe.catalogue import Catalogue

from .helpers import certificate_view
from .test_venv_cpu import WHEELS, base_env, envforge, pytestmark  # noqa: F401 - marks apply

SP = "lib/python3.11/site-packages"
TORCH_INIT = f"{SP}/torch/__init__.py"
WHOAMI = "import sys, torch; print(sys.prefix, torch.__version__)"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envforge-home")


@pytest.fixture(scope="module")
def env(home: Path) -> dict[str, str]:
    return base_env(home)


@pytest.fixture(scope="module")
def path(env: dict[str, str]) -> Path:
    """The cpu venv, certified by a quick probe (a later full-level build probes again)."""
    done = build(env, "--level", "quick")
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def build(
    env: Mapping[str, str], *extra: str, wheelhouse: Path = WHEELS
) -> subprocess.CompletedProcess[str]:
    return envforge(
        "build", "cpu", "--backend", "venv", "--wheelhouse", str(wheelhouse), *extra, env=env
    )


def build_argv(*extra: str, wheelhouse: Path = WHEELS) -> list[str]:
    return [
        sys.executable, "-m", "envforge",
        "build", "cpu", "--backend", "venv", "--wheelhouse", str(wheelhouse), *extra,
    ]  # fmt: skip


#: Two other folders holding the same torch wheel, made once (uv unpacks a wheel once per
#: folder it comes from: a folder per test cost a torch unpacked per test).
OTHER_WHEELS = ("other-wheels-a", "other-wheels-b")


@pytest.fixture(scope="module")
def wheel_folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel-folders")
    for name in OTHER_WHEELS:
        (root / name).mkdir()
        for wheel in WHEELS.glob("*.whl"):
            (root / name / wheel.name).symlink_to(wheel)
    return root


def other_wheelhouse(path: Path, folders: Path) -> Path:
    """The same torch wheel from a folder other than the one the venv at ``path`` was
    installed from: the install inputs differ, so a build installs a new venv (aside)
    instead of only probing again."""
    build = json.loads((path / ".envforge" / "build.json").read_text(encoding="utf-8"))
    return next(
        folders / name for name in OTHER_WHEELS if str(folders / name) != build.get("wheelhouse")
    )


def certificate(path: Path) -> bytes:
    return (path / ".envforge" / "certified.json").read_bytes()


def leftovers(path: Path) -> list[str]:
    """Hidden folders beside the venv: builds aside (``.<name>.tmp-…``), old ones swapped out."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith("."))


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("envforge: error:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def assert_certified_and_used(path: Path, env: Mapping[str, str]) -> None:
    """``state`` says certified and ``shell`` runs the venv at ``path`` with its torch."""
    recipe = Catalogue.default().load("cpu")
    assert venv.state(recipe, env).certified
    ran = envforge("shell", "cpu", "--backend", "venv", "--", "python", "-c", WHOAMI, env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(path), "2.13.0+cpu"]


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line holds ``text`` (a path only this test's processes use)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(entry.name))
    return found


def wait_for(what: str, test: object, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# --------------------------------------------------------------------------- kept on failure


def test_sigint_during_the_reprobe_of_a_certified_venv(path: Path, env: dict[str, str]) -> None:
    before = certificate(path)
    # The recipe's level is full; the venv is certified at quick: the build probes again.
    with subprocess.Popen(
        build_argv(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        wait_for("the probe worker", lambda: processes_mentioning(f"{path}/bin/python"))
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == (
        "envforge: error: cpu: probe interrupted; the worker was stopped and the venv's"
        " certificate is as it was (fix: run `envforge build cpu --backend venv` again)"
    ), err
    assert "Traceback" not in err
    assert certificate(path) == before
    assert leftovers(path) == []
    wait_for("no probe worker", lambda: not processes_mentioning(f"{path}/bin/python"), 10)
    assert_certified_and_used(path, env)


def test_a_reprobe_that_times_out_keeps_the_certificate(path: Path, env: dict[str, str]) -> None:
    before = certificate(path)
    done = build(env, "--step-timeout", "0.05")
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    assert "hang" in line
    assert "keeps its earlier certificate (quick probe)" in line
    assert certificate(path) == before
    assert json.loads((path / ".envforge" / "probe.json").read_text())["status"] != "pass"
    assert_certified_and_used(path, env)


def test_a_rebuild_whose_probe_fails_keeps_the_certified_venv(
    path: Path, env: dict[str, str], wheel_folders: Path
) -> None:
    before = certificate(path)
    inode = path.stat().st_ino
    done = build(env, "--step-timeout", "0.05", wheelhouse=other_wheelhouse(path, wheel_folders))
    assert done.returncode == 1, done.stderr
    assert "reinstalling (the install inputs changed)" in done.stderr
    line = one_error_line(done.stderr)
    assert "the probe of the venv rebuilt for" in line
    assert "stays as it was, certified (quick probe)" in line
    assert path.stat().st_ino == inode
    assert certificate(path) == before
    assert leftovers(path) == []
    assert_certified_and_used(path, env)


def test_an_extra_check_that_fails_leaves_the_certified_venv_in_use(
    path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    check = tmp_path / "fails.py"
    check.write_text("raise SystemExit('this host is not good enough')\n")
    before = certificate(path)
    done = build(env, "--level", "quick", "--set", f"certify.extra_checks=[{check}]")
    assert done.returncode == 1, done.stderr
    one_error_line(done.stderr)
    assert certificate(path) == before
    # That recipe (another hash) got a venv of its own, uncertified: not this test's concern.
    for other in path.parent.iterdir():
        if other != path and not other.name.startswith("."):
            subprocess.run(["rm", "-rf", str(other)], check=True)
    again = build(env, "--level", "quick")
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr
    assert_certified_and_used(path, env)


# --------------------------------------------------------------------------- content binding


def test_an_edited_torch_is_refused_by_shell_and_reinstalled_by_build(
    path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    init = path / TORCH_INIT
    original = init.read_bytes()
    with init.open("ab") as fh:
        fh.write(b"\nraise SystemExit('not the certified torch')\n")
    marker = tmp_path / "ran"
    ran = envforge(
        "shell", "cpu", "--backend", "venv", "--", "python", "-c", f"open('{marker}', 'w')",
        env=env,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    line = one_error_line(ran.stderr)
    assert f"{path} changed since it was certified: {TORCH_INIT} modified" in line
    assert "envforge build cpu --backend venv` re-certifies it" in line
    assert not marker.exists()
    done = build(env, "--level", "quick")
    assert done.returncode == 0, done.stderr
    assert f"reinstalling (files changed since the install: {TORCH_INIT} modified" in (done.stderr)
    assert init.read_bytes() == original
    assert_certified_and_used(path, env)


def test_a_touched_file_is_read_again_and_stays_certified(path: Path, env: dict[str, str]) -> None:
    init = path / TORCH_INIT
    inode = path.stat().st_ino
    os.utime(init)  # same bytes, newer mtime and ctime: hashed again, the same content
    ran = envforge("shell", "cpu", "--backend", "venv", "--", "true", env=env)
    assert ran.returncode == 0, ran.stderr
    done = build(env, "--level", "quick")
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stderr + done.stdout
    assert "installing" not in done.stderr
    assert path.stat().st_ino == inode
    assert_certified_and_used(path, env)


def test_a_deleted_torch_is_refused_then_reinstalled(path: Path, env: dict[str, str]) -> None:
    subprocess.run(["rm", "-rf", str(path / SP / "torch")], check=True)
    ran = envforge("shell", "cpu", "--backend", "venv", "--", "true", env=env)
    assert ran.returncode == 1
    assert f"{SP}/torch/" in one_error_line(ran.stderr)
    assert "missing" in ran.stderr
    done = build(env, "--level", "quick")
    assert done.returncode == 0, done.stderr
    assert "reinstalling" in done.stderr
    assert_certified_and_used(path, env)


# --------------------------------------------------------------------------- swapped on a pass


def test_a_rebuild_that_passes_is_probed_aside_then_swapped_in(
    path: Path, env: dict[str, str], wheel_folders: Path
) -> None:
    inode = path.stat().st_ino
    done = build(env, "--level", "quick", wheelhouse=other_wheelhouse(path, wheel_folders))
    assert done.returncode == 0, done.stderr
    assert "certified (reinstalled" in done.stderr
    assert path.stat().st_ino != inode
    cert = certificate_view(path)
    # The probe ran in the folder aside; its report names where the venv now is, never
    # the folder aside, which no longer exists (issue 26 §4) ...
    probed = cert["report"]["environment"]["target"]
    assert f"/.{path.name}.tmp-" not in json.dumps(cert["report"]), probed
    assert str(path) in probed, probed
    assert cert["content"] == venvfs.content_digests(path)
    assert leftovers(path) == []
    # ... and the venv works where it now is: its python, its scripts, its activate.
    assert_certified_and_used(path, env)
    activated = subprocess.run(
        ["bash", "-c", f'. "{path}/bin/activate" && python -c "{WHOAMI}" && command -v python'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert activated == [str(path), "2.13.0+cpu", f"{path}/bin/python"]
    # Files are copies, never hard links into uv's cache (an edit must not reach it); the
    # one other link is envforge's store of files venvs share (backends/venv/share.py).
    info = (path / TORCH_INIT).stat()
    key = hashlib.sha256((path / TORCH_INIT).read_bytes()).hexdigest()
    assert info.st_nlink == 2
    assert (
        Path(env["ENVFORGE_HOME"]) / "store/sha256" / key[:2] / key
    ).stat().st_ino == info.st_ino


# --------------------------------------------------------------------------- interrupted, killed


def test_sigint_or_sigterm_while_building_is_130_and_leaves_nothing(
    path: Path, env: dict[str, str], wheel_folders: Path
) -> None:
    """At 0.3 s (still loading), and while uv fills the folder aside: exit 130, one line,
    the folder aside removed, no uv left running, the certified venv as it was."""
    before = certificate(path)
    wheels = other_wheelhouse(path, wheel_folders)
    aside = f"{path.parent}/.{path.name}.tmp-"
    for sig, moment in ((signal.SIGINT, 0.3), (signal.SIGINT, None), (signal.SIGTERM, None)):
        with subprocess.Popen(
            build_argv("--level", "quick", wheelhouse=wheels),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            if moment is None:  # once uv is filling the folder aside
                wait_for("uv", lambda: processes_mentioning(aside))
                time.sleep(0.3)
            else:
                time.sleep(moment)
            proc.send_signal(sig)
            _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (sig, moment, err)
        assert "interrupted" in err.splitlines()[-1], err
        assert "Traceback" not in err
        assert leftovers(path) == []
        assert processes_mentioning(aside) == []
        assert certificate(path) == before
    assert_certified_and_used(path, env)


def test_sigkill_mid_build_leaves_folders_the_next_build_sweeps(
    path: Path, env: dict[str, str], wheel_folders: Path
) -> None:
    wheels = other_wheelhouse(path, wheel_folders)
    with subprocess.Popen(
        build_argv("--level", "quick", wheelhouse=wheels),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        wait_for(
            "uv filling the folder aside",
            lambda: any((path.parent / name / "lib").exists() for name in leftovers(path)),
        )
        proc.kill()
        proc.wait()
    left = leftovers(path)
    assert len(left) == 1, left
    assert left[0].startswith(f".{path.name}.tmp-{proc.pid}."), left
    # uv ran in a session of its own and goes on, orphaned: end it (it is this test's).
    for pid in processes_mentioning(left[0]):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for("the orphaned uv", lambda: not processes_mentioning(left[0]), 30)
    assert_certified_and_used(path, env)  # the certified venv was never touched
    done = build(env, "--level", "quick")
    assert done.returncode == 0, done.stderr
    assert f"removed {path.parent / left[0]}, left by an envforge that was stopped" in (done.stderr)
    assert leftovers(path) == []
    assert_certified_and_used(path, env)


# --------------------------------------------------------------------------- full disk


@contextmanager
def tmpfs_over(where: Path, size: str) -> Iterator[None]:
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def fill(filler: Path) -> None:
    """Write zeros into ``filler`` until the file system is full."""
    try:
        with filler.open("wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise


def test_a_full_envforge_home_after_the_certificate_was_removed(
    path: Path, env: dict[str, str]
) -> None:
    markers = path / ".envforge"
    (markers / "certified.json").unlink()
    kept = {p.name: p.read_bytes() for p in markers.iterdir()}
    # room for the markers as they are (the file memo is a few MB), then filled
    room = sum(len(data) for data in kept.values()) // 1024 + 64
    with tmpfs_over(markers, f"{room}k"):
        for name, data in kept.items():
            (markers / name).write_bytes(data)
        filler = markers / "filler"
        fill(filler)
        done = build(env, "--level", "quick")
        assert done.returncode == 4, done.stderr
        line = one_error_line(done.stderr)
        assert "no space left on the file system" in line
        assert "ENVFORGE_HOME" in line
        filler.unlink()
        assert {p.name: p.read_bytes() for p in markers.iterdir()} == kept
        assert not [p for p in markers.iterdir() if p.name.startswith(".envforge-")]
    assert leftovers(path) == []
    whoami = subprocess.run(
        [str(path / "bin" / "python"), "-c", WHOAMI], capture_output=True, text=True, check=True
    )
    assert whoami.stdout.split() == [str(path), "2.13.0+cpu"]
    # The mark came from the disk under the tmpfs: put it back by building again.
    done = build(env, "--level", "quick")
    assert done.returncode == 0, done.stderr
    assert_certified_and_used(path, env)


def test_a_rebuild_on_a_full_envforge_home_keeps_the_certified_venv(
    tmp_path: Path, wheel_folders: Path
) -> None:
    """ENVFORGE_HOME on a file system with room for one venv, not two: the rebuild aside
    runs out of space; exit 4 in one line, the folder aside removed, the venv as it was."""
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home)
    with tmpfs_over(home, "1200m"):
        first = build(env, "--level", "quick")
        assert first.returncode == 0, first.stderr
        path = Path(first.stdout.strip().splitlines()[-1])
        before = certificate(path)
        inode = path.stat().st_ino
        done = build(env, "--level", "quick", wheelhouse=other_wheelhouse(path, wheel_folders))
        assert done.returncode == 4, done.stderr
        line = one_error_line(done.stderr)
        assert "no space left" in line.lower(), line
        assert leftovers(path) == []
        assert path.stat().st_ino == inode
        assert certificate(path) == before
        assert_certified_and_used(path, env)
