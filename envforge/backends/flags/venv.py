"""The venv backend's own flags, light to import (see :mod:`.docker`)."""

from __future__ import annotations

from envforge.backends.base import BackendOption

#: The flags only this backend has (``envforge build`` / ``shell``).
CLI_OPTIONS: tuple[BackendOption, ...] = (
    BackendOption(
        "--python",
        "python",
        "venv backend: the interpreter to use (must be the recipe's Python version).",
        ("build", "shell"),
        metavar="PATH",
    ),
    BackendOption(
        "--no-certify",
        "no_certify",
        "Build only; no probe (venv: `certify` on a host with the GPU certifies it).",
        ("build",),
        is_flag=True,
    ),
    BackendOption(
        "--wheelhouse",
        "wheelhouse",
        "venv backend, when the venv must be built: install torch from these wheels.",
        ("shell",),
        kind="dir",
    ),
    BackendOption(
        "--ca-bundle",
        "ca_bundle",
        "venv backend, when the venv must be built: PEM bundle uv trusts.",
        ("shell",),
        kind="file",
    ),
)


def cli_options() -> tuple[BackendOption, ...]:
    """The flags only this backend has."""
    return CLI_OPTIONS
