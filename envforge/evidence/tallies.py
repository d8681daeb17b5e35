"""Counts the database keeps beside the reports, so ``matrix`` reads tallies, not reports.

``cell_tally``: reports per (GPU vendor, arch, matrix column, outcome, product, stack,
driver); ``step_tally``: step results per (vendor, arch, column, step name, status,
seconds). Both are kept by triggers on ``reports`` (insert, delete, and the replacement of
a plain copy by a certificate of the same run), inside the writer's own transaction, so
they always agree with the rows whoever writes them. A step's median is exact from its
tally (each distinct time with its count). The matrix column is the recipe, else the
stack, else ``(unnamed)`` (:attr:`envforge.evidence.records.Evidence.column`).

A store made before these tables is migrated the first time it is opened
(:func:`migrate`): the tallies are counted from the rows, once, under the write lock,
and ``meta`` records it; a later open finds the mark and does nothing.

Indexes for the per-cell queries: the newest runs of a cell, and its newest runs that
did not pass (a partial index, so a cell of 100,000 passes costs no scan to find none).
"""

from __future__ import annotations

import sqlite3

#: The matrix column of a row of ``reports`` (as the cell indexes have it: a query must
#: name it in these very words to use them).
COLUMN = "COALESCE(NULLIF(recipe, ''), NULLIF(stack, ''), '(unnamed)')"
_CELL_KEY = ("vendor", "arch", "col", "outcome", "product", "stack", "driver")
_STEP = ("json_extract(j.value, '$.name')", "json_extract(j.value, '$.status')",
         "CAST(json_extract(j.value, '$.seconds') AS REAL)")
MARK = "tallies"
VERSION = "1"


def _column(r: str) -> str:
    """:data:`COLUMN` of the row ``r`` (``NEW``, ``OLD``, ``reports``)."""
    return f"COALESCE(NULLIF({r}.recipe, ''), NULLIF({r}.stack, ''), '(unnamed)')"


def _cell_values(r: str) -> str:
    return (f"{r}.vendor, {r}.arch, {_column(r)}, {r}.outcome, {r}.product, {r}.stack, "
            f"{r}.driver")


def _cell_match(r: str) -> str:
    values = (f"{r}.vendor", f"{r}.arch", _column(r), f"{r}.outcome", f"{r}.product",
              f"{r}.stack", f"{r}.driver")
    return " AND ".join(f"{k} = {v}" for k, v in zip(_CELL_KEY, values, strict=True))


def _add(r: str) -> str:
    return f"""
    INSERT INTO cell_tally VALUES ({_cell_values(r)}, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
    INSERT INTO step_tally SELECT {r}.vendor, {r}.arch, {_column(r)}, {", ".join(_STEP)}, 1
        FROM json_each({r}.steps) AS j WHERE 1 ON CONFLICT DO UPDATE SET n = n + 1;"""


def _take(r: str) -> str:
    cell = f"vendor = {r}.vendor AND arch = {r}.arch AND col = {_column(r)}"
    same = " AND ".join(f"{a} = step_tally.{b}" for a, b in
                        zip(_STEP, ("name", "status", "seconds"), strict=True))
    return f"""
    UPDATE cell_tally SET n = n - 1 WHERE {_cell_match(r)};
    DELETE FROM cell_tally WHERE {_cell_match(r)} AND n <= 0;
    UPDATE step_tally SET n = n - (SELECT COUNT(*) FROM json_each({r}.steps) AS j WHERE {same})
        WHERE {cell} AND (name, status, seconds) IN
            (SELECT {", ".join(_STEP)} FROM json_each({r}.steps) AS j);
    DELETE FROM step_tally WHERE {cell} AND n <= 0;"""


DDL = f"""
CREATE TABLE IF NOT EXISTS cell_tally (
    vendor TEXT NOT NULL, arch TEXT NOT NULL, col TEXT NOT NULL, outcome TEXT NOT NULL,
    product TEXT NOT NULL, stack TEXT NOT NULL, driver TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY ({", ".join(_CELL_KEY)})
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_tally (
    vendor TEXT NOT NULL, arch TEXT NOT NULL, col TEXT NOT NULL, name TEXT NOT NULL,
    status TEXT NOT NULL, seconds REAL NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (vendor, arch, col, name, status, seconds)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS tally_insert AFTER INSERT ON reports BEGIN {_add("NEW")}
END;
CREATE TRIGGER IF NOT EXISTS tally_delete AFTER DELETE ON reports BEGIN {_take("OLD")}
END;
CREATE TRIGGER IF NOT EXISTS tally_update AFTER UPDATE ON reports BEGIN {_take("OLD")}
{_add("NEW")}
END;
CREATE INDEX IF NOT EXISTS reports_by_cell
    ON reports (vendor, arch, {COLUMN}, created, key);
CREATE INDEX IF NOT EXISTS reports_failed_by_cell
    ON reports (vendor, arch, {COLUMN}, created, key) WHERE outcome != 'pass';
"""

_COUNT = f"""
DELETE FROM cell_tally;
DELETE FROM step_tally;
INSERT INTO cell_tally SELECT {_cell_values("reports")}, COUNT(*) FROM reports
    GROUP BY 1, 2, 3, 4, 5, 6, 7;
INSERT INTO step_tally SELECT reports.vendor, reports.arch, {_column("reports")},
    {", ".join(_STEP)}, COUNT(*) FROM reports, json_each(reports.steps) AS j
    GROUP BY 1, 2, 3, 4, 5, 6;
"""


def _marked(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (MARK,)).fetchone()
    return row is not None and row[0] == VERSION


def migrate(conn: sqlite3.Connection) -> None:
    """Count the tallies from the rows when this store has not yet (see the module
    docstring); one transaction, under the write lock, so two processes opening an old
    store together count it once."""
    if _marked(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _marked(conn):
            for statement in _COUNT.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                         (MARK, VERSION))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
