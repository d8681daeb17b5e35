"""Files: writing so that a failure leaves nothing half-written, reading bounded."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    The folder is created when missing. ``mode`` is applied before the rename (mkstemp
    alone would leave 0600). Newlines are written as given.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".envforge-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class NotRegularFile(OSError):
    """A path that is a FIFO, socket or device where a regular file was expected."""


class FileTooLarge(OSError):
    """A file larger than the caller's limit."""

    def __init__(self, path: Path, size: int | None, limit: int) -> None:
        super().__init__(f"{path}: more than {limit} bytes")
        self.size = size
        self.limit = limit


def read_limited(path: Path, max_bytes: int) -> bytes:
    """Read a regular file of at most ``max_bytes`` without ever blocking.

    The file is opened with ``O_NONBLOCK`` (so a FIFO with no writer does not hang the
    open) and checked with ``fstat`` before any read: a directory raises
    :class:`IsADirectoryError`, a FIFO, socket or device :class:`NotRegularFile`, and a
    file larger than ``max_bytes`` (by its size, or by what a pseudo-file that reports
    size 0 yields) :class:`FileTooLarge`. Other errors are the usual :class:`OSError`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > max_bytes:
            raise FileTooLarge(path, info.st_size, max_bytes)
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise FileTooLarge(path, None, max_bytes)
    return data
