"""The venv backend's files on disk: RECORD checks, folders built aside.

What a certificate is bound to (every file of the venv, by content, with a memo keyed by
``lstat`` data and ctime) is :mod:`envforge.backends.venvscan`; its names are re-exported
here. :func:`verify_records` checks each file a RECORD lists against its RECORD hash
(after an install, where uv's cache could hold a modified copy).

Folders built aside
===================
A rebuild happens in ``.<name>.tmp-<owner>-XXXX`` beside the venv and is swapped in only
after its probe passed (:func:`swap_dirs`: one ``renameat2(RENAME_EXCHANGE)`` where the
kernel and file system have it, so the venv's path never stops existing; else two
renames). ``<owner>`` is ``<pid>.<start time in clock ticks>`` of the envforge that made
it, so :func:`sweep_leftovers` can remove what an envforge killed by SIGKILL/SIGTERM left
(its owner is gone) and never what a running build is using.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import errno
import hashlib
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from envforge.backends.venvscan import (
    RECORD_MAX,
    VENV_KEY,
    RecordEntry,
    content_digests,
    describe_changes,
    dist_label,
    distributions,
    parse_record,
    read_record,
    record_form,
    record_paths,
    site_packages,
)

__all__ = [
    "RECORD_MAX",
    "VENV_KEY",
    "RecordEntry",
    "content_digests",
    "describe_changes",
    "dist_label",
    "distributions",
    "parse_record",
    "record_paths",
    "site_packages",
]

#: Leftovers whose name names no owner (older envforge) are swept after this many seconds.
UNOWNED_MAX_AGE = 24 * 3600.0
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<rest>.+)$")
_OWNER = re.compile(r"^(?P<pid>\d+)\.(?P<start>\d+)-")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def _actual(path: Path, rel: str, hashes: Mapping[str, str] | None) -> str | None:
    """A file's sha256 as RECORD writes it: from ``hashes`` (venv-relative path -> hex,
    e.g. a :class:`~envforge.backends.venvscan.Scan` just taken), else read; None when
    it is not there."""
    known = hashes.get(rel) if hashes is not None else None
    if known is not None:
        return None if known == "missing" else record_form(known)
    try:
        return _file_sha256(path)
    except OSError:
        return None


def verify_records(
    venv: Path, only: Iterable[str] | None = None, hashes: Mapping[str, str] | None = None
) -> list[str]:
    """The full check: every file a RECORD lists with a hash, against that hash.

    Returns one ``"<dist>: <path> <what>"`` per problem (missing, modified); empty when
    everything matches. ``only``: dist-info names to check (default: all); ``hashes``:
    the files' sha256 already known (venv-relative path -> hex), not read again.
    """
    wanted = set(only) if only is not None else None
    problems: list[str] = []
    for sp, dist in distributions(venv):
        if wanted is not None and dist.name not in wanted:
            continue
        entries = read_record(dist)
        if entries is None:
            problems.append(f"{dist_label(dist.name)}: RECORD unreadable")
            continue
        base = sp.relative_to(venv).as_posix()
        for entry in entries:
            if entry.sha256 is None:
                continue
            rel = os.path.normpath(f"{base}/{entry.path}")
            actual = _actual(sp / entry.path, rel, hashes)
            if actual is None:
                problems.append(f"{dist_label(dist.name)}: {entry.path} missing")
            elif actual != entry.sha256:
                problems.append(f"{dist_label(dist.name)}: {entry.path} modified")
    return problems


# --------------------------------------------------------------------------- owners


def start_time(pid: int) -> int:
    """The process's start time in clock ticks after boot (0 where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError:
        return 0
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


def owner_tag(pid: int | None = None) -> str:
    """``<pid>.<start time>`` naming this process (or ``pid``) uniquely while it runs."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{start_time(pid)}"


def owner_alive(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` (0: unknown) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    if start == 0:
        return True
    now = start_time(pid)
    return now in (0, start)


def is_stale(name: str, age: float, alive: Callable[[int, int], bool] = owner_alive) -> bool:
    """Whether a folder called ``name`` (``.<venv>.tmp-…`` / ``.<venv>.old-…``) is a
    leftover of an envforge that is gone; one whose name names no owner (older envforge)
    is stale after :data:`UNOWNED_MAX_AGE`."""
    found = _LEFTOVER.match(name)
    if found is None:
        return False
    owner = _OWNER.match(found.group("rest"))
    if owner is None:
        return age > UNOWNED_MAX_AGE
    return not alive(int(owner.group("pid")), int(owner.group("start")))


def sweep_leftovers(parent: Path) -> list[Path]:
    """Remove the ``.<venv>.tmp-*`` / ``.<venv>.old-*`` folders in ``parent`` whose envforge
    is gone; the folders removed. Best effort: what cannot be removed stays."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith("."):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        if is_stale(entry.name, now - info.st_mtime):
            path = Path(entry.path)
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(path)
    return removed


def aside_prefix(target: Path, kind: str = "tmp") -> str:
    """The name prefix of a folder built aside of ``target``: ``.<name>.tmp-<owner>-``."""
    return f".{target.name}.{kind}-{owner_tag()}-"


# --------------------------------------------------------------------------- swap

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2() -> Callable[..., int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where
    the kernel, C library or file system cannot (nothing was changed then)."""
    func = _renameat2()
    if func is None:
        return False
    rc = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_dirs(new: Path, target: Path) -> Path | None:
    """Put ``new`` at ``target``. Returns where the previous ``target`` now is (to be
    removed by the caller), or None when there was none.

    With an existing ``target`` the two are exchanged atomically where possible (the old
    one ends at ``new``'s name); else ``target`` is renamed aside (``.<name>.old-<owner>-…``)
    first and put back if the second rename fails.
    """
    if not os.path.lexists(target):
        os.rename(new, target)
        return None
    if not os.path.isdir(target):
        # a device, FIFO or file: never swapped away (the caller removes what it gets back)
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target))
    if exchange(new, target):
        return new
    old = target.with_name(f"{aside_prefix(target, 'old')}{os.urandom(4).hex()}")
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    return old
