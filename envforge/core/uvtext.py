"""Reading a failed uv run's stderr: an index out of reach, a full or forbidden disk."""

from __future__ import annotations

import errno
import re

_OS_ERROR_RE = re.compile(r"\(os error (\d+)\)")
#: Failures of the file system, not of the build: exit 4 like envforge's own writes.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
#: uv's words for "could not talk to the index" (its generic "Failed to fetch" /
#: "Failed to download" wrap hash mismatches too, so they are not enough on their own).
_NETWORK_MARKERS = (
    "error sending request",
    "dns error",
    "connection refused",
    "could not connect",
    "network is unreachable",
    "timed out",
    "tcp connect error",
    "certificate",
)


def looks_like_network(stderr: str) -> bool:
    """Whether uv's ``stderr`` says it could not talk to an index."""
    text = stderr.lower()
    return any(marker in text for marker in _NETWORK_MARKERS)


def storage_errno(stderr: str) -> int | None:
    """The errno of a full, read-only or forbidden file system in uv's ``(os error N)``."""
    for match in _OS_ERROR_RE.finditer(stderr):
        code = int(match.group(1))
        if code in _STORAGE_ERRNOS:
            return code
    return None
