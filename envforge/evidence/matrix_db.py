"""The certified-on matrix of the evidence store, aggregated in SQL (issue 21 §7).

:func:`envforge.evidence.matrix.aggregate` groups records in Python: right for the
files ``--evidence`` names and a fleet's reports, but over the store it would decode every
report (minutes at 1,000,000). Here the same :class:`~envforge.evidence.matrix.Matrix`
comes from the store's tallies (:mod:`envforge.evidence.tallies`: counts per cell,
product, stack, driver and outcome; per step its times with their counts, so the median
is exact) and, per cell, the newest :data:`~envforge.evidence.matrix.RUNS_PER_CELL` runs
and :data:`~envforge.evidence.matrix.FAILURES_PER_CELL` failures through the cell indexes:
what is decoded is a few rows per cell, whatever the store's size.
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
    Matrix,
    Row,
    StepStat,
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


def _median(values: Sequence[tuple[float, int]]) -> float:
    """The median of ``values`` (distinct, ascending, each with its count), as
    :func:`statistics.median` gives it for the values repeated."""
    total = sum(n for _, n in values)

    def nth(index: int) -> float:
        seen = 0
        for value, n in values:
            seen += n
            if index < seen:
                return value
        raise IndexError(index)

    if total % 2:
        return nth(total // 2)
    return (nth(total // 2 - 1) + nth(total // 2)) / 2


@dataclass
class _Steps:
    """A cell's step tallies: per name, each time with its count, and the statuses."""

    times: dict[str, Counter[float]] = field(default_factory=dict)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, name: str, status: str, seconds: float, n: int) -> None:
        self.times.setdefault(name, Counter())[seconds] += n
        self.outcomes.setdefault(name, Counter())[status] += n

    def stats(self, order: Sequence[str]) -> tuple[StepStat, ...]:
        result = []
        for name in order:
            values = sorted(self.times[name].items())
            outcomes = self.outcomes[name]
            result.append(StepStat(
                name=name, runs=sum(n for _, n in values),
                median=round(_median(values), 3), max=round(values[-1][0], 3),
                outcomes={k: outcomes[k] for k in STEP_ORDER if outcomes[k]},
            ))
        return tuple(result)


def _step_tallies(conn: sqlite3.Connection) -> dict[tuple[str, str, str], _Steps]:
    found: dict[tuple[str, str, str], _Steps] = defaultdict(_Steps)
    rows = conn.execute(
        "SELECT vendor, arch, col, name, status, seconds, n FROM step_tally")
    for vendor, arch, column, name, status, seconds, n in rows:
        found[(vendor, arch, column)].add(name, status, float(seconds), int(n))
    return found


def _records(conn: sqlite3.Connection, query: str, args: Sequence[str]) -> tuple[Evidence, ...]:
    rows = conn.execute(f"SELECT {', '.join(evidence_db.COLUMNS)} FROM reports {query}", args)
    return tuple(evidence_db.record_of(r) for r in rows)


def _step_order(conn: sqlite3.Connection, cell: Sequence[str], runs: Iterable[Evidence],
                names: Iterable[str]) -> list[str]:
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


def _cell(conn: sqlite3.Connection, key: tuple[str, str, str], tally: _Tally,
          steps: _Steps) -> Cell:
    runs = _records(conn, f"WHERE {_CELL}{_ORDER} LIMIT {RUNS_PER_CELL}", key)
    failures = _records(
        conn, f"WHERE {_CELL} AND outcome != 'pass'{_ORDER} LIMIT {FAILURES_PER_CELL}", key)
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
        steps=steps.stats(_step_order(conn, key, runs, steps.times)),
        runs=runs,
        failures=failures,
    )


def _tallies(conn: sqlite3.Connection) -> Iterator[tuple[tuple[str, str, str], tuple[str, ...],
                                                         int]]:
    rows = conn.execute(
        "SELECT vendor, arch, col, outcome, product, stack, driver, n FROM cell_tally")
    for vendor, arch, column, outcome, product, stack, driver, n in rows:
        yield (vendor, arch, column), (outcome, product, stack, driver), int(n)


def store_matrix(conn: sqlite3.Connection, problems: tuple[Problem, ...] = ()) -> Matrix:
    """The matrix of everything in the store (see the module docstring)."""
    cells: dict[tuple[str, str, str], _Tally] = defaultdict(_Tally)
    by_row: dict[str, _Tally] = defaultdict(_Tally)
    by_column: dict[str, _Tally] = defaultdict(_Tally)
    for key, (outcome, product, stack, driver), n in _tallies(conn):
        for tally in (cells[key], by_row[f"{key[0]}:{key[1]}"], by_column[key[2]]):
            tally.add(outcome, product, stack, driver, n)
    rows = tuple(
        Row(key=key, vendor=key.partition(":")[0], arch=key.partition(":")[2],
            products=_by_frequency(by_row[key].products),
            reports=sum(by_row[key].counts.values()))
        for key in sorted(by_row, key=row_order)
    )
    columns = tuple(
        Column(key=key, stacks=_by_frequency(by_column[key].stacks),
               reports=sum(by_column[key].counts.values()))
        for key in sorted(by_column, key=natural_key)
    )
    row_index = {r.key: i for i, r in enumerate(rows)}
    column_index = {c.key: i for i, c in enumerate(columns)}
    steps = _step_tallies(conn)
    ordered = sorted(cells, key=lambda k: (row_index[f"{k[0]}:{k[1]}"], column_index[k[2]]))
    return Matrix(rows, columns, tuple(_cell(conn, k, cells[k], steps[k]) for k in ordered),
                  0, problems)
