"""``fleet plan``'s option values: ``ARCH=NAME`` pairs, the ``--preamble`` file, ``--time``
in seconds, and the probe's GPU steps (``--health/--no-health``, ``--require-healthy``,
``--collective/--no-collective``), which reach the command as one :class:`PlanChecks`.

The GPU steps are settled per task on its node by the rule ``build`` follows
(:meth:`envforge.probe.spec.GpuChecks.chosen`): the health facts for a GPU recipe, and
the collective step for its task of two or more GPUs (``--gpus N``, ``--gpus all``). A
Kubernetes pod runs envforge's worker alone, without envforge on the node to read the
health tools: there the health step is off, and asking for it is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envforge.core.fsutil import read_limited
from envforge.errors import InvalidInput
from envforge.fleet.plan import PlanChecks
from envforge.fleet.values import MAX_PREAMBLE, refuse, time_problem, time_seconds

F = TypeVar("F", bound=Callable[..., Any])
#: The engine whose tasks run without envforge on the node (no health step there).
PODS = "k8s"


def pairs(values: tuple[str, ...], setting: str) -> tuple[tuple[str, str], ...]:
    """``ARCH=NAME`` values (``--feature gfx942=mi300x``) as pairs; exit 2 naming one
    that is not."""
    found = []
    for value in values:
        arch, sep, name = value.partition("=")
        if not sep or not arch or not name:
            raise InvalidInput(
                f"{setting} {value!r}: expected ARCH=NAME", hint=f"{setting} gfx942=mi300x"
            )
        found.append((arch, name))
    return tuple(found)


def preamble_text(path: Path | None) -> str:
    """The text of ``--preamble FILE`` (checked where the site is: :mod:`envforge.fleet.values`)."""
    if path is None:
        return ""
    try:
        return read_limited(path, MAX_PREAMBLE + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"--preamble {path}: cannot read: {exc}", hint="a text file") from None


def seconds(time_limit: str | None) -> int:
    """``--time`` in seconds for the Kubernetes deadline (0: not given, or unlimited)."""
    if time_limit is None:
        return 0
    why = time_problem(time_limit)
    if why:
        raise refuse("--time", time_limit, why, "--time 01:00:00")
    return time_seconds(time_limit)


def plan_checks(
    engine: str, health: bool | None, require_healthy: bool, collective: bool | None
) -> PlanChecks:
    """The plan's GPU step choices for ``engine``: as given, but for Kubernetes, where
    the health step cannot run (asked for: exit 2, naming why)."""
    if require_healthy and health is False:
        raise InvalidInput(
            "--require-healthy and --no-health contradict each other",
            hint="leave one of them out",
        )
    if engine == PODS:
        if health or require_healthy:
            flag = "--require-healthy" if require_healthy else "--health"
            raise InvalidInput(
                f"{flag}: a Kubernetes pod runs envforge's worker alone, without envforge "
                "on the node to read nvidia-smi or amd-smi",
                hint=f"leave {flag} out (the collective step runs in pods), or plan "
                "with --engine slurm",
            )
        health = False
    return PlanChecks(health=health, require_healthy=require_healthy, collective=collective)


def probe_check_options(func: F) -> F:
    """Add ``--health/--no-health``, ``--require-healthy`` and
    ``--collective/--no-collective`` to ``fleet plan``; the command gets them as
    ``checks`` (:class:`PlanChecks`, settled for the engine)."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        kwargs["checks"] = plan_checks(
            kwargs["engine"],
            kwargs.pop("health"),
            kwargs.pop("require_healthy"),
            kwargs.pop("collective"),
        )
        return func(**kwargs)

    options = [
        click.option(
            "--health/--no-health",
            default=None,
            help="Each task's probe records GPU health facts (ECC errors, retired pages, "
            "remapped rows, throttling, temperature, power) in its report. Default: on for "
            "a GPU recipe (Slurm, GitHub; a Kubernetes pod cannot read them).",
        ),
        click.option(
            "--require-healthy",
            is_flag=True,
            help="A failing health fact fails the task (default: a warning in its report); "
            "implies --health.",
        ),
        click.option(
            "--collective/--no-collective",
            default=None,
            help="Each task's probe runs a timed all-reduce across its GPUs. Default: on "
            "for a GPU recipe's task of two or more GPUs (--gpus N, --gpus all).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]
