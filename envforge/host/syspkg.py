"""System packages (Debian/Ubuntu) on this host: which of a recipe's ``system_packages``
are not installed, asked of ``dpkg-query`` under a deadline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envforge.core import proc

#: Seconds ``dpkg-query`` may take (it reads the local status database only).
QUERY_TIMEOUT = 30.0


def missing_packages(
    names: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[str] | None:
    """The ``names`` that are not installed here, in order; None when this host cannot
    say (no ``dpkg-query``: not Debian or Ubuntu, or it did not answer in time)."""
    if not names:
        return []
    try:
        done = proc.run(
            ["dpkg-query", "-W", "-f", "${Package}\\t${db:Status-Status}\\n", *names],
            timeout=QUERY_TIMEOUT,
            env=environ,
        )
    except FileNotFoundError:
        return None
    if done.timed_out:
        return None
    installed = set()
    for line in done.stdout.splitlines():
        package, _, status = line.partition("\t")
        if status.strip() == "installed":
            installed.add(package.split(":", 1)[0])  # libgl1:amd64 -> libgl1
    return [n for n in names if n not in installed]
