"""Wheel and image platforms in docker's names (``linux/amd64``, ``linux/arm64``).

The compatibility table keeps facts per platform (a variant's ``platforms:`` rows);
``--platform`` on solve, validate, render and build picks one (default: this host's), and
render and build hand it to the engine (``docker build --platform``).
"""

from __future__ import annotations

import platform as _platform

#: The platforms envforge knows wheels for; the first is the table's default.
PLATFORMS: tuple[str, ...] = ("linux/amd64", "linux/arm64")

_MACHINES = {
    "x86_64": "linux/amd64",
    "amd64": "linux/amd64",
    "aarch64": "linux/arm64",
    "arm64": "linux/arm64",
}


def platform_of(machine: str) -> str:
    """``x86_64`` → ``linux/amd64``, ``aarch64`` → ``linux/arm64``; others ``linux/<m>``."""
    return _MACHINES.get(machine.lower(), f"linux/{machine.lower() or 'unknown'}")


def host_platform() -> str:
    """This host's platform (``platform.machine()`` in docker's names)."""
    return platform_of(_platform.machine())


def solve_default() -> str | None:
    """The platform ``solve`` and ``auto`` assume when none is asked for: None on an amd64
    host (the arch's own platform, else linux/amd64), else this host's."""
    host = host_platform()
    return None if host == PLATFORMS[0] else host
