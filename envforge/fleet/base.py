"""What every fleet engine implements: the plan as the scheduler's files, and handing
them over. Light: no engine, no scheduler (the plan, the CLI and the registry import it).

An engine is a *module* implementing :class:`Engine` with module-level functions (as a
backend is, :mod:`envforge.backends`); :data:`envforge.fleet.engines.ENGINES` names them,
and every command reaches an engine only through it. Adding an engine means adding a
module (and its template) and one line in the registry, not editing commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import yaml

if TYPE_CHECKING:
    from envforge.fleet.plan import Plan
    from envforge.fleet.slurm_state import JobState


class Engine(Protocol):
    """An engine module. As per PEP 544, ``self`` is ignored when a module implements it."""

    # refuse a backend the engine cannot run, before any task is made (images: whether
    # the backend makes images, its runs_images())
    def check_backend(self, backend: str, *, images: bool) -> None: ...

    # file name -> text of the engine's files for the plan (folder: the plan's, absolute)
    def files(self, plan: Plan, folder: Path) -> dict[str, str]: ...

    # hand the written plan to the scheduler; the job ids (or raise saying how to run it)
    def submit_plan(
        self, plan: Plan, folder: Path, environ: Mapping[str, str] | None = None
    ) -> list[str]: ...

    # what the scheduler says of a run's tasks (folder: the run's): task index -> its
    # state ({}: none known)
    def queued(self, plan: Plan, folder: Path) -> Mapping[int, JobState]: ...


def yaml_text(doc: object) -> str:
    """A YAML document as the engines write theirs (key order kept, block style)."""
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)
