"""Bytes on disk: files counted by the blocks they occupy (as ``du``), each inode once."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def file_blocks(root: Path) -> dict[tuple[int, int], int]:
    """(device, inode) → bytes on disk of every regular file and folder at or below
    ``root`` (links not followed; what ``du`` counts); empty when ``root`` is not there."""
    found: dict[tuple[int, int], int] = {}
    try:
        top = root.stat()
    except OSError:
        return found
    if stat.S_ISREG(top.st_mode):
        return {(top.st_dev, top.st_ino): top.st_blocks * 512}
    found[(top.st_dev, top.st_ino)] = top.st_blocks * 512
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                stack.append(entry.path)
            if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
                found[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    return found


def folder_bytes(root: Path) -> int:
    return sum(file_blocks(root).values())


def human(n: int) -> str:
    """``812 MiB``, ``3.3 GiB``, ``0 B``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit in ("B", "KiB", "MiB") else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # unreachable: GiB is the last unit above
