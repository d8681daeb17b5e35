"""Making and reading plans with the registered engines (:data:`envforge.fleet.engines.ENGINES`):
:func:`make_plan` asks the chosen engine whether it takes the backend, :func:`load_plan`
refuses a ``plan.json`` naming an engine that is not registered. The plan's values and
their JSON form are :mod:`envforge.fleet.plan` (which the engines read)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envforge.core.fsutil import read_limited, read_reason
from envforge.core.jsonlimits import loads
from envforge.errors import InvalidInput
from envforge.fleet import plan as model
from envforge.fleet import values
from envforge.fleet.engines import ENGINES, engine_for
from envforge.fleet.nodes import Spot
from envforge.fleet.plan import (
    MAX_TASKS,
    PLAN_MAX_BYTES,
    SCHEMA,
    BackendName,
    EngineName,
    Plan,
    PlanChecks,
    Site,
    Task,
    _check_counts,
    _pairs,
    image_for,
)
from envforge.recipe.model import Recipe

#: No site settings (the scheduler's defaults).
DEFAULT_SITE = Site()


def plan_from_dict(data: Any, source: str) -> Plan:
    """A plan as :meth:`Plan.to_dict` wrote it, of a registered engine; :class:`InvalidInput`
    naming the key."""
    if isinstance(data, Mapping) and data.get("schema") == SCHEMA:
        engine = data.get("engine")
        if not isinstance(engine, str) or engine not in ENGINES:
            raise InvalidInput(
                f"{source}: key 'engine' is {engine!r}, not one of {', '.join(ENGINES)}",
                hint="plan again (envforge fleet plan --engine ...), or install the envforge "
                "that planned it",
            )
    return model.plan_from_dict(data, source)


def make_plan(
    engine: EngineName,
    recipes: Sequence[tuple[str, Recipe]],
    *,
    archs: Sequence[str] = (),
    backend: BackendName = "docker",
    images: bool = True,
    nodes: int = 1,
    gpus: int | None = None,
    site: Site = DEFAULT_SITE,
    wheelhouse: str = "",
    level: str = "",
    envforge: Sequence[str] = ("envforge",),
    ca_bundle: str = "",
    overrides: Sequence[str] = (),
    placement: Mapping[str, Sequence[Spot]] | None = None,
    workdir: str = "",
    cache_dir: str = "",
    exclusive: bool = False,
    signing_key: str = "",
    checks: PlanChecks | None = None,
) -> Plan:
    """The plan for ``recipes`` ((reference as given, loaded recipe) pairs); see the
    module docstring for the pairing; ``images``: whether ``backend`` makes images (its
    ``runs_images()``), which Kubernetes needs and each task then names. Raises
    :class:`InvalidInput` for what cannot run, and for a value its scheduler would not
    take (:mod:`.values`), before any task is made. ``placement``: arch -> the nodes its
    tasks are pinned to, one task per node instead of ``nodes`` (:mod:`.nodes`).
    ``checks``: the probe's health and collective choices (:class:`PlanChecks`)."""
    chosen = engine_for(engine, "--engine")
    _check_counts(recipes, nodes, gpus)
    chosen.check_backend(backend, images=images)
    for arch in archs:
        why = values.arch_problem(arch)
        if why:
            raise values.refuse("--arch", arch, why, "--arch gfx942 (repeatable)")
    values.check_site(site)
    for setting in overrides:
        why = values.setting_problem(setting)
        if why:
            raise values.refuse("--set", setting, why, "--set env.OMP_NUM_THREADS=8")
    values.check_pods(site)
    refs = {r.name: ref for ref, r in recipes}
    _check_node_local(workdir, cache_dir)
    pairs = _pairs([r for _, r in recipes], archs)
    where = {a: tuple(s) for a, s in (placement or {}).items()}
    total = sum(len(where.get(arch, ())) or nodes for _, arch, _ in pairs)
    if total > MAX_TASKS:  # counted before any task is made
        raise InvalidInput(
            f"{total} tasks: more than {MAX_TASKS} in one plan",
            hint="plan fewer recipes, archs, nodes or --nodes per plan",
        )
    tasks: list[Task] = []
    for recipe, arch, given in pairs:
        wanted = gpus if gpus is not None else (1 if given or recipe.gpu.vendor != "none" else 0)
        for spot in where.get(arch) or [Spot("")] * nodes:
            tasks.append(
                Task(
                    index=len(tasks),
                    recipe=recipe.name,
                    ref=refs[recipe.name],
                    recipe_hash=recipe.hash,
                    stack=recipe.stack_tag,
                    vendor=recipe.gpu.vendor,
                    arch=arch,
                    gpus=wanted if spot.gpus is None else spot.gpus,
                    image=image_for(recipe, site) if images else "",
                    node=spot.node,
                )
            )
    return Plan(
        engine,
        backend,
        tuple(tasks),
        site,
        wheelhouse,
        level,
        tuple(envforge),
        nonce=secrets.token_hex(16),
        ca_bundle=ca_bundle,
        overrides=tuple(overrides),
        workdir=workdir,
        cache_dir=cache_dir,
        exclusive=exclusive,
        signing_key=signing_key,
        checks=checks,
    )


def _check_node_local(workdir: str, cache_dir: str) -> None:
    for option, value in (("--workdir", workdir), ("--cache-dir", cache_dir)):
        why = values.workdir_problem(value, allow_job_tmpdir=option == "--workdir")
        if value and why:
            raise values.refuse(option, value, why, f"{option} /local/scratch")


def load_plan(folder: Path) -> Plan:
    """``folder/plan.json``; :class:`InvalidInput` when it is missing or malformed."""
    path = folder / "plan.json"
    try:
        raw = read_limited(path, PLAN_MAX_BYTES)  # regular files only: a FIFO never blocks
    except FileNotFoundError:
        raise InvalidInput(
            f"{path}: no such file", hint="envforge fleet plan ... -o DIR writes it"
        ) from None
    except OSError as exc:
        raise InvalidInput(
            f"{path}: cannot read: {read_reason(exc, path)}",
            hint="plan again (envforge fleet plan ... -o DIR)",
        ) from None
    try:
        data = loads(raw, max_bytes=PLAN_MAX_BYTES)
    except ValueError as exc:
        raise InvalidInput(f"{path}: not JSON: {exc}", hint="plan again") from None
    return plan_from_dict(data, str(path))
