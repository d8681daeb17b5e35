"""fsutil: the one OSError -> EnvforgeError mapping, and writes that are all or nothing."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.core import fsutil
from envforge.errors import BadPath, EnvforgeError, ExitCode, StorageUnavailable

ENVIRONMENT = [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO]
WRONG_PATH = [errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EEXIST, errno.ENAMETOOLONG]


def oserror(code: int, filename: str) -> OSError:
    return OSError(code, os.strerror(code), filename)


@pytest.mark.parametrize("code", ENVIRONMENT, ids=errno.errorcode.get)
def test_environment_errnos_are_exit_4(code: int, tmp_path: Path) -> None:
    target = tmp_path / "out" / "Dockerfile"
    error = fsutil.os_error(oserror(code, str(target)), target, setting="-o")
    assert isinstance(error, StorageUnavailable)
    assert error.exit_code is ExitCode.UNAVAILABLE
    assert int(error.exit_code) == 4
    line = error.one_line()
    assert "\n" not in line
    assert str(target) in line
    assert "-o" in line


@pytest.mark.parametrize("code", WRONG_PATH, ids=errno.errorcode.get)
def test_wrong_path_errnos_are_exit_2(code: int, tmp_path: Path) -> None:
    target = tmp_path / "out" / "Dockerfile"
    error = fsutil.os_error(oserror(code, str(target)), target, setting="-o")
    assert isinstance(error, BadPath)
    assert error.exit_code is ExitCode.INVALID_INPUT
    assert int(error.exit_code) == 2
    assert "\n" not in error.one_line()
    assert str(target) in error.one_line()


def test_the_reason_names_what_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    target = tmp_path / "afile" / "cpu" / "Dockerfile"
    error = fsutil.os_error(oserror(errno.ENOTDIR, str(target.parent)), target)
    assert f"{tmp_path / 'afile'} is a file, not a folder" in error.message


def test_a_path_in_envforge_home_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    target = tmp_path / "home" / "certificates" / "x.json"
    error = fsutil.os_error(oserror(errno.EROFS, str(target)), target)
    assert "set ENVFORGE_HOME to another folder" in error.one_line()
    elsewhere = fsutil.os_error(oserror(errno.EROFS, str(tmp_path)), tmp_path / "x")
    assert "ENVFORGE_HOME" not in elsewhere.one_line()


def test_an_error_without_a_path_still_reads_as_one_line() -> None:
    error = fsutil.os_error(OSError(errno.EIO, "I/O error"), verb="use")
    assert error.one_line().startswith("cannot use a file: I/O error")


def test_describe_and_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dangling").symlink_to("nowhere")
    os.mkfifo(tmp_path / "fifo")
    assert fsutil.describe(tmp_path / "f") == "a file"
    assert fsutil.describe(tmp_path) == "a folder"
    assert fsutil.describe(tmp_path / "loop") == "a symbolic link that loops"
    assert fsutil.describe(tmp_path / "dangling") == "a symbolic link to nothing"
    assert fsutil.describe(tmp_path / "fifo") == "a FIFO"
    assert fsutil.describe("/dev/null") == "a character device"
    assert fsutil.in_the_way(tmp_path / "f" / "a" / "b") == tmp_path / "f"
    assert fsutil.in_the_way(tmp_path / "loop" / "a") == tmp_path / "loop"
    assert fsutil.in_the_way(tmp_path / "dangling" / "a") == tmp_path / "dangling"
    assert fsutil.in_the_way(tmp_path / "new" / "a") is None


def test_writing_maps_os_errors(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(BadPath, match="is a file, not a folder"), fsutil.writing(tmp_path):
        (tmp_path / "f" / "x").mkdir()


def test_make_dirs_returns_what_it_created(tmp_path: Path) -> None:
    assert fsutil.make_dirs(tmp_path / "a" / "b") == [tmp_path / "a", tmp_path / "a" / "b"]
    assert fsutil.make_dirs(tmp_path / "a" / "b") == []
    (tmp_path / "f").write_text("")
    with pytest.raises(BadPath):
        fsutil.make_dirs(tmp_path / "f" / "x")


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_write_files_writes_all_with_modes_and_exact_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "x" / "a.sh", tmp_path / "y" / "z" / "b.txt"
    fsutil.write_files([(a, "#!/bin/sh\r\n\x1b[1m\n", 0o755), (b, "é—\n", 0o644)])
    assert a.read_bytes() == b"#!/bin/sh\r\n\x1b[1m\n"
    assert b.read_bytes() == "é—\n".encode()
    assert a.stat().st_mode & 0o777 == 0o755
    assert b.stat().st_mode & 0o777 == 0o644
    assert leftovers(tmp_path) == ["x", "x/a.sh", "y", "y/z", "y/z/b.txt"]


def test_write_files_replaces_existing_files_and_leaves_no_backup(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_text("old")
    fsutil.write_atomically(a, "new")
    assert a.read_text() == "new"
    assert leftovers(tmp_path) == ["a"]


def test_one_refused_file_leaves_nothing_written(tmp_path: Path) -> None:
    keep = tmp_path / "out" / "keep"
    keep.parent.mkdir()
    keep.write_text("old")
    (tmp_path / "out" / "c" / "Dockerfile").mkdir(parents=True)  # a folder where a file goes
    before = leftovers(tmp_path)
    with pytest.raises(BadPath, match="is a folder, not a file"):
        fsutil.write_files(
            [
                (tmp_path / "out" / "a" / "Dockerfile", "a", 0o644),
                (keep, "new", 0o644),
                (tmp_path / "out" / "c" / "Dockerfile", "c", 0o644),
            ]
        )
    assert leftovers(tmp_path) == before
    assert keep.read_text() == "old"


def test_a_failed_rename_puts_back_what_was_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("old a")
    real_replace = os.replace
    calls: list[str] = []

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append(str(dst))
        if Path(dst) == b:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StorageUnavailable, match="no space left"):
        fsutil.write_files([(a, "new a", 0o644), (b, "new b", 0o644)])
    assert str(b) in calls
    assert a.read_text() == "old a"
    assert leftovers(tmp_path) == ["a"]


def test_ctrl_c_while_writing_leaves_nothing_and_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_stage = fsutil._stage
    staged: list[Path] = []

    def interrupted_stage(path: Path, data: bytes, mode: int) -> Path:
        if staged:
            raise KeyboardInterrupt
        staged.append(real_stage(path, data, mode))
        return staged[-1]

    monkeypatch.setattr(fsutil, "_stage", interrupted_stage)
    with pytest.raises(KeyboardInterrupt):
        fsutil.write_files([(tmp_path / "d" / "a", "a", 0o644), (tmp_path / "e" / "b", "b", 0o644)])
    assert staged
    assert leftovers(tmp_path) == []


def test_error_classes_are_envforge_errors() -> None:
    assert issubclass(BadPath, EnvforgeError)
    assert issubclass(StorageUnavailable, EnvforgeError)


def test_an_unmapped_os_error_in_a_command_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's last resort: an OSError no write site mapped still gets fsutil's mapping."""
    from envforge.cli import main
    from envforge.render.formats import dockerfile

    def refused(*_args: object, **_kwargs: object) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", "/somewhere/x")

    monkeypatch.setattr(dockerfile, "render_dockerfile", refused)
    assert main(["render", "cpu"]) == 4
    err = capsys.readouterr().err
    assert err == (
        "envforge: error: cannot use /somewhere/x: permission denied"
        " (fix: give this user access there, or choose another path)\n"
    )


def test_render_o_onto_a_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envforge.cli import main

    (tmp_path / "f").write_text("keep")
    assert main(["render", "cpu", "-o", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"envforge: error: cannot write {tmp_path / 'f' / 'cpu' / 'Dockerfile'}")
    assert leftovers(tmp_path) == ["f"]


# --------------------------------------------------------------------------- special files
# (issue 22 class 3; the real CLI against device nodes:
# tests/acceptance/test_special_file_outputs.py)


def _special(tmp_path: Path, kind: str) -> Path:
    import socket
    import stat as st

    path = tmp_path / f"target-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-fifo":
        os.mkfifo(tmp_path / "fifo")
        os.symlink(tmp_path / "fifo", path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        short = Path(f"/tmp/efs-{os.getpid()}.sock")
        short.unlink(missing_ok=True)
        sock.bind(str(short))
        sock.close()
        os.symlink(short, path)  # a link to a socket (the path must be short)
    elif kind == "char-device":
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(path, st.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


SPECIAL = ["fifo", "link-to-fifo", "socket", "char-device"]


@pytest.mark.parametrize("kind", SPECIAL)
def test_every_writer_refuses_a_special_file_and_leaves_it(tmp_path: Path, kind: str) -> None:
    path = _special(tmp_path, kind)
    before = os.stat(path)
    writers: list[Callable[[], None]] = [
        lambda: fsutil.write_atomically(path, "x", setting="-o"),
        lambda: fsutil.write_files([(tmp_path / "fine", "y", 0o644), (path, "x", 0o644)]),
        lambda: fsutil.append_text(path, "x", setting="--summary"),
        lambda: fsutil.check_file_target(path, setting="-o"),
        lambda: fsutil.check_folder_target(tmp_path, files=[path.name]),
    ]
    for write in writers:
        with pytest.raises(BadPath, match="not a regular file") as info:
            write()
        assert info.value.exit_code is ExitCode.INVALID_INPUT
        assert str(path) in info.value.one_line()
    after = os.stat(path)
    assert (after.st_mode, after.st_rdev, after.st_ino) == (
        before.st_mode,
        before.st_rdev,
        before.st_ino,
    )
    assert not (tmp_path / "fine").exists()  # all or none
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(fsutil.TMP_PREFIX)]


def test_regular_files_and_links_to_them_are_still_written(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("old")
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for name in ("real", "link", "dangling", "new"):
        fsutil.write_atomically(tmp_path / name, "new")
        assert (tmp_path / name).read_text() == "new"
    fsutil.append_text(tmp_path / "real", "+")
    assert (tmp_path / "real").read_text() == "new+"


def test_a_folder_that_refuses_new_entries_is_the_environment() -> None:
    with pytest.raises(StorageUnavailable, match="refuses to create /proc/envforge-x"):
        fsutil.write_atomically(Path("/proc/envforge-x/out.txt"), "x", setting="-o")
