"""A fleet engine that is none of slurm, k8s and github: one module, one template.

It implements :class:`envforge.fleet.base.Engine` with module-level functions, as the
shipped engines do; registering it in ``ENGINES`` is all ``fleet plan|submit|status``
need to route to it. What it was handed is recorded in :data:`CALLS` (reset per test).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from envforge.errors import InvalidInput
from envforge.fleet.plan import Plan
from envforge.fleet.slurm_state import JobState
from envforge.render.templates import environment

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "fleet-engine"
#: (function, plan id) per call.
CALLS: list[tuple[str, str]] = []


def check_backend(backend: str, *, images: bool) -> None:
    if backend == "refused":
        raise InvalidInput("--engine fake: no such backend here", hint="--backend venv")


def files(plan: Plan, folder: Path) -> dict[str, str]:
    CALLS.append(("files", plan.id))
    text = (
        environment(TEMPLATES)
        .get_template("fake.tasks.j2")
        .render(plan_id=plan.id, tasks=plan.tasks)
    )
    return {"fake.tasks": text}


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    CALLS.append(("submit", plan.id))
    return [f"fake-{plan.id}"]


def queued(plan: Plan, folder: Path) -> dict[int, JobState]:
    CALLS.append(("queued", plan.id))
    return {task.index: JobState("PENDING") for task in plan.tasks}
