"""Where a recipe ran, by site and node: what ``show --by-node`` says under "Evidence".

A group is one node of one site (the site's name, setting ``site``; the node a scheduler
ran the probe on: :mod:`envforge.core.sharing`), with its runs' outcomes and the GPU
archs it ran on; the groups with the most runs that did not pass come first, so a node
to drain heads the list. A run that names no site or node is in the group ``("", "")``.
Read from the evidence database's ``node_tally`` (:func:`envforge.evidence.evidence_db.node_rows`)
or from records (:func:`rows_of`, when signatures decide what counts).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from envforge.errors import printable

if TYPE_CHECKING:
    from envforge.evidence.records import Evidence

#: The outcomes in the order they are said (as :data:`envforge.evidence.model.OUTCOMES`).
OUTCOMES = ("pass", "fail", "hang", "crash", "oom", "no-device")


class NodeRow(NamedTuple):
    """Runs of one outcome on one GPU arch of one node: how many."""

    site: str
    node: str
    vendor: str
    arch: str
    outcome: str
    n: int


class Tallied:
    """Runs counted by outcome (``counts``: outcome -> runs), for a frozen dataclass with
    that field: a node's runs here, a matrix cell's or a site's in
    :mod:`envforge.evidence.matrix`."""

    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def bad(self) -> int:
        """The runs that did not pass."""
        return self.total - self.counts.get("pass", 0)

    @property
    def verdict(self) -> str:
        """``pass`` (every run, or none), ``fail`` (no run passed) or ``mixed``."""
        if not self.bad:
            return "pass"
        return "fail" if self.bad == self.total else "mixed"

    def count_dict(self) -> dict[str, int]:
        """Every outcome with its count, in :data:`OUTCOMES` order."""
        return {k: self.counts.get(k, 0) for k in OUTCOMES}


@dataclass(frozen=True)
class NodeGroup(Tallied):
    site: str
    node: str
    #: ``vendor:arch`` of its runs, most runs first.
    gpus: tuple[str, ...]
    counts: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "node": self.node,
            "gpus": list(self.gpus),
            "counts": self.count_dict(),
            "total": self.total,
            "verdict": self.verdict,
        }

    def line(self) -> str:
        """``lumi / nid001234: 3 runs (gfx90a): 2 pass, 1 fail`` (the names escaped:
        a report's text)."""
        where = f"{self.site or '(no site)'} / {self.node or '(node not recorded)'}"
        said = ", ".join(f"{self.counts[k]} {k}" for k in OUTCOMES if self.counts.get(k))
        gpus = ", ".join(g.partition(":")[2] or g for g in self.gpus)
        runs = f"{self.total} run{'' if self.total == 1 else 's'}"
        return printable(f"{where}: {runs} ({gpus}): {said}")


def node_groups(rows: Iterable[NodeRow]) -> tuple[NodeGroup, ...]:
    """The rows as one group per (site, node), the most runs that did not pass first,
    then the most runs, then by name."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    gpus: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for row in rows:
        key = (row.site, row.node)
        counts[key][row.outcome] += row.n
        gpus[key][f"{row.vendor}:{row.arch}"] += row.n
    groups = [
        NodeGroup(
            site,
            node,
            tuple(sorted(gpus[(site, node)], key=lambda g: (-gpus[(site, node)][g], g))),
            dict(c),
        )
        for (site, node), c in counts.items()
    ]
    return tuple(sorted(groups, key=lambda g: (-g.bad, -g.total, g.site, g.node)))


def rows_of(records: Iterable[Evidence]) -> Iterator[NodeRow]:
    """Each record as a row of one run."""
    for r in records:
        yield NodeRow(r.site, r.node, r.gpu.vendor, r.gpu.arch, r.outcome, 1)
