"""Writing files so that a failure leaves nothing half-written."""

from __future__ import annotations

import os
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
