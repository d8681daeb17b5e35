"""Files: writing so that a failure leaves nothing half-written, reading bounded, and the
one place where an ``OSError`` from a write becomes an :class:`~envforge.errors.EnvforgeError`.

Every file envforge writes for the user (renders, reports, certificates, locks, marker
files in ``$ENVFORGE_HOME``) goes through :func:`write_files` / :func:`write_atomically`;
folders and temporary folders through :func:`make_dirs` / :func:`make_temp_dir`; other
blocks can run inside :func:`writing`; :func:`check_folder_target` and
:func:`check_file_target` refuse a wrong path before any work. What none of them covers
(scratch files in temporary folders) is still mapped by the CLI's last resort
(``envforge.cli.main``). So a file system that refuses a write gives one line and the
right exit code (:func:`os_error`):

* exit 2 (:class:`BadPath`, the path is wrong): a file, device or dangling/looping
  symbolic link where a folder must go (``ENOTDIR``, ``EEXIST``, ``ELOOP``), a folder where
  a file must go (``EISDIR``), a name too long (``ENAMETOOLONG``), a folder that vanished;
* exit 4 (:class:`StorageUnavailable`, the environment): a full file system or quota
  (``ENOSPC``, ``EDQUOT``), a read-only one (``EROFS``), no permission (``EACCES``,
  ``EPERM``), and any other errno.

:func:`write_files` writes a set of files all or none: every file goes to a temporary file
beside its target first; only when all are written are they renamed into place, and a
failure (or Ctrl-C) removes the temporary files, puts back what was replaced and removes
the folders it created.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar, Union

from envforge.core.paths import state_dir
from envforge.core.reading import FileTooLarge, NotRegularFile, read_limited
from envforge.errors import BadPath, EnvforgeError, StorageUnavailable

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")

__all__ = [  # the reading half lives in envforge.core.reading (light to import)
    "PATH_ERRNOS",
    "REPORT_FILES",
    "TMP_PREFIX",
    "FileTooLarge",
    "NotRegularFile",
    "PathLike",
    "append_text",
    "check_file_target",
    "check_folder_target",
    "describe",
    "in_the_way",
    "make_dirs",
    "make_temp_dir",
    "os_error",
    "read_limited",
    "read_reason",
    "refuse_special_file",
    "write_atomically",
    "write_files",
    "writing",
]

#: errno values that mean "the path is wrong" (exit 2); every other one is exit 4.
PATH_ERRNOS = frozenset(
    {
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ELOOP,
        errno.EEXIST,
        errno.ENAMETOOLONG,
        errno.ENOENT,
        errno.ENXIO,
        errno.ENODEV,
        errno.ENOTEMPTY,
    }
)
_REASONS = {
    errno.ENOSPC: "no space left on the file system",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENAMETOOLONG: "a name in it is too long for the file system",
}
TMP_PREFIX = ".envforge-"


def describe(path: PathLike) -> str:
    """What is at ``path``: ``a file``, ``a folder``, ``a symbolic link that loops``, …"""
    try:
        st = os.lstat(path)
    except OSError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "a symbolic link that loops"
            return "a symbolic link to nothing"
        return "a symbolic link to " + describe(os.path.realpath(path))
    for test, what in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(st.st_mode):
            return what
    return "not a folder"


def in_the_way(path: PathLike) -> Path | None:
    """The first component of ``path`` (``path`` itself included) that exists but cannot be
    entered as a folder: a file, a device, a dangling or looping symbolic link."""
    p = Path(path)
    for prefix in [*reversed(p.parents), p]:
        if str(prefix) == ".":
            continue
        try:
            st = os.stat(prefix)
        except OSError as exc:
            # missing: nothing further can be in the way; dangling or looping link: it is
            if exc.errno in (errno.ENOENT, errno.ELOOP) and os.path.lexists(prefix):
                return prefix
            return None
        if not stat.S_ISDIR(st.st_mode):
            return prefix
    return None


def _setting_for(path: Path) -> str | None:
    """``ENVFORGE_HOME`` when ``path`` lies in envforge's state folder, else None."""
    home = os.path.abspath(state_dir())
    mine = os.path.abspath(path)
    if mine != home and not mine.startswith(home.rstrip(os.sep) + os.sep):
        return None
    return "ENVFORGE_HOME"


def os_error(
    exc: OSError,
    path: PathLike | None = None,
    *,
    setting: str | None = None,
    verb: str = "write",
) -> EnvforgeError:
    """The one-line error for ``exc``, met while writing (``verb``) ``path``.

    ``setting`` names what the user can change to write elsewhere (``-o``, ``--report``);
    for a path inside the state folder it is ``ENVFORGE_HOME`` unless given.
    """
    known = path if path is not None else exc.filename
    target = Path(known) if known else Path("?")
    culprit = Path(exc.filename) if exc.filename else target
    subject = f"cannot {verb} {target}" if known else f"cannot {verb} a file"
    where = setting or (_setting_for(target) if known else None)
    elsewhere = _elsewhere(where)
    code = exc.errno
    if code == errno.ENOENT and culprit.parent.is_dir() and in_the_way(culprit) is None:
        # a folder that exists refuses to hold a new entry (/proc, /sys): the environment
        reason = f"the file system refuses to create {culprit}"
        message = f"{subject}: {reason}{_state_note(where)}"
        return StorageUnavailable(message, path=str(target), hint=f"{elsewhere}")
    if code in PATH_ERRNOS:
        if code == errno.EISDIR:
            thing = culprit if describe(culprit) == "a folder" else target
            reason = f"{thing} is a folder, not a file"
            fix = f"remove or rename that folder, or {elsewhere}"
        elif code == errno.ENAMETOOLONG:
            reason = _REASONS[code]
            fix = f"use shorter names, or {elsewhere}"
        elif code == errno.ENOENT and in_the_way(culprit) is None:
            reason = f"{culprit} does not exist"
            fix = "run the command again" if verb == "write" else "check the path"
        else:
            blocker = in_the_way(culprit) or in_the_way(target) or culprit
            reason = f"{blocker} is {describe(blocker)}, not a folder"
            fix = f"remove or rename {blocker}, or {elsewhere}"
        return BadPath(f"{subject}: {reason}{_state_note(where)}", path=str(target), hint=fix)
    reason = _REASONS.get(code or 0) or (exc.strerror or str(exc))
    if code in (errno.EACCES, errno.EPERM) and culprit != target:
        reason += f" on {culprit}"
    if code in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space there, or {elsewhere}"
    elif code == errno.EROFS:
        fix = f"{elsewhere}, to a writable file system"
    elif code in (errno.EACCES, errno.EPERM):
        access = "write access" if verb == "write" else "access"
        fix = f"give this user {access} there, or {elsewhere}"
    else:
        fix = f"check the file system, or {elsewhere}"
    message = f"{subject}: {reason}{_state_note(where)}"
    return StorageUnavailable(message, path=str(target), hint=fix)


def _state_note(where: str | None) -> str:
    if where != "ENVFORGE_HOME":
        return ""
    return f" (envforge's state folder, ENVFORGE_HOME={state_dir()})"


def _elsewhere(where: str | None) -> str:
    if where == "ENVFORGE_HOME":
        return "set ENVFORGE_HOME to another folder"
    return f"point {where} elsewhere" if where else "choose another path"


def refuse_special_file(
    path: PathLike, *, setting: str | None = None, shown: PathLike | None = None
) -> None:
    """The one check every file output makes: ``path`` must be absent or a regular file
    (a symbolic link to one, or to nothing, is replaced like a file). A character or
    block device, a FIFO, a socket, or a symbolic link to one of them is refused with
    :class:`BadPath` (exit 2, one line): writing there would block on a FIFO, and renaming
    a file over it would destroy the device node (as root, ``-o /dev/null``). ``shown``:
    the path to name instead of ``path`` (where it was moved from)."""
    try:
        st = os.stat(path)  # follows a link: what would be written to
    except OSError:
        return  # absent, a dangling link or a loop: the write itself says what is wrong
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return  # a folder is refused by the callers' own EISDIR check, with its own words
    target = Path(shown if shown is not None else path)
    where = setting or _setting_for(target)
    raise BadPath(
        f"cannot write {target}: it is {describe(path)}, not a regular file{_state_note(where)}",
        path=str(target),
        hint=f"write to a regular file: {_elsewhere(where)}",
    )


def _replaceable(moved: Path) -> bool:
    """Whether an entry moved aside may be replaced: a regular file, or a symbolic link
    (the link itself moved, not what it points to)."""
    try:
        mode = os.lstat(moved).st_mode
    except OSError:
        return True
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def check_file_target(path: PathLike, *, setting: str | None = None) -> None:
    """Refuse, before any work is done, a file target that cannot be written: a folder
    there, a device, FIFO or socket there (:func:`refuse_special_file`), or a file,
    device or broken link where one of its folders must go."""
    target = Path(path)
    refuse_special_file(target, setting=setting)
    if os.path.isdir(target):
        folder = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
        raise os_error(folder, target, setting=setting)
    blocker = in_the_way(target.parent)
    if blocker is not None:
        in_way = NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(blocker))
        raise os_error(in_way, target, setting=setting)


#: The files ``--report DIR`` writes (probe, build and certify; both backends).
REPORT_FILES = (
    "probe.json",
    "probe.signed.json",
    "probe.junit.xml",
    "certificate.json",
    "certified.json",
)


def check_folder_target(
    path: PathLike, *, setting: str | None = None, files: Iterable[str] = ()
) -> None:
    """Refuse, before any work is done, a folder to write into that cannot be one: a file,
    device or broken link at ``path`` or where one of its parents must go; and a device,
    FIFO or socket where one of ``files`` (names in it) is to be written."""
    blocker = in_the_way(path)
    if blocker is not None:
        in_way = NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(blocker))
        raise os_error(in_way, path, setting=setting)
    for name in files:
        refuse_special_file(Path(path) / name, setting=setting)


@contextmanager
def writing(path: PathLike, *, setting: str | None = None) -> Iterator[None]:
    """Run a block that writes ``path``: an ``OSError`` becomes :func:`os_error`."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, path, setting=setting) from exc


def _make_parents(folder: Path, created: list[Path]) -> None:
    """mkdir -p ``folder``; appends each folder it creates to ``created`` (outermost first)."""
    missing: list[Path] = []
    p = folder
    while not os.path.isdir(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue
        created.append(d)


def make_dirs(folder: PathLike, *, setting: str | None = None) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created. Errors as :func:`os_error`."""
    created: list[Path] = []
    with writing(folder, setting=setting):
        _make_parents(Path(folder), created)
    return created


#: Tries at a free random name before the last ``FileExistsError`` is raised (as tempfile).
_NAME_TRIES = 100
#: How :func:`_stage` opens its file (``tempfile.mkstemp``'s flags): new, never followed.
_STAGE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _new_name(
    folder: PathLike, prefix: str, suffix: str, make: Callable[[str], T]
) -> tuple[str, T]:
    """``make(path)`` for a new random name ``folder/prefix<12 hex digits>suffix`` (the
    name and what ``make`` returned), like
    ``tempfile``'s ``mkstemp``/``mkdtemp`` (which cost more to import than a light command
    spends writing): a name taken is tried again with another."""
    for _ in range(_NAME_TRIES - 1):
        name = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
        with suppress(FileExistsError):
            return name, make(name)
    name = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
    return name, make(name)  # the last try: its FileExistsError is the caller's


def make_temp_dir(prefix: str, folder: PathLike, *, setting: str | None = None) -> Path:
    """A new private folder (mode 0700) in ``folder``, as ``tempfile.mkdtemp``; errors as
    :func:`os_error`."""
    with writing(folder, setting=setting):
        name, _ = _new_name(folder, prefix, "", lambda p: os.mkdir(p, 0o700))
        return Path(os.path.abspath(name))


def _stage(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a temporary file beside ``path`` (synced, with ``mode``)."""
    tmp, fd = _new_name(path.parent, TMP_PREFIX, ".tmp", lambda p: os.open(p, _STAGE_FLAGS, 0o600))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            try:
                os.fsync(fh.fileno())  # a full disk can show only here (delayed allocation)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):  # no fsync here
                    raise
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _put_in_place(
    tmp: Path, path: Path, moved: list[tuple[Path, Path | None]], setting: str | None
) -> None:
    """Rename ``tmp`` to ``path``, what was there moved aside first (recorded in ``moved``
    for :func:`write_files` to put back). What was moved aside is checked again: a device,
    FIFO or folder that took the file's place since :func:`refuse_special_file` is put
    back, never replaced."""
    backup: Path | None = None
    if os.path.lexists(path):
        backup = path.with_name(f"{TMP_PREFIX}{os.urandom(6).hex()}.old")
        os.rename(path, backup)
    moved.append((path, backup))
    if backup is not None and not _replaceable(backup):
        refuse_special_file(backup, setting=setting, shown=path)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    os.replace(tmp, path)


def write_files(
    files: Iterable[tuple[Path, str | bytes, int]], *, setting: str | None = None
) -> None:
    """Write every ``(path, text, mode)`` or none of them.

    Text is written as UTF-8, newlines as given. Missing folders are created. A target
    that is a device, FIFO or socket (or a link to one) is refused before anything is
    written (:func:`refuse_special_file`). On any
    failure (an ``OSError`` becomes :func:`os_error`; Ctrl-C propagates) the temporary
    files are removed, replaced files are put back and created folders are removed.
    """
    created: list[Path] = []
    staged: list[tuple[Path, Path]] = []  # (temporary file, target)
    moved: list[tuple[Path, Path | None]] = []  # (target, the old file moved aside)
    current = Path(".")
    files = list(files)
    for path, _text, _mode in files:
        refuse_special_file(path, setting=setting)
    try:
        for path, text, mode in files:
            current = path
            data = text.encode("utf-8") if isinstance(text, str) else text
            _make_parents(path.parent, created)
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            staged.append((_stage(path, data, mode), path))
        for tmp, path in staged:
            current = path
            _put_in_place(tmp, path, moved, setting)
    except BaseException as exc:
        for path, backup in reversed(moved):
            try:
                if backup is not None:
                    os.replace(backup, path)
                else:
                    path.unlink(missing_ok=True)
            except OSError:
                pass
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for folder in reversed(created):
            with suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):
            raise os_error(exc, current, setting=setting) from exc
        raise
    for _, backup in moved:
        if backup is not None:
            with suppress(OSError):
                backup.unlink()


def append_text(path: Path, text: str, *, setting: str | None = None) -> None:
    """Append ``text`` to ``path`` (created when missing), a regular file only
    (:func:`refuse_special_file`); errors as :func:`os_error`."""
    refuse_special_file(path, setting=setting)
    with writing(path, setting=setting):
        fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644
        )
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # it changed since the check
                refuse_special_file(path, setting=setting)
            view = memoryview(text.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def write_atomically(
    path: Path, text: str | bytes, *, mode: int = 0o644, setting: str | None = None
) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    The folder is created when missing. ``mode`` is applied before the rename (mkstemp
    alone would leave 0600). Newlines are written as given. A failure leaves ``path`` as
    it was and raises :func:`os_error`'s error.
    """
    write_files([(path, text, mode)], setting=setting)


# --------------------------------------------------------------------------- reading


def read_reason(exc: OSError, path: PathLike | None = None) -> str:
    """Why a read (:func:`read_limited`) failed, in words for a one-line error: ``it is a
    FIFO, not a regular file``, ``larger than 1048576 bytes``, ``no such file``, …"""
    if isinstance(exc, NotRegularFile):
        what = describe(path if path is not None else exc.filename or "?")
        return f"it is {what}, not a regular file"
    if isinstance(exc, FileTooLarge):
        return f"larger than {exc.limit} bytes"
    if isinstance(exc, IsADirectoryError):
        return "it is a folder, not a file"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    return exc.strerror or type(exc).__name__
