"""Reading the host's pseudo-files (sysfs, procfs, ``/etc/group``) and their numbers, bounded.

``detect`` and ``doctor`` read files under a ``root`` that may be a fixture tree, a
container's view or a broken host. Every such read goes through :func:`read_host_text`
(no blocking on a FIFO or device, at most :data:`MAX_BYTES`), and every number through
:func:`host_int` (ASCII digits only, so ``²`` or ``١`` is not a number, and within a
stated range, so a ``50000000`` never drives a loop).
"""

from __future__ import annotations

from pathlib import Path

from envforge.core.fsutil import read_limited

#: Largest pseudo-file read (bytes); real ones hold a few hundred.
MAX_BYTES = 64 * 1024
#: Longest number text accepted (a 64-bit value in decimal has 20 digits).
_MAX_DIGITS = 24
_HEX = frozenset("0123456789abcdefABCDEF")
_DEC = frozenset("0123456789")


def read_host_text(path: Path, max_bytes: int = MAX_BYTES) -> str | None:
    """The text of a host pseudo-file, or None when it is missing, unreadable, not a
    regular file or larger than ``max_bytes``. Undecodable bytes are replaced."""
    try:
        data = read_limited(path, max_bytes)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


def host_int(text: str, *, base: int = 10, maximum: int, minimum: int = 0) -> int | None:
    """``text`` as an integer in ``[minimum, maximum]``, or None.

    ``base`` 10 or 16 (an optional ``0x`` prefix), or 0 (``0x`` means hex, else decimal).
    Only ASCII digits count: ``"²"`` and ``"١٢"`` are not numbers here.
    """
    digits = text.strip()
    negative = digits.startswith("-")
    if negative:
        digits = digits[1:]
    if base in (0, 16) and digits[:2].lower() == "0x":
        digits, base = digits[2:], 16
    elif base == 0:
        base = 10
    allowed = _HEX if base == 16 else _DEC
    if not digits or len(digits) > _MAX_DIGITS or not set(digits) <= allowed:
        return None
    value = int(digits, base)
    if negative:
        value = -value
    return value if minimum <= value <= maximum else None


def numeric_name(name: str, maximum: int = 2**31 - 1) -> int | None:
    """A directory entry named by a number (``proc/1234``, ``nodes/3``), else None."""
    return host_int(name, maximum=maximum) if name[:1] in _DEC else None
