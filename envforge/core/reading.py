"""Bounded, non-blocking reads of regular files: the light half of
:mod:`envforge.core.fsutil`, which re-exports it.

Kept apart so that a command that only reads (``envforge list`` and its listing cache)
does not import what writing needs (``tempfile``, ``shutil`` and the compressors).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


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
