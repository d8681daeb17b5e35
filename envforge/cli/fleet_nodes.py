"""``fleet plan``'s node options (``--every-node``, ``--nodelist``, ``--exclusive``,
``--gpus all``, ``--workdir``, ``--cache-dir``) and ``fleet clean``.

The options reach ``plan_cmd`` as one :class:`NodeChoice` (:func:`node_options`);
:func:`plan_arguments` turns it into :func:`envforge.fleet.planning.make_plan`'s node
arguments, listing the nodes from the scheduler where asked (:mod:`envforge.fleet.nodes`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from envforge.cli.common import echo_json, json_option, note
from envforge.errors import InvalidInput
from envforge.fleet import clean, nodes, values
from envforge.fleet.k8s_select import RESOURCE, selector
from envforge.fleet.plan import CPU, JOB_TMPDIR, Plan, Site, _pairs
from envforge.fleet.planning import load_plan
from envforge.knowledge import load_table
from envforge.recipe.model import Recipe

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class NodeChoice:
    """What the node options said."""

    every_node: bool = False
    nodelist: tuple[str, ...] = ()
    exclusive: bool = False
    workdir: str = ""
    cache_dir: str = ""
    #: ``--feature F`` given without an arch: every listed node must have it.
    features: tuple[str, ...] = ()


class GpuCount(click.ParamType):  # type: ignore[type-arg]
    """``--gpus N`` or ``--gpus all`` (every GPU of the node, in one task)."""

    name = "N|all"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or value == nodes.ALL:
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r}: a whole number or 'all'", param, ctx)


GPU_COUNT = GpuCount()


def node_options(func: F) -> F:
    """Add the node options to ``fleet plan``; the command gets them as ``where``."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        given = kwargs.get("features", ())
        bare = tuple(f for f in given if "=" not in f)
        kwargs["features"] = tuple(f for f in given if "=" in f)
        kwargs["where"] = NodeChoice(
            every_node=kwargs.pop("every_node"),
            nodelist=nodes.names(kwargs.pop("nodelist")),
            exclusive=kwargs.pop("exclusive"),
            workdir=kwargs.pop("workdir") or "",
            cache_dir=kwargs.pop("cache_dir") or "",
            features=bare,
        )
        return func(**kwargs)

    options = [
        click.option(
            "--every-node",
            is_flag=True,
            help="One task per node the scheduler lists for each arch (Slurm: the "
            "partition's nodes with the arch's feature and each bare --feature F; "
            "Kubernetes: kubectl get nodes), each pinned to its node.",
        ),
        click.option(
            "--nodelist",
            "--node",
            "nodelist",
            multiple=True,
            metavar="NAME[,NAME]",
            help="Pin one task per recipe and arch to each of these nodes (repeatable).",
        ),
        click.option("--exclusive", is_flag=True, help="Slurm: each task has its node to itself."),
        click.option(
            "--workdir",
            default=None,
            metavar="DIR",
            help="Slurm: node-local folder for each task's environment [default: the "
            "job's $TMPDIR, else /tmp]; only reports and logs reach the plan folder.",
        ),
        click.option(
            "--cache-dir",
            default=None,
            metavar="DIR",
            help="Slurm: a wheel cache the tasks share (uv's UV_CACHE_DIR; absolute).",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


def _engine_checks(engine: str, where: NodeChoice, gpus: int | str | None) -> None:
    pinned = where.every_node or where.nodelist
    if pinned and engine not in ("slurm", "k8s"):
        raise InvalidInput(
            f"--every-node/--nodelist: the {engine} engine places no task on a named node",
            hint="runners are chosen by label (--runner-label)",
        )
    if where.exclusive and engine != "slurm":
        raise InvalidInput("--exclusive: Slurm only", hint="leave --exclusive out")
    if (where.workdir or where.cache_dir) and engine != "slurm":
        raise InvalidInput("--workdir/--cache-dir: Slurm only", hint="leave them out")
    if gpus == nodes.ALL and not pinned:
        raise InvalidInput(
            "--gpus all: needs nodes by name, to count their GPUs",
            hint="add --every-node or --nodelist NAME, or give --gpus N",
        )
    for feature in where.features:
        if not where.every_node:
            raise InvalidInput(
                f"--feature {feature!r}: expected ARCH=NAME (a bare feature is a node "
                "filter of --every-node)",
                hint="--feature gfx942=mi300x",
            )
        why = nodes.expression_problem(feature)
        if why:
            raise values.refuse("--feature", feature, why, "--feature gfx942=mi300x")


def _slurm(
    archs: Sequence[str], site: Site, where: NodeChoice, all_gpus: bool
) -> dict[str, tuple[nodes.Spot, ...]]:
    run = nodes.runner(dict(os.environ))
    if not where.every_node:
        listed = nodes.slurm_nodes(run, where.nodelist) if all_gpus else []
        counts = {n.name: n for n in listed}
        found = [counts.get(n, nodes.Node(n)) for n in where.nodelist]
        return {a: nodes.spots(found, a, all_gpus=all_gpus, what="--nodelist") for a in archs}
    every = nodes.slurm_nodes(run)
    placement = {}
    for arch in archs:
        features = [*where.features, *([site.feature(arch)] if arch != CPU else [])]
        for feature in features:
            why = nodes.expression_problem(feature)
            if why:
                raise values.refuse("--feature", feature, why, "--feature gfx942=mi300x")
        chosen = nodes.choose(every, partition=site.partition, features=features)
        placement[arch] = nodes.spots(chosen, arch, all_gpus=all_gpus)
    return placement


def _k8s(
    archs: Sequence[str], site: Site, where: NodeChoice, all_gpus: bool
) -> dict[str, tuple[nodes.Spot, ...]]:

    listed: list[nodes.Node] = []
    if where.every_node or all_gpus:
        text = nodes.runner(dict(os.environ))(list(nodes.KUBECTL)).stdout
        listed = nodes.parse_kubectl(text, list(RESOURCE.values()))
    by_name = {n.name: n for n in listed}
    table = load_table()

    def pci_ids(arch: str) -> list[int]:
        return [p.device_id for p in table.amd_pci_ids if p.arch == arch]

    probe = Plan("k8s", "docker", (), site)
    placement = {}
    for arch in archs:
        if where.every_node:
            chosen = [n for n in listed if nodes.selected(n, selector(arch, probe, pci_ids))]
        else:
            chosen = [by_name.get(n, nodes.Node(n)) for n in where.nodelist]
        placement[arch] = nodes.spots(chosen, arch, all_gpus=all_gpus)
    return placement


def plan_arguments(
    engine: str,
    where: NodeChoice,
    *,
    recipes: Sequence[tuple[str, Recipe]],
    archs: Sequence[str],
    site: Site,
    gpus: int | str | None,
) -> dict[str, Any]:
    """``make_plan``'s node arguments: ``gpus``, ``placement``, ``workdir``, ``cache_dir``,
    ``exclusive``."""
    _engine_checks(engine, where, gpus)
    all_gpus = gpus == nodes.ALL
    found: dict[str, Any] = {
        "gpus": None if all_gpus else gpus,
        "exclusive": where.exclusive or (all_gpus and engine == "slurm"),
        "workdir": (where.workdir or JOB_TMPDIR) if engine == "slurm" else "",
        "cache_dir": where.cache_dir,
    }
    if where.every_node or where.nodelist:
        planned = list(dict.fromkeys(a for _, a, _ in _pairs([r for _, r in recipes], archs)))
        lister = _slurm if engine == "slurm" else _k8s
        found["placement"] = lister(planned, site, where, all_gpus)
    return found


# --------------------------------------------------------------------------- fleet clean


@click.command("clean")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), metavar="DIR")
@click.option(
    "--keep",
    type=click.IntRange(0, 9999),
    default=1,
    show_default=True,
    metavar="N",
    help="Runs kept whole (the newest N); older runs keep only their reports.",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@json_option
def clean_cmd(folder: Path, keep: int, dry_run: bool, as_json: bool) -> None:
    """Remove what a plan's runs left (homes, node-local folders, old runs' logs); every
    report is kept."""

    plan = load_plan(folder.resolve())
    found = clean.leftovers(plan, folder.resolve(), keep, dict(os.environ))
    failed = [] if dry_run else clean.remove(found)
    if as_json:
        echo_json(
            {
                "plan": plan.id,
                "dry_run": dry_run,
                "removed": [] if dry_run else [f.to_dict() for f in found if f not in failed],
                "would_remove": [f.to_dict() for f in found] if dry_run else [],
                "failed": [f.to_dict() for f in failed],
            }
        )
    else:
        for item in found:
            click.echo(f"{'would remove' if dry_run else 'removed'} {item.path}: {item.why}")
        note(f"fleet clean: {len(found)} {'to remove' if dry_run else 'removed'}")
    if failed:
        raise InvalidInput(
            f"fleet clean: {len(failed)} could not be removed: {failed[0].path}",
            hint="check its permissions",
        )
