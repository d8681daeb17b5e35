"""Nodes by name: which nodes a plan's tasks are pinned to (``fleet plan --every-node``,
``--nodelist``), read from the scheduler.

Slurm: ``sinfo -h -N -o '%N %P %f %G'`` (one line per node and partition; the default
partition ends in ``*``; ``(null)`` for no features or GRES), else ``scontrol show nodes
--oneliner`` (``NodeName=... ActiveFeatures=... Gres=... Partitions=...``). A node is
listed for an arch when it is in the partition (any, without ``--partition``) and has the
arch's feature (:meth:`Site.feature`; none for ``cpu``) and every ``--feature F`` given
without an arch. Kubernetes: ``kubectl get nodes -o json``, matched against the arch's
node selection (:func:`envforge.fleet.k8s_select.selector`). Each call goes through
:func:`envforge.core.proc.run` with a deadline.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from envforge.core import proc
from envforge.core.jsonlimits import loads
from envforge.errors import InvalidInput, Unavailable
from envforge.fleet import values
from envforge.fleet.plan import CPU
from envforge.fleet.values import node_problem

#: Seconds sinfo, scontrol or kubectl may take.
TIMEOUT = 60.0
_SCONTROL_KEYS = re.compile(
    r"(?:^|\s)(NodeName|ActiveFeatures|AvailableFeatures|Gres|Partitions)=(\S*)"
)
SINFO = ("sinfo", "-h", "-N", "-o", "%N %P %f %G")
SCONTROL = ("scontrol", "show", "nodes", "--oneliner")
KUBECTL = ("kubectl", "get", "nodes", "-o", "json")
#: ``Task.gpus`` asked of ``--gpus all``: the node's GPU count, read from the scheduler.
ALL = "all"


@dataclass(frozen=True)
class Node:
    """A node as the scheduler lists it: its partitions (Slurm), features (Slurm) or
    labels (Kubernetes), and its GPUs (Slurm's gpu GRES, Kubernetes' allocatable)."""

    name: str
    partitions: tuple[str, ...] = ()
    features: frozenset[str] = frozenset()
    gpus: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
    #: In the default partition (sinfo's ``*``), where sbatch puts a job without one.
    default: bool = False


@dataclass(frozen=True)
class Spot:
    """Where a task is pinned: the node, and its GPUs (``--gpus all``; None: as planned)."""

    node: str
    gpus: int | None = None


def names(values_given: Iterable[str]) -> tuple[str, ...]:
    """``--nodelist a,b --nodelist c`` as names, in order, each once; refused one by one."""
    found: list[str] = []
    for given in values_given:
        for name in given.split(","):
            why = node_problem(name.strip())
            if why:
                raise values.refuse("--nodelist", name, why, "--nodelist node01,node02")
            if name.strip() not in found:
                found.append(name.strip())
    return tuple(found)


# --------------------------------------------------------------------------- Slurm


def gres_gpus(gres: str) -> int:
    """GPUs of a GRES string (``gpu:mi300x:2(S:0-1),nic:1`` -> 2; ``(null)`` -> 0)."""
    total = 0
    for part in gres.split(","):
        fields = part.strip().split("(", 1)[0].split(":")
        if fields[0] == "gpu":
            total += int(fields[-1]) if len(fields) > 1 and fields[-1].isdigit() else 1
    return total


def _listed(text: str) -> frozenset[str]:
    return frozenset() if text in ("", "(null)") else frozenset(text.split(","))


def _merge(found: dict[str, Node], node: Node) -> None:
    old = found.get(node.name)
    if old is None:
        found[node.name] = node
        return
    found[node.name] = Node(
        node.name,
        tuple(dict.fromkeys((*old.partitions, *node.partitions))),
        old.features | node.features,
        max(old.gpus or 0, node.gpus or 0),
        default=old.default or node.default,
    )


def parse_sinfo(text: str) -> list[Node]:
    """The nodes of ``sinfo -h -N -o '%N %P %f %G'``, each once, in order."""
    found: dict[str, Node] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or node_problem(fields[0]):
            continue
        gres = fields[3] if len(fields) > 3 else ""
        partition = fields[1].rstrip("*")
        node = Node(fields[0], (partition,), _listed(fields[2]), gres_gpus(gres))
        _merge(found, replace(node, default=fields[1].endswith("*")))
    return list(found.values())


def parse_scontrol(text: str) -> list[Node]:
    """The nodes of ``scontrol show nodes --oneliner`` (one node a line)."""
    found: dict[str, Node] = {}
    for line in text.splitlines():
        keys = dict(_SCONTROL_KEYS.findall(line))
        name = keys.get("NodeName", "")
        if node_problem(name):
            continue
        features = keys.get("ActiveFeatures") or keys.get("AvailableFeatures", "")
        parts = tuple(p for p in keys.get("Partitions", "").split(",") if p)
        _merge(found, Node(name, parts, _listed(features), gres_gpus(keys.get("Gres", ""))))
    return list(found.values())


def feature_matches(expression: str, features: frozenset[str]) -> bool:
    """Whether a node with ``features`` has ``expression``: names joined by ``&`` (and)
    and ``|`` (or), ``&`` first; other forms are refused where the plan is made."""
    return any(all(name in features for name in term.split("&")) for term in expression.split("|"))


def expression_problem(expression: str) -> str | None:
    if re.fullmatch(r"[A-Za-z0-9_.+-]+([&|][A-Za-z0-9_.+-]+)*", expression):
        return None
    return "--every-node reads features joined by & and | only (no brackets, no *N)"


def choose(
    nodes: Sequence[Node], *, partition: str = "", features: Sequence[str] = ()
) -> list[Node]:
    """The nodes in ``partition`` (any of a comma-separated list; without, the default
    partition's when the listing names it, else all) that have each feature expression
    of ``features``."""
    wanted = [p for p in partition.split(",") if p]
    named_default = any(n.default for n in nodes)

    def in_partition(node: Node) -> bool:
        if wanted:
            return any(p in node.partitions for p in wanted)
        return node.default or not named_default

    return [
        n
        for n in nodes
        if in_partition(n) and all(feature_matches(f, n.features) for f in features)
    ]


Runner = Callable[[Sequence[str]], proc.Completed]


def runner(environ: Mapping[str, str] | None = None) -> Runner:
    """Run a listing command with :data:`TIMEOUT`; :class:`Unavailable` when it is not
    there, does not answer or fails (its message, one line)."""

    def run(argv: Sequence[str]) -> proc.Completed:
        try:
            done = proc.run(argv, timeout=TIMEOUT, env=environ)
        except FileNotFoundError:
            raise Unavailable(
                f"{argv[0]}: not found: the nodes cannot be listed here",
                hint="run it where the scheduler's commands are, or name the nodes "
                "(--nodelist NAME,...)",
            ) from None
        if done.timed_out or not done.ok:
            why = "no answer" if done.timed_out else " ".join(done.stderr.split())
            raise Unavailable(
                f"{shlex.join(argv)}: {why or f'exit {done.returncode}'}",
                hint="name the nodes instead (--nodelist NAME,...)",
            )
        return done

    return run


def slurm_nodes(run: Runner, only: Sequence[str] = ()) -> list[Node]:
    """The cluster's nodes (``only``: these), from sinfo, else scontrol."""
    limit = ["-n", ",".join(only)] if only else []
    try:
        return parse_sinfo(run([*SINFO, *limit]).stdout)
    except Unavailable:
        return parse_scontrol(run([*SCONTROL, *([",".join(only)] if only else [])]).stdout)


# --------------------------------------------------------------------------- Kubernetes


def parse_kubectl(text: str, resources: Sequence[str]) -> list[Node]:
    """The nodes of ``kubectl get nodes -o json``: name, labels and allocatable GPUs (the
    first of ``resources`` a node has)."""
    try:
        data = loads(text.encode())  # bounded, depth-limited
    except ValueError as exc:
        raise Unavailable(f"kubectl get nodes: not JSON ({exc})", hint="--node NAME") from None
    found: list[Node] = []
    for item in data.get("items", []) if isinstance(data, dict) else []:
        meta = item.get("metadata", {}) if isinstance(item, dict) else {}
        name = meta.get("name", "")
        if not isinstance(name, str) or node_problem(name):
            continue
        labels = meta.get("labels") or {}
        allocatable = (item.get("status") or {}).get("allocatable") or {}
        gpus = next((allocatable[r] for r in resources if r in allocatable), "0")
        found.append(
            Node(
                name,
                gpus=int(gpus) if str(gpus).isdigit() else 0,
                labels=tuple((str(k), str(v)) for k, v in labels.items()),
            )
        )
    return found


def selected(node: Node, selection: Mapping[str, Any]) -> bool:
    """Whether ``node``'s labels satisfy a pod's ``nodeSelector`` / required node affinity
    (``In`` expressions) as :func:`envforge.fleet.k8s_select.selector` writes them."""
    labels = dict(node.labels)
    for key, value in selection.get("nodeSelector", {}).items():
        if labels.get(key) != value:
            return False
    affinity = selection.get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get(
        "nodeSelectorTerms", []
    )
    return not terms or any(
        all(labels.get(e["key"]) in e["values"] for e in t["matchExpressions"]) for t in terms
    )


def spots(
    nodes: Sequence[Node], arch: str, *, all_gpus: bool, what: str = "--every-node"
) -> tuple[Spot, ...]:
    """One spot per node; with ``all_gpus`` each node's GPU count (refused when unknown
    or none on a GPU arch)."""
    if not nodes:
        raise InvalidInput(
            f"{what}: no node for arch {arch}",
            hint="check the partition and features (sinfo -N -o '%N %P %f %G')",
        )
    if not all_gpus:
        return tuple(Spot(n.name) for n in nodes)
    bare = [n.name for n in nodes if not n.gpus and arch != CPU]
    if bare:
        raise InvalidInput(
            f"--gpus all: node {bare[0]} lists no GPU (gpu GRES) for arch {arch}",
            hint="give --gpus N, or leave that node out",
        )
    return tuple(Spot(n.name, n.gpus or 0) for n in nodes)
