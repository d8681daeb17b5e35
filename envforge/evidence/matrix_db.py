"""The certified-on matrix of the evidence store, aggregated in SQL (issue 21 §7).

:func:`envforge.evidence.matrix.aggregate` groups records in Python: right for the
files ``--evidence`` names and a fleet's reports, but over the store it would decode every
report (minutes at 1,000,000). Here the same :class:`~envforge.evidence.matrix.Matrix`
comes from the store's tallies (:mod:`envforge.evidence.tallies`: counts per cell,
product, stack, driver and outcome; per step its times with their counts, so the median
is exact) and, per cell, the newest :data:`~envforge.evidence.matrix.RUNS_PER_CELL` runs
and :data:`~envforge.evidence.matrix.FAILURES_PER_CELL` failures through the cell indexes:
what is decoded is a few rows per cell, whatever the store's size. Grouped ``by`` site or
node, each cell's groups come from ``node_tally`` (a row per cell, site, node and outcome).
"""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from envforge.core.jsonlimits import loads
from envforge.evidence import evidence_db, tallies
from envforge.evidence.matrix import (
    FAILURES_PER_CELL,
    RUNS_PER_CELL,
    STEP_ORDER,
    Cell,
    Column,
    Group,
    Matrix,
    Row,
    StepStat,
    check_by,
    groups_of,
    natural_key,
    row_order,
)
from envforge.evidence.records import Evidence, Problem

_CELL = f"vendor = ? AND arch = ? AND {tallies.COLUMN} = ?"
_ORDER = " ORDER BY created DESC, key DESC"


@dataclass
class _Tally:
    """What the tallies say of one cell (or row, or column)."""

    counts: Counter[str] = field(default_factory=Counter)
    products: Counter[str] = field(default_factory=Counter)
    stacks: Counter[str] = field(default_factory=Counter)
    drivers: set[str] = field(default_factory=set)

    def add(self, outcome: str, product: str, stack: str, driver: str, n: int) -> None:
        self.counts[outcome] += n
        self.products[product] += n
        self.stacks[stack] += n
        if driver:
            self.drivers.add(driver)


def _by_frequency(counts: Counter[str]) -> tuple[str, ...]:
    kept = [v for v in counts if v]
    return tuple(sorted(kept, key=lambda v: (-counts[v], v)))


def _middle(times: Sequence[float], counts: Sequence[int]) -> tuple[int, float, float]:
    """(count, median, max) of the times ``times`` (ascending) counted ``counts``: the
    median as :func:`statistics.median` gives it for the times repeated."""
    total = sum(counts)
    low_at, high_at = (total - 1) // 2, total // 2  # the two middle indexes (equal: odd)
    seen, low = 0, times[0]
    for value, n in zip(times, counts, strict=True):
        if seen <= low_at < seen + n:
            low = value
        if seen <= high_at < seen + n:
            return total, (low + value) / 2, times[-1]
        seen += n
    raise ValueError("no times")  # unreachable: the counts sum to total


@dataclass
class _Steps:
    """A cell's step statistics by name: (runs, median, max), and the statuses."""

    stats: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)

    def ordered(self, order: Sequence[str]) -> tuple[StepStat, ...]:
        return tuple(
            StepStat(
                name=name,
                runs=self.stats[name][0],
                median=round(self.stats[name][1], 3),
                max=round(self.stats[name][2], 3),
                outcomes={k: self.outcomes[name][k] for k in STEP_ORDER if self.outcomes[name][k]},
            )
            for name in order
        )


def _step_tallies(conn: sqlite3.Connection) -> dict[tuple[str, str, str], _Steps]:
    """Each cell's step statistics, read once in the tally's key order (cell, name, time,
    status): a step's times gathered while its name lasts, a time's statuses added up."""
    found: dict[tuple[str, str, str], _Steps] = defaultdict(_Steps)
    group: tuple[str, str, str, str] | None = None
    times: list[float] = []
    counts: list[int] = []
    statuses: Counter[str] = Counter()

    def close() -> None:
        if group is not None:
            steps = found[group[:3]]
            steps.stats[group[3]] = _middle(times, counts)
            steps.outcomes[group[3]] = statuses

    rows = conn.execute(
        "SELECT vendor, arch, col, name, seconds, status, n FROM step_tally "
        "ORDER BY vendor, arch, col, name, seconds, status"
    )
    for vendor, arch, column, name, seconds, status, n in rows:
        if group != (vendor, arch, column, name):
            close()
            group, times, counts, statuses = (vendor, arch, column, name), [], [], Counter()
        if times and times[-1] == seconds:
            counts[-1] += n
        else:
            times.append(seconds)
            counts.append(n)
        statuses[status] += n
    close()
    return found


def _records(conn: sqlite3.Connection, query: str, args: Sequence[str]) -> tuple[Evidence, ...]:
    rows = conn.execute(f"SELECT {', '.join(evidence_db.COLUMNS)} FROM reports {query}", args)
    return tuple(evidence_db.record_of(r) for r in rows)


def _step_order(
    conn: sqlite3.Connection, cell: Sequence[str], runs: Iterable[Evidence], names: Iterable[str]
) -> list[str]:
    """The cell's step names as the newest run that has each orders them (the newest
    run's order first); older runs are read only while a name is still missing."""
    wanted = set(names)
    order: list[str] = []

    def take(step_names: Iterable[str]) -> None:
        for name in step_names:
            if name in wanted:
                wanted.discard(name)
                order.append(name)

    for run in runs:
        take(s.name for s in run.steps)
    if wanted:
        for (steps,) in conn.execute(f"SELECT steps FROM reports WHERE {_CELL}{_ORDER}", cell):
            take(str(s.get("name")) for s in loads(steps))
            if not wanted:
                break
    return [*order, *sorted(wanted)]  # sorted: a name no row has (never, with the triggers)


def _cell(
    conn: sqlite3.Connection,
    key: tuple[str, str, str],
    tally: _Tally,
    steps: _Steps,
    groups: tuple[Group, ...],
) -> Cell:
    runs = _records(conn, f"WHERE {_CELL}{_ORDER} LIMIT {RUNS_PER_CELL}", key)
    failures = _records(
        conn, f"WHERE {_CELL} AND outcome != 'pass'{_ORDER} LIMIT {FAILURES_PER_CELL}", key
    )
    drivers = sorted(tally.drivers, key=natural_key)
    vendor, arch, column = key
    return Cell(
        row=f"{vendor}:{arch}",
        column=column,
        counts=dict(tally.counts),
        newest=runs[0].created,
        drivers=(drivers[0], drivers[-1]) if drivers else None,
        products=_by_frequency(tally.products),
        stacks=_by_frequency(tally.stacks),
        steps=steps.ordered(_step_order(conn, key, runs, steps.stats)),
        runs=runs,
        failures=failures,
        groups=groups,
    )


CellKey = tuple[str, str, str]
_Counts = dict[tuple[str, str], Counter[str]]


def _node_tallies(conn: sqlite3.Connection, by: str) -> tuple[dict[CellKey, _Counts], _Counts]:
    """Each cell's outcome counts per (site, node) (node "" when ``by`` is site), and the
    same over all cells, from ``node_tally``."""
    cells: dict[CellKey, _Counts] = defaultdict(lambda: defaultdict(Counter))
    overall: _Counts = defaultdict(Counter)
    rows = conn.execute("SELECT vendor, arch, col, site, node, outcome, n FROM node_tally")
    for vendor, arch, column, site, node, outcome, n in rows:
        group = (site, node if by == "node" else "")
        cells[(vendor, arch, column)][group][outcome] += n
        overall[group][outcome] += n
    return cells, overall


def _tallies(
    conn: sqlite3.Connection,
) -> Iterator[tuple[tuple[str, str, str], tuple[str, ...], int]]:
    rows = conn.execute(
        "SELECT vendor, arch, col, outcome, product, stack, driver, n FROM cell_tally"
    )
    for vendor, arch, column, outcome, product, stack, driver, n in rows:
        yield (vendor, arch, column), (outcome, product, stack, driver), int(n)


def store_matrix(
    conn: sqlite3.Connection, problems: tuple[Problem, ...] = (), by: str = ""
) -> Matrix:
    """The matrix of everything in the store, its cells' runs grouped ``by`` site or node
    (see the module docstring)."""
    check_by(by)
    cells: dict[tuple[str, str, str], _Tally] = defaultdict(_Tally)
    by_row: dict[str, _Tally] = defaultdict(_Tally)
    by_column: dict[str, _Tally] = defaultdict(_Tally)
    for key, (outcome, product, stack, driver), n in _tallies(conn):
        for tally in (cells[key], by_row[f"{key[0]}:{key[1]}"], by_column[key[2]]):
            tally.add(outcome, product, stack, driver, n)
    rows = tuple(
        Row(
            key=key,
            vendor=key.partition(":")[0],
            arch=key.partition(":")[2],
            products=_by_frequency(by_row[key].products),
            reports=sum(by_row[key].counts.values()),
        )
        for key in sorted(by_row, key=row_order)
    )
    columns = tuple(
        Column(
            key=key,
            stacks=_by_frequency(by_column[key].stacks),
            reports=sum(by_column[key].counts.values()),
        )
        for key in sorted(by_column, key=natural_key)
    )
    row_index = {r.key: i for i, r in enumerate(rows)}
    column_index = {c.key: i for i, c in enumerate(columns)}
    steps = _step_tallies(conn)
    by_cell, overall = _node_tallies(conn, by) if by else ({}, {})
    ordered = sorted(cells, key=lambda k: (row_index[f"{k[0]}:{k[1]}"], column_index[k[2]]))
    built = tuple(
        _cell(conn, k, cells[k], steps[k], groups_of(by_cell[k]) if by else ()) for k in ordered
    )
    return Matrix(rows, columns, built, 0, problems, by, groups_of(overall) if by else ())
