"""Output paths and ENVFORGE_HOME on hostile file systems, with real processes.

Every case runs the real CLI (``python -m envforge``) against a real file system and
asserts: exit 2 (the path is wrong) or 4 (the file system refuses: read-only, full, no
permission), exactly one ``envforge: error:`` line naming the path, no traceback, and
nothing half-written (no temporary file, no partial tree, earlier content untouched).

* Full and read-only file systems are small tmpfs mounts (``size=64k``, 256k where
  ``render --all`` must fit; ``remount,ro``), unmounted in the fixtures' ``finally``.
  Where mounting is refused (not root, no CAP_SYS_ADMIN) those cases are skipped, saying
  so.
* Tests run as root, for whom permission bits do not apply. Permission cases therefore
  run the CLI either as a real unprivileged user (uid/gid 65534, forked from this
  process, where the interpreter is not readable by that user) or, for whole commands in a
  new process, as root without the capabilities that bypass permission bits
  (``setpriv --bounding-set=-dac_override,-dac_read_search``): the kernel then checks the
  mode bits for it like for anyone.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from envforge.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
SETPRIV = shutil.which("setpriv")
NOBODY = 65534
DROP_DAC = ["--bounding-set=-dac_override,-dac_read_search"]


# --------------------------------------------------------------------------- helpers


def child_env(home: Path | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    if home is not None:
        env["ENVFORGE_HOME"] = str(home)
    env.update(extra or {})
    return env


def envforge(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    timeout: float = 300,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "envforge", *args],
        cwd=cwd,
        env=dict(env) if env is not None else child_env(cwd / "home"),
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(status: int, stderr: bytes | str, code: int, *names: object) -> str:
    """Exit ``code``, one ``envforge: error:`` line (the last one) naming each of ``names``."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    assert "Traceback" not in text, text
    assert status == code, text
    errors = [line for line in text.splitlines() if line.startswith("envforge: error:")]
    assert len(errors) == 1, text
    assert text.rstrip("\n").splitlines()[-1] == errors[0], text
    for name in names:
        assert str(name) in errors[0], errors[0]
    return errors[0]


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root`` (symbolic links not followed) with its kind and content."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                found[rel] = ("other", stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode))
    return found


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".envforge-") or ".tmp-" in p.name]


@contextlib.contextmanager
def tmpfs(where: Path, *, size: str = "64k", read_only: bool = False) -> Iterator[Path]:
    """A tmpfs mounted at ``where`` (skips the test where mounting is refused)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip(
            f"cannot mount a tmpfs ({mounted.stderr.strip() or mounted.returncode}): "
            "full and read-only file systems need root with CAP_SYS_ADMIN"
        )
    try:
        (where / "existing").mkdir()
        if read_only:
            subprocess.run(
                ["mount", "-o", "remount,ro", str(where)], check=True, capture_output=True
            )
        yield where
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def fill(folder: Path) -> None:
    """Write into ``folder`` until its file system is full."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        written = 1
        while written:
            try:
                written = os.write(fd, b"\0" * 4096)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                written = 0
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="No space left"):
        (folder / "probe-room").write_bytes(b"x" * 8192)


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    # Room for `render --all` of the whole catalogue (24 recipes; each Dockerfile holds
    # both the uv and the pip install commands) once the filler is removed.
    with tmpfs(tmp_path / "full", size="1m") as where:
        fill(where)
        yield where


@pytest.fixture
def ro_fs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "ro", read_only=True) as where:
        yield where


def no_dac() -> list[str]:
    """The prefix running a command as root without permission-bypassing capabilities."""
    if SETPRIV is None:
        pytest.skip("setpriv (util-linux) is missing: cannot drop root's DAC capabilities")
    if os.geteuid() != 0:
        return []  # not root: permission bits already apply
    return [SETPRIV, *DROP_DAC]


def run_as_nobody(args: Sequence[str]) -> tuple[int, str]:
    """Run the CLI in a forked child as uid/gid 65534; (exit status, stderr)."""
    if os.geteuid() != 0:
        pytest.skip("not root: cannot switch to another user")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            # another user has a state folder of their own (root's is not theirs to read)
            os.environ["ENVFORGE_HOME"] = f"/nonexistent/envforge-home-{NOBODY}"
            err = io.TextIOWrapper(io.FileIO(write, "w"), encoding="utf-8")
            sys.stderr = err
            sys.stdout = io.StringIO()
            code = cli_main(list(args))
            err.flush()
        except BaseException as exc:  # report anything to the parent
            with contextlib.suppress(Exception):
                os.write(write, f"child failed: {exc!r}\n".encode())
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A folder outside pytest's 0700 tmp tree, so that another user can reach it."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="envforge-paths-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder)


# --------------------------------------------------------------------------- render -o


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with one of everything that cannot hold an output tree."""
    w = tmp_path / "work"
    w.mkdir()
    (w / "afile").write_text("keep me\n")
    (w / "loop").symlink_to("loop")
    (w / "dangling").symlink_to("nowhere")
    os.mkfifo(w / "fifo")
    (w / "taken" / "cpu" / "Dockerfile").mkdir(parents=True)  # a folder where a file goes
    return w


WRONG_OUTPUTS = {
    "dev-null": ("/dev/null", "/dev/null"),
    "a-file": ("afile", "afile"),
    "under-a-file": ("afile/sub", "afile"),
    "symlink-loop": ("loop", "loop"),
    "under-a-symlink-loop": ("loop/sub", "loop"),
    "dangling-symlink": ("dangling", "dangling"),
    "a-fifo": ("fifo", "fifo"),
    "folder-where-the-file-goes": ("taken", "taken/cpu/Dockerfile"),
    "name-too-long": ("x" * 300, "x" * 300),
}


@pytest.mark.parametrize("case", sorted(WRONG_OUTPUTS))
def test_render_onto_a_wrong_path_is_exit_2(case: str, work: Path) -> None:
    output, named = WRONG_OUTPUTS[case]
    before = snapshot(work)
    done = envforge("render", "cpu", "-o", output, cwd=work)
    assert_one_line_error(done.returncode, done.stderr, 2, named)
    assert snapshot(work) == before
    assert done.stdout == b""


@pytest.mark.parametrize("fmt", ["dockerfile", "venv"])
def test_render_all_writes_every_file_or_none(fmt: str, work: Path) -> None:
    """The folder in the way is the cpu recipe's; every other recipe's files are refused too."""
    taken = work / "taken"
    if fmt == "venv":
        shutil.rmtree(taken / "cpu")
        (taken / "gfx1010" / "venv" / "setup.sh").mkdir(parents=True)
    before = snapshot(work)
    done = envforge("render", "--all", "--format", fmt, "-o", "taken", cwd=work)
    assert_one_line_error(done.returncode, done.stderr, 2, "is a folder, not a file")
    assert snapshot(work) == before
    assert temp_files(work) == []
    ok = envforge("render", "--all", "--format", fmt, "-o", "fresh", cwd=work)
    assert ok.returncode == 0, ok.stderr
    assert len(list((work / "fresh").iterdir())) >= 10


def test_render_onto_a_read_only_file_system_is_exit_4(ro_fs: Path) -> None:
    before = snapshot(ro_fs)
    for output in (ro_fs / "new", ro_fs / "existing"):
        done = envforge("render", "cpu", "-o", str(output), cwd=ro_fs.parent)
        line = assert_one_line_error(done.returncode, done.stderr, 4, output)
        assert "read-only" in line
    assert snapshot(ro_fs) == before


def test_render_all_onto_a_full_file_system_is_exit_4_and_leaves_nothing(full_fs: Path) -> None:
    before = snapshot(full_fs)
    done = envforge("render", "--all", "-o", str(full_fs / "out"), cwd=full_fs.parent)
    line = assert_one_line_error(done.returncode, done.stderr, 4, full_fs / "out")
    assert "no space left" in line
    assert snapshot(full_fs) == before
    # with room again, the same command writes it all
    (full_fs / "filler").unlink()
    ok = envforge("render", "--all", "-o", str(full_fs / "out"), cwd=full_fs.parent)
    assert ok.returncode == 0, ok.stderr
    assert (full_fs / "out" / "cpu" / "Dockerfile").is_file()


@pytest.mark.parametrize(("mode", "culprit"), [(0o555, "out"), (0o000, "out")])
def test_render_into_a_folder_without_permission_is_exit_4_as_another_user(
    public_dir: Path, mode: int, culprit: str
) -> None:
    control = public_dir / "open"
    control.mkdir()
    control.chmod(0o777)
    status, stderr = run_as_nobody(["render", "cpu", "-o", str(control)])
    if status != 0:
        pytest.skip(f"uid {NOBODY} cannot render into an open folder here: {stderr.strip()}")
    locked = public_dir / "locked"
    locked.mkdir()
    (locked / "old").write_text("old\n")
    locked.chmod(mode)
    status, stderr = run_as_nobody(["render", "cpu", "-o", str(locked / "out")])
    line = assert_one_line_error(status, stderr, 4, locked / culprit)
    assert "permission denied" in line
    locked.chmod(0o755)
    assert sorted(p.name for p in locked.iterdir()) == ["old"]


def test_render_into_a_folder_without_permission_is_exit_4_in_a_new_process(
    tmp_path: Path,
) -> None:
    prefix = no_dac()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        done = envforge("render", "cpu", "-o", str(locked / "out"), cwd=tmp_path, prefix=prefix)
    finally:
        locked.chmod(0o755)
    assert_one_line_error(done.returncode, done.stderr, 4, locked / "out", "permission denied")
    assert list(locked.iterdir()) == []


# --------------------------------------------------------------------------- render to a pipe


def write_recipe(folder: Path, name: str, description: str) -> Path:
    path = folder / f"{name}.yaml"
    cpu = (ROOT / "recipes" / "cpu.yaml").read_text(encoding="utf-8")
    lines = cpu.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("description:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    quoted = description.replace("\\", "\\\\").replace('"', '\\"').replace("\x1b", "\\e")
    body = [f"name: {name}", f'description: "{quoted}"'] + [
        ln for ln in lines[end:] if not ln.startswith("name:")
    ]
    path.write_text("\n".join(body) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("encoding", ["latin-1", "ascii", "utf-8"])
@pytest.mark.parametrize("fmt", ["dockerfile", "venv"])
def test_render_to_a_pipe_is_byte_for_byte_what_o_writes(
    tmp_path: Path, encoding: str, fmt: str
) -> None:
    """A description with non-ASCII text: stdout (whatever its encoding) == the -o file."""
    recipe = write_recipe(tmp_path, "words", "café — ✓ “quoted” 漢字")
    env = child_env(tmp_path / "home", {"PYTHONIOENCODING": encoding})
    piped = envforge("render", str(recipe), "--format", fmt, cwd=tmp_path, env=env)
    assert piped.returncode == 0, piped.stderr
    written = envforge("render", str(recipe), "--format", fmt, "-o", "out", cwd=tmp_path, env=env)
    assert written.returncode == 0, written.stderr
    name = "Dockerfile" if fmt == "dockerfile" else "venv/setup.sh"
    expected = (tmp_path / "out" / "words" / name).read_bytes()
    assert piped.stdout == expected
    if fmt == "dockerfile":
        assert "café — ✓ “quoted” 漢字".encode() in piped.stdout


def test_a_control_character_never_reaches_the_pipe(tmp_path: Path) -> None:
    """click.echo would strip an ANSI escape on a pipe; the loader refuses the escape
    (issue 11, class 2), so render fails alike on a pipe and with -o, writing nothing."""
    recipe = write_recipe(tmp_path, "esc", "red \x1b[31mtext\x1b[0m")
    for args in ((), ("-o", "out")):
        done = envforge("render", str(recipe), *args, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert b"control character" in done.stderr
        assert done.stdout == b""
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- probe --report


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter without torch: the probe fails fast, then writes its report."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    return venv / "bin" / "python"


def probe(
    report: Path | str, bare_python: Path, cwd: Path, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[bytes]:
    return envforge(
        "probe",
        "--level",
        "quick",
        "--python",
        str(bare_python),
        "--report",
        str(report),
        cwd=cwd,
        prefix=prefix,
    )


def test_probe_report_written_when_the_path_is_fine(bare_python: Path, tmp_path: Path) -> None:
    done = probe(tmp_path / "rep", bare_python, tmp_path)
    assert done.returncode == 1, done.stderr  # no torch: the probe fails, the report is written
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [
        "probe.json",
        "probe.junit.xml",
    ]


@pytest.mark.parametrize(
    ("report", "named"),
    [
        ("afile", "afile"),
        ("afile/sub", "afile"),
        ("loop", "loop"),
        ("dangling/sub", "dangling"),
        ("/dev/null", "/dev/null"),
        ("taken", "probe.json"),
    ],
)
def test_probe_report_onto_a_wrong_path_is_exit_2(
    bare_python: Path, work: Path, report: str, named: str
) -> None:
    (work / "taken" / "probe.json").mkdir(parents=True)  # a folder where the report goes
    before = snapshot(work)
    done = probe(report, bare_python, work)
    assert_one_line_error(done.returncode, done.stderr, 2, named)
    assert snapshot(work) == before  # both files or neither: no probe.junit.xml either


def test_probe_report_onto_read_only_and_full_file_systems_is_exit_4(
    bare_python: Path, ro_fs: Path
) -> None:
    done = probe(ro_fs / "rep", bare_python, ro_fs.parent)
    assert_one_line_error(done.returncode, done.stderr, 4, ro_fs / "rep", "read-only")


def test_probe_report_onto_a_full_file_system_is_exit_4(bare_python: Path, full_fs: Path) -> None:
    before = snapshot(full_fs)
    done = probe(full_fs / "rep", bare_python, full_fs.parent)
    assert_one_line_error(done.returncode, done.stderr, 4, full_fs / "rep", "no space left")
    assert snapshot(full_fs) == before


def test_probe_report_into_a_folder_without_permission_is_exit_4(
    bare_python: Path, tmp_path: Path
) -> None:
    prefix = no_dac()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        done = probe(locked / "rep", bare_python, tmp_path, prefix)
    finally:
        locked.chmod(0o755)
    assert_one_line_error(done.returncode, done.stderr, 4, locked / "rep", "permission denied")
    assert list(locked.iterdir()) == []


# --------------------------------------------------------------------------- ENVFORGE_HOME


@pytest.fixture
def venv_ok() -> None:
    """What ``build cpu --backend venv`` needs before it writes anything: python3.11, the wheel."""
    if not (WHEELS.is_dir() and any(WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl"))):
        pytest.skip(f"no torch 2.13.0+cpu cp311 wheel in {WHEELS} (PIP_FIND_LINKS)")
    if shutil.which("python3.11") is None:
        pytest.skip("no python3.11 on PATH")


def venv_build(
    home: Path, cwd: Path, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[bytes]:
    return envforge(
        "build",
        "cpu",
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        cwd=cwd,
        env=child_env(home, {"UV_HTTP_RETRIES": "0"}),
        prefix=prefix,
        timeout=900,
    )


@pytest.mark.parametrize(
    ("home", "named"),
    [("afile", "afile"), ("afile/sub", "afile"), ("loop", "loop"), ("dangling", "dangling")],
)
@pytest.mark.usefixtures("venv_ok")
def test_envforge_home_on_a_wrong_path_is_exit_2(work: Path, home: str, named: str) -> None:
    before = snapshot(work)
    done = venv_build(work / home, work)
    line = assert_one_line_error(done.returncode, done.stderr, 2, named)
    assert "ENVFORGE_HOME" in line
    assert snapshot(work) == before


@pytest.mark.parametrize("where", ["new", "existing"])
@pytest.mark.usefixtures("venv_ok")
def test_envforge_home_read_only_is_exit_4(ro_fs: Path, where: str) -> None:
    done = venv_build(ro_fs / where, ro_fs.parent)
    line = assert_one_line_error(done.returncode, done.stderr, 4, ro_fs / where, "read-only")
    assert "ENVFORGE_HOME" in line


@pytest.mark.usefixtures("venv_ok")
def test_envforge_home_full_is_exit_4_and_leaves_no_half_built_venv(full_fs: Path) -> None:
    done = venv_build(full_fs / "home", full_fs.parent)
    line = assert_one_line_error(done.returncode, done.stderr, 4, "no space left on device")
    assert "ENVFORGE_HOME" in line
    assert temp_files(full_fs) == []
    venvs = full_fs / "home" / "venvs" / "cpu"
    assert not venvs.exists() or list(venvs.iterdir()) == []


@pytest.mark.usefixtures("venv_ok")
def test_envforge_home_without_permission_is_exit_4(tmp_path: Path) -> None:
    prefix = no_dac()
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    try:
        done = venv_build(home, tmp_path, prefix)
    finally:
        home.chmod(0o755)
    line = assert_one_line_error(done.returncode, done.stderr, 4, home, "permission denied")
    assert "ENVFORGE_HOME" in line
    assert list(home.iterdir()) == []


# --------------------------------------------------------------------------- lock -o


@pytest.fixture
def lock_ok() -> None:
    if not (WHEELS.is_dir() and any(WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl"))):
        pytest.skip(f"no torch 2.13.0+cpu cp311 wheel in {WHEELS} (PIP_FIND_LINKS)")


@pytest.mark.usefixtures("lock_ok")
@pytest.mark.parametrize(
    ("output", "code", "named"),
    [
        ("afile/cpu.lock.txt", 2, "afile"),
        ("taken", 2, "taken"),
        ("loop/cpu.lock.txt", 2, "loop"),
    ],
)
def test_lock_onto_a_wrong_path_is_exit_2(work: Path, output: str, code: int, named: str) -> None:
    before = snapshot(work)
    done = envforge("lock", "cpu", "--wheelhouse", str(WHEELS), "-o", output, cwd=work)
    assert_one_line_error(done.returncode, done.stderr, code, named)
    assert snapshot(work) == before


@pytest.mark.usefixtures("lock_ok")
def test_lock_onto_a_read_only_file_system_is_exit_4(ro_fs: Path) -> None:
    target = ro_fs / "existing" / "cpu.lock.txt"
    done = envforge("lock", "cpu", "--wheelhouse", str(WHEELS), "-o", str(target), cwd=ro_fs.parent)
    assert_one_line_error(done.returncode, done.stderr, 4, target, "read-only")


# --------------------------------------------------------------------------- lock files


@pytest.mark.usefixtures("venv_ok")
@pytest.mark.parametrize(
    "line",
    [
        "--extra-index-url https://elsewhere.invalid/simple",
        "-i https://elsewhere.invalid/simple",
        "--index-url=https://elsewhere.invalid/simple",
        "-f https://elsewhere.invalid/wheels/",
    ],
)
def test_a_lock_with_an_index_option_is_refused_before_any_install(
    tmp_path: Path, line: str
) -> None:
    from envforge import lock
    from envforge.recipe.catalogue import Catalogue

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    shutil.copyfile(ROOT / "recipes" / "cpu.yaml", recipes / "cpu.yaml")
    recipe = Catalogue.default().load(str(recipes / "cpu.yaml"))
    hashes = "    --hash=sha256:" + "ab" * 32
    (recipes / "cpu.lock.txt").write_text(
        f"# envforge-lock: recipe=cpu inputs={lock.inputs_digest(recipe)} python=3.11\n"
        f"torch==2.13.0+cpu \\\n{hashes}\n{line}\n"
    )
    done = envforge(
        "build",
        str(recipes / "cpu.yaml"),
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        cwd=tmp_path,
        timeout=300,
    )
    option = line.split(maxsplit=1)[0].split("=", maxsplit=1)[0]
    assert_one_line_error(
        done.returncode, done.stderr, 2, f"{recipes / 'cpu.lock.txt'}:4: option {option}"
    )
    assert not (tmp_path / "home" / "venvs").exists()
