"""Counts the database keeps beside the reports, so ``matrix`` and ``show`` read tallies,
not reports.

``show_tally``: runs per recipe, and its passing runs per (GPU vendor, arch, product,
driver, host) with the newest time (what ``show``'s "certified on" line says);
``cell_tally``: reports per (vendor, arch, matrix column, outcome, product, stack,
driver); ``step_tally``: step results per (vendor, arch, column, step name, status,
seconds); ``node_tally``: reports per (vendor, arch, column, site, node, outcome), what
``matrix --by`` and ``show --by-node`` read. They are kept by triggers on ``reports``
(insert, delete, and the replacement of a plain copy by a certificate of the same run),
inside the writer's own transaction, so they always agree with the rows whoever writes
them. A batch of new rows (``evidence import``, ``fleet collect``) pauses the triggers
and is counted once after its inserts, in the same transaction (:func:`insert_counted`:
one upsert per tally key, not per row and step). A step's median is exact from its
tally (each distinct time with its count). The matrix column is the recipe, else the
stack, else ``(unnamed)`` (:attr:`envforge.evidence.records.Evidence.column`).

A store made before these tables, or by a version whose tallies differ (``meta``'s mark
is not :data:`VERSION`), is migrated the first time it is opened (:func:`migrate`): its
triggers and tallies are made again and counted from the rows, once, under the write
lock, and the mark is set; a later open finds the mark and does nothing. A store of a
version that counts the same but for ``node_tally`` (:data:`SAME_COUNTS`) has its
triggers made again and ``node_tally`` counted.

Indexes for the per-cell queries: the newest runs of a cell, and its newest runs that
did not pass (a partial index, so a cell of 100,000 passes costs no scan to find none).
"""

from __future__ import annotations

import sqlite3
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

#: The matrix column of a row of ``reports`` (as the cell indexes have it: a query must
#: name it in these very words to use them).
COLUMN = "COALESCE(NULLIF(recipe, ''), NULLIF(stack, ''), '(unnamed)')"
_CELL_KEY = ("vendor", "arch", "col", "outcome", "product", "stack", "driver")
_STEP = (
    "json_extract(j.value, '$.name')",
    "json_extract(j.value, '$.status')",
    "CAST(json_extract(j.value, '$.seconds') AS REAL)",
)
MARK = "tallies"
#: 1: cell and step tallies; 2: show_tally, step_tally keyed by time; 3: the triggers
#: pause for :func:`insert_counted` (the same counts as 2); 4: node_tally
VERSION = "4"
SAME_COUNTS = ("2", "3")
_NODE_KEY = ("vendor", "arch", "col", "site", "node", "outcome")


def _column(r: str) -> str:
    """:data:`COLUMN` of the row ``r`` (``NEW``, ``OLD``, ``reports``)."""
    return f"COALESCE(NULLIF({r}.recipe, ''), NULLIF({r}.stack, ''), '(unnamed)')"


def _cell_values(r: str) -> str:
    return f"{r}.vendor, {r}.arch, {_column(r)}, {r}.outcome, {r}.product, {r}.stack, {r}.driver"


def _cell_match(r: str) -> str:
    values = (
        f"{r}.vendor",
        f"{r}.arch",
        _column(r),
        f"{r}.outcome",
        f"{r}.product",
        f"{r}.stack",
        f"{r}.driver",
    )
    return " AND ".join(f"{k} = {v}" for k, v in zip(_CELL_KEY, values, strict=True))


def _node_values(r: str) -> str:
    return f"{r}.vendor, {r}.arch, {_column(r)}, {r}.site, {r}.node, {r}.outcome"


def _node_match(r: str) -> str:
    values = (f"{r}.vendor", f"{r}.arch", _column(r), f"{r}.site", f"{r}.node", f"{r}.outcome")
    return " AND ".join(f"{k} = {v}" for k, v in zip(_NODE_KEY, values, strict=True))


_SHOW_KEY = ("recipe", "passed", "vendor", "arch", "product", "driver", "host_key")


def _show_values(r: str) -> tuple[str, ...]:
    """``show_tally``'s key of the row ``r``: a run that did not pass counts for its
    recipe only (its GPU and host are not what ``show`` reads)."""
    passed = f"({r}.outcome = 'pass')"
    return (
        f"{r}.recipe",
        passed,
        *(f"CASE WHEN {passed} THEN {r}.{c} ELSE '' END" for c in _SHOW_KEY[2:]),
    )


def _show_match(r: str) -> str:
    return " AND ".join(f"{k} = {v}" for k, v in zip(_SHOW_KEY, _show_values(r), strict=True))


def _add(r: str) -> str:
    return f"""
    INSERT INTO show_tally VALUES ({", ".join(_show_values(r))}, 1,
            CASE WHEN {r}.outcome = 'pass' THEN {r}.created ELSE '' END)
        ON CONFLICT DO UPDATE SET n = n + 1, newest = MAX(newest, excluded.newest);
    INSERT INTO cell_tally VALUES ({_cell_values(r)}, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
    INSERT INTO node_tally VALUES ({_node_values(r)}, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
    INSERT INTO step_tally SELECT {r}.vendor, {r}.arch, {_column(r)}, {", ".join(_STEP)}, 1
        FROM json_each({r}.steps) AS j WHERE 1 ON CONFLICT DO UPDATE SET n = n + 1;"""


def _take(r: str) -> str:
    cell = f"vendor = {r}.vendor AND arch = {r}.arch AND col = {_column(r)}"
    same = " AND ".join(
        f"{a} = step_tally.{b}" for a, b in zip(_STEP, ("name", "status", "seconds"), strict=True)
    )
    newest = " AND ".join(f"{c} = {r}.{c}" for c in _SHOW_KEY[2:])
    return f"""
    UPDATE show_tally SET n = n - 1 WHERE {_show_match(r)};
    DELETE FROM show_tally WHERE {_show_match(r)} AND n <= 0;
    UPDATE show_tally SET newest = COALESCE((SELECT MAX(created) FROM reports
            WHERE recipe = {r}.recipe AND outcome = 'pass' AND {newest}), '')
        WHERE {_show_match(r)} AND {r}.outcome = 'pass' AND newest = {r}.created;
    UPDATE cell_tally SET n = n - 1 WHERE {_cell_match(r)};
    DELETE FROM cell_tally WHERE {_cell_match(r)} AND n <= 0;
    UPDATE node_tally SET n = n - 1 WHERE {_node_match(r)};
    DELETE FROM node_tally WHERE {_node_match(r)} AND n <= 0;
    UPDATE step_tally SET n = n - (SELECT COUNT(*) FROM json_each({r}.steps) AS j WHERE {same})
        WHERE {cell} AND (name, status, seconds) IN
            (SELECT {", ".join(_STEP)} FROM json_each({r}.steps) AS j);
    DELETE FROM step_tally WHERE {cell} AND n <= 0;"""


#: The tallies (their columns in this order since version 1: older code counting them
#: again, with positional inserts, still fills them right).
_TABLES = (
    f"""CREATE TABLE IF NOT EXISTS show_tally (
    recipe TEXT NOT NULL, passed INTEGER NOT NULL, vendor TEXT NOT NULL, arch TEXT NOT NULL,
    product TEXT NOT NULL, driver TEXT NOT NULL, host_key TEXT NOT NULL, n INTEGER NOT NULL,
    newest TEXT NOT NULL,
    PRIMARY KEY ({", ".join(_SHOW_KEY)})
) WITHOUT ROWID""",
    f"""CREATE TABLE IF NOT EXISTS cell_tally (
    vendor TEXT NOT NULL, arch TEXT NOT NULL, col TEXT NOT NULL, outcome TEXT NOT NULL,
    product TEXT NOT NULL, stack TEXT NOT NULL, driver TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY ({", ".join(_CELL_KEY)})
) WITHOUT ROWID""",
    # keyed in time order within a step, so a step's median is read in key order
    """CREATE TABLE IF NOT EXISTS step_tally (
    vendor TEXT NOT NULL, arch TEXT NOT NULL, col TEXT NOT NULL, name TEXT NOT NULL,
    status TEXT NOT NULL, seconds REAL NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (vendor, arch, col, name, seconds, status)
) WITHOUT ROWID""",
    f"""CREATE TABLE IF NOT EXISTS node_tally (
    vendor TEXT NOT NULL, arch TEXT NOT NULL, col TEXT NOT NULL, site TEXT NOT NULL,
    node TEXT NOT NULL, outcome TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY ({", ".join(_NODE_KEY)})
) WITHOUT ROWID""",
)
#: While this table has a row (only ever inside :func:`insert_counted`'s transaction, so
#: no other connection sees it), inserting and updating rows leaves the tallies alone.
_PAUSE = "CREATE TABLE IF NOT EXISTS tally_pause (paused INTEGER NOT NULL)"
_UNPAUSED = "WHEN NOT EXISTS (SELECT 1 FROM tally_pause)"
_TRIGGERS = {
    "tally_insert": f"AFTER INSERT ON reports {_UNPAUSED} BEGIN {_add('NEW')}\nEND",
    "tally_delete": f"AFTER DELETE ON reports BEGIN {_take('OLD')}\nEND",
    "tally_update": f"AFTER UPDATE ON reports {_UNPAUSED} BEGIN {_take('OLD')}\n{_add('NEW')}\nEND",
}
_CREATE = (
    *_TABLES,
    _PAUSE,
    *(f"CREATE TRIGGER IF NOT EXISTS {name} {body}" for name, body in _TRIGGERS.items()),
    f"CREATE INDEX IF NOT EXISTS reports_by_cell ON reports (vendor, arch, {COLUMN}, created, key)",
    f"""CREATE INDEX IF NOT EXISTS reports_failed_by_cell
    ON reports (vendor, arch, {COLUMN}, created, key) WHERE outcome != 'pass'""",
)
#: What :func:`envforge.evidence.evidence_db.connect` runs on every open (all ``IF NOT
#: EXISTS``: nothing is done twice); :func:`migrate` makes a store from before current.
DDL = "".join(f"{statement};\n" for statement in _CREATE)


def _node_count(where: str) -> str:
    return f"""INSERT INTO node_tally SELECT {_node_values("reports")}, COUNT(*) FROM reports
    WHERE {where} GROUP BY 1, 2, 3, 4, 5, 6 ON CONFLICT DO UPDATE SET n = n + excluded.n"""


def _counts(where: str) -> tuple[str, ...]:
    """The statements that add the rows of ``reports`` matching ``where`` to the tallies
    (set-based: one upsert per tally key, not per row)."""
    return (
        f"""INSERT INTO show_tally SELECT {", ".join(_show_values("reports"))}, COUNT(*),
    MAX(CASE WHEN outcome = 'pass' THEN created ELSE '' END) FROM reports WHERE {where}
    GROUP BY 1, 2, 3, 4, 5, 6, 7
    ON CONFLICT DO UPDATE SET n = n + excluded.n, newest = MAX(newest, excluded.newest)""",
        f"""INSERT INTO cell_tally SELECT {_cell_values("reports")}, COUNT(*) FROM reports
    WHERE {where} GROUP BY 1, 2, 3, 4, 5, 6, 7 ON CONFLICT DO UPDATE SET n = n + excluded.n""",
        _node_count(where),
        f"""INSERT INTO step_tally SELECT reports.vendor, reports.arch, {_column("reports")},
    {", ".join(_STEP)}, COUNT(*) FROM reports, json_each(reports.steps) AS j WHERE {where}
    GROUP BY 1, 2, 3, 4, 5, 6 ON CONFLICT DO UPDATE SET n = n + excluded.n""",
    )


_COUNT = _counts("1")
#: The show, cell and node tallies of a batch, from its rows. Its step tally is counted in
#: Python: SQL's GROUP BY sorts every step of the batch (100,000 reports: 1,000,000
#: steps, ~5 s of CPU here), a ``Counter`` does not.
_COUNT_SINCE = _counts("reports.rowid > ?")[:3]
#: A step's time as the triggers have it: its JSON text read by SQLite's JSON parser
#: (the very conversion ``json_extract`` makes of the stored steps, to the last bit).
_STEP_UPSERT = (
    "INSERT INTO step_tally VALUES (?, ?, ?, ?, ?, CAST(json_extract(?, '$') "
    "AS REAL), ?) ON CONFLICT DO UPDATE SET n = n + excluded.n"
)
#: Past this rowid SQLite may give new rows smaller ones (it picks at random once the
#: largest is 2**63 - 1): :func:`insert_counted` then leaves the counting to the triggers.
_ROWID_ROOM = 2**62

#: A step result as ``step_tally`` counts it: (vendor, arch, matrix column, step name,
#: status, the JSON text of its seconds as stored in the row's ``steps``).
StepKey = tuple[str, str, str, str, str, str]


def insert_counted(
    conn: sqlite3.Connection,
    statement: str,
    rows: Iterable[Sequence[Any]],
    steps: Iterable[StepKey],
) -> None:
    """Run ``statement`` (an insert into ``reports``) for each of ``rows``, whose keys are
    new to the store and distinct, and count them into the tallies once, after: the
    triggers do not fire for them. ``steps``: every step result of ``rows``, as stored.
    Inside the caller's transaction (holding the write lock), so the rows and their
    counts are committed together, or neither. The rows new to ``reports`` are the ones
    past its largest rowid before (SQLite gives a new row the largest rowid plus one)."""
    (before,) = conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM reports").fetchone()
    if before >= _ROWID_ROOM:
        conn.executemany(statement, rows)
        return
    conn.execute("INSERT INTO tally_pause VALUES (1)")
    conn.executemany(statement, rows)
    conn.execute("DELETE FROM tally_pause")
    for count in _COUNT_SINCE:
        conn.execute(count, (before,))
    conn.executemany(_STEP_UPSERT, ((*key, n) for key, n in Counter(steps).items()))


#: From how many reports counting them is announced (it takes a while: 1,000,000
#: reports, about two minutes on a busy 2-CPU machine).
ANNOUNCE_FROM = 20_000


def _announce(conn: sqlite3.Connection) -> None:
    (rows,) = conn.execute("SELECT COUNT(*) FROM reports").fetchone()
    if rows >= ANNOUNCE_FROM:
        sys.stderr.write(
            f"envforge: counting the evidence store's {rows:,} reports once "
            "(a store from an earlier version)...\n"
        )
        sys.stderr.flush()


def _mark(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (MARK,)).fetchone()
    return None if row is None else str(row[0])


def _remake(conn: sqlite3.Connection, *, count: bool) -> None:
    """This version's triggers (and its tallies counted from the rows: all of them when
    ``count``, else ``node_tally``, new in version 4) in place of an older version's."""
    for name in _TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    _announce(conn)
    for table in ("show_tally", "cell_tally", "step_tally", "node_tally")[0 if count else 3 :]:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in _CREATE:
        conn.execute(statement)
    for statement in _COUNT if count else (_node_count("1"),):
        conn.execute(statement)


def migrate(conn: sqlite3.Connection) -> None:
    """Count the tallies from the rows when this store has not yet (see the module
    docstring); one transaction, under the write lock, so two processes opening an old
    store together count it once. A store of :data:`SAME_COUNTS` only has its triggers
    made again (its tallies count what this version's do)."""
    if _mark(conn) == VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        mark = _mark(conn)
        if mark != VERSION:
            _remake(conn, count=mark not in SAME_COUNTS)
            conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (MARK, VERSION))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
