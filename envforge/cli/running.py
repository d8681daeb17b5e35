"""What the commands that run a probe share (build, shell, probe, certify): the GPUs to
use (``--gpu``, the scheduler's grant), ``--require-free`` and ``--summary``.

The light commands (``--help``, list, show, validate, solve, render, detect) never load
this module, so what it needs is imported at the top (:mod:`.common` keeps the rest).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import click

from envforge.cli.common import load_checked, load_for_host, say
from envforge.container.devices import GpuPick, granted_spec, pick_gpus, visible_env
from envforge.errors import InvalidInput
from envforge.host.detect import detect
from envforge.host.grant import Grant, granted
from envforge.host.hostinfo import GpuInfo
from envforge.probe.spec import GpuChecks, require_free_problem
from envforge.recipe.model import Recipe
from envforge.solve.choose import Choice

F = TypeVar("F", bound=Callable[..., Any])


def _check_require_free(_ctx: object, _param: object, value: float | None) -> float | None:

    if value is not None and require_free_problem(value):
        raise InvalidInput(
            f"--require-free {require_free_problem(value)}",
            hint="--require-free 8 (GiB free on each GPU the probe uses)",
        )
    return value


def require_free_option(func: F) -> F:
    """``--require-free GIB``: the probe's memory step fails below GIB free on a GPU."""
    return click.option(
        "--require-free",
        type=float,
        default=None,
        callback=_check_require_free,
        metavar="GIB",
        help="Fail the probe's memory step when a GPU has less than GIB free "
        "(default: warn only, when other processes hold more than half of a GPU's memory).",
    )(func)


def health_options(func: F) -> F:
    """``--health``, ``--require-healthy``, ``--collective``: the probe's optional steps
    (GPU health facts on the host, the all-reduce across the visible GPUs)."""
    for option in (
        click.option(
            "--collective",
            is_flag=True,
            help="Add the collective step: a timed torch.distributed all-reduce across "
            "the visible GPUs (nccl; skipped, saying so, below two GPUs).",
        ),
        click.option(
            "--require-healthy",
            is_flag=True,
            help="With --health: a failing health fact fails the probe (default: a warning).",
        ),
        click.option(
            "--health",
            is_flag=True,
            help="Add the health step: ECC errors, retired pages, throttling, temperature "
            "and power from nvidia-smi or amd-smi/rocm-smi (a failing fact warns).",
        ),
    ):
        func = option(func)
    return func


def gpu_check_options(func: F) -> F:
    """``build``'s and ``certify``'s ``--health/--no-health``, ``--require-healthy`` and
    ``--collective/--no-collective`` (None: not given; :meth:`GpuChecks.chosen` holds
    the defaults, :func:`gpu_checks` settles them)."""
    for option in (
        click.option(
            "--collective/--no-collective",
            default=None,
            help="The collective step: a timed torch.distributed all-reduce across the "
            "GPUs (nccl; skipped below two). Default: on for a GPU recipe when --gpu chose "
            "two or more GPUs (build: also a scheduler's grant, its default --gpu).",
        ),
        click.option(
            "--require-healthy",
            is_flag=True,
            help="A failing health fact (uncorrected ECC errors, pages or rows waiting to "
            "be retired or remapped, a hardware slowdown) fails the certification "
            "(default: a warning in the report).",
        ),
        click.option(
            "--health/--no-health",
            default=None,
            help="The health step: ECC errors, retired pages, remapped rows, throttling, "
            "temperature and power from nvidia-smi or amd-smi/rocm-smi, recorded in the "
            "report and certificate. Default: on for a GPU recipe.",
        ),
    ):
        func = option(func)
    return func


def gpu_checks(
    health: bool | None,
    require_healthy: bool,
    collective: bool | None,
    recipe: Recipe,
    pick: GpuPick | None,
) -> GpuChecks:
    """The GPU steps of a certification of ``recipe`` on the GPUs ``pick``ed."""
    return GpuChecks.chosen(
        health=health,
        require_healthy=require_healthy,
        collective=collective,
        vendor=recipe.gpu.vendor,
        gpus=pick.count if pick is not None else None,
    )


def load_with_gpus(
    ref: str, gpu: str | None, overrides: Sequence[str] = (), *, platform: str | None = None
) -> tuple[Recipe, Choice | None, GpuPick | None]:
    """:func:`load_for_host` with ``--gpu``: the selection is checked against the detected
    GPUs (out of range, several archs, another vendor: exit 2, one line), and ``auto``
    chooses for the selected GPUs. Says the selection on stderr in one line. Inside a
    scheduler's job (Slurm, a pod) the GPUs it granted are the default ``--gpu``, and the
    pick carries the job's numbering beside the node's (:mod:`envforge.host.grant`)."""
    grant = granted(os.environ)
    from_grant = gpu is None and _grant_used(ref, overrides, grant)
    if gpu is None and not from_grant:
        recipe, choice = load_for_host(ref, None, overrides, platform=platform)
        return recipe, choice, None

    if ref != "auto":
        recipe = load_checked(ref, overrides, platform=platform)
        return recipe, None, pick_for(recipe, gpu, from_grant=from_grant)
    host = detect()
    spec = gpu if gpu is not None else _from_grant(grant, host.gpus, None)
    pick = pick_gpus(spec, host.gpus, grant=grant)
    chosen = tuple(g for g in host.gpus if g.index in pick.indexes)
    recipe, choice = load_for_host(ref, replace(host, gpus=chosen), overrides, platform=platform)
    _say_pick(spec, pick)
    return recipe, choice, pick


def _grant_used(ref: str, overrides: Sequence[str], grant: Grant | None) -> bool:
    """Whether the scheduler's grant becomes ``--gpu`` (said on stderr): inside a job,
    for a recipe that needs a GPU (:mod:`envforge.host.grant`)."""
    if grant is None:
        return False
    if ref != "auto" and load_checked(ref, overrides).gpu.vendor == "none":
        granted_text = f"the scheduler granted GPU {grant.gpus} ({grant.describe()})"
        say(f"{granted_text}: not used, the recipe needs none")
        return False
    return True


def pick_for(recipe: Recipe | None, gpu: str | None, *, from_grant: bool = False) -> GpuPick | None:
    """``--gpu`` for a chosen recipe (None: any vendor, still one arch), checked against
    the detected GPUs (``all``: those of the recipe's vendor); said on stderr in one line.
    None without ``--gpu``, unless ``from_grant``: then the scheduler's grant is the
    selection. Inside a job the pick carries the job's numbering too."""
    grant = granted(os.environ)
    if gpu is None and (not from_grant or grant is None):
        return None

    gpus = detect().gpus
    vendor = recipe.gpu.vendor if recipe is not None else None
    if gpu is None:
        gpu = _from_grant(grant, gpus, vendor)
    pick = pick_gpus(gpu, gpus, vendor, grant=grant)
    _say_pick(gpu, pick)
    return pick


def _from_grant(grant: Grant | None, gpus: Sequence[GpuInfo], vendor: str | None) -> str:
    """The grant as ``--gpu`` in detect's numbering (:func:`granted_spec`), said."""
    assert grant is not None  # the callers take the grant only inside a job
    spec = granted_spec(grant, gpus, vendor)
    say(f"--gpu {spec}: the GPUs the scheduler granted ({grant.describe()})")
    return spec


def _say_pick(gpu: str, pick: GpuPick) -> None:
    which = ",".join(str(i) for i in pick.indexes)
    job = ",".join(pick.job_visible)
    mine = f"; this job numbers them {job}" if job and job != which else ""
    say(f"--gpu {gpu}: GPU {which} ({pick.arch or '?'}), NPROC_PER_NODE={pick.count}{mine}")


def gpu_environ(pick: GpuPick | None) -> dict[str, str] | None:
    """This process's environment plus the ``--gpu`` variables in the host's numbering,
    inside a scheduler's job in the job's own (for the venv backend and ``probe``:
    processes on this host, in this job's device cgroup); None without ``--gpu``."""
    if pick is None:
        return None

    return {**os.environ, **visible_env(pick, container=False)}
