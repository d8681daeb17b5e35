"""The fleet engines by name: every command reaches an engine only through
:data:`ENGINES` (``ENGINES[plan.engine]``); ``fleet plan --engine`` offers its keys.

A new engine is one module implementing :class:`~envforge.fleet.base.Engine`, its
template, and one line here.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Final

from envforge.errors import InvalidInput
from envforge.fleet import github, k8s, slurm
from envforge.fleet.base import Engine

#: The engines, in the order ``--engine`` lists them.
ENGINES: Final[MutableMapping[str, Engine]] = {"slurm": slurm, "k8s": k8s, "github": github}


def engine_for(name: str, source: str) -> Engine:
    """``ENGINES[name]``; :class:`InvalidInput` naming ``source`` (a file's key, or an
    option) and the engines there are, when there is no such engine."""
    engine = ENGINES.get(name)
    if engine is None:
        raise InvalidInput(
            f"{source}: {name!r} is not a fleet engine (one of: {', '.join(ENGINES)})",
            hint=f"plan again with --engine {'|'.join(ENGINES)}",
        )
    return engine


__all__ = ["ENGINES", "Engine", "engine_for"]
