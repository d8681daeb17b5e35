"""The evidence store's database: ``$ENVFORGE_HOME/evidence.sqlite`` (SQLite, stdlib).

One row per report, keyed by the report's digest (:attr:`Evidence.key`, the sha256 of the
run): an import of the same report again changes nothing, and a certificate replaces a
plain copy of the same run (it adds the digest and the stack tag). The row holds the
fields ``show`` and ``matrix`` read, as columns, and the report as stored (a certificate
as issued, so its digest and signature still check), whole, in ``document``.

Concurrency: WAL journal, a 30 s busy timeout, and each batch written in one
``BEGIN IMMEDIATE`` transaction, so array tasks that share an ``ENVFORGE_HOME`` (on one
host; SQLite's locks need a local file system or one with working POSIX locks) can all
write. JSON files stay the exchange format (``evidence export``/``import``, ``--report``).

Files: ``certificates/`` (where Docker certifications are written) and ``reports/`` (the
store before this database: migrated on first use) are read into the database when the
folder changed since the last read (its mtime), each file once (table ``files``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envforge.core.fsutil import make_dirs, read_limited, refuse_special_file
from envforge.core.jsonlimits import loads
from envforge.core.lazy import LazyModule
from envforge.errors import BadPath, EnvforgeError, StorageUnavailable
from envforge.evidence import tallies
from envforge.evidence.certified_on import PassRow, host_key

if TYPE_CHECKING:
    from envforge.evidence.by_node import NodeRow
    from envforge.evidence.records import Evidence, Problem

#: ``show --by-node`` only.
_by_node = LazyModule("envforge.evidence.by_node")

# envforge.evidence.records (and the probe, host and certificate modules it reads) is
# imported by the functions that make or read records, not here: ``show`` opens the
# database and reads two indexes, and starts faster without them.

NAME = "evidence.sqlite"
SCHEMA_VERSION = "1"
#: The columns of ``reports`` besides ``document``, in the order rows are read.
COLUMNS = (
    "key",
    "rank",
    "kind",
    "recipe",
    "recipe_hash",
    "stack",
    "outcome",
    "created",
    "level",
    "vendor",
    "arch",
    "product",
    "pci_id",
    "gpu_count",
    "driver",
    "kernel",
    "torch",
    "runtime",
    "python",
    "envforge_version",
    "seconds",
    "host",
    "host_key",
    "certificate",
    "signer",
    "site",
    "node",
    "steps",
)
#: Columns added since the table was first made: a store without them gets them, empty,
#: when it is opened (:func:`_add_columns`).
ADDED = ("site", "node")
_TYPES = {
    "key": "TEXT PRIMARY KEY",
    "rank": "INTEGER NOT NULL",
    "gpu_count": "INTEGER NOT NULL",
    "seconds": "REAL NOT NULL",
    **dict.fromkeys(ADDED, "TEXT NOT NULL DEFAULT ''"),
}
_DDL = f"""
CREATE TABLE IF NOT EXISTS reports (
    {", ".join(f"{c} {_TYPES.get(c, 'TEXT NOT NULL')}" for c in COLUMNS)},
    document TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_by_recipe ON reports (recipe, outcome);
CREATE INDEX IF NOT EXISTS reports_by_created ON reports (created DESC, key DESC);
-- a group's newest pass, found again when its newest row leaves (tallies.py)
CREATE INDEX IF NOT EXISTS reports_passes
    ON reports (recipe, vendor, arch, product, driver, host_key, created) WHERE outcome = 'pass';
CREATE TABLE IF NOT EXISTS files (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_UPSERT = (
    f"INSERT INTO reports ({', '.join(COLUMNS)}, document) "
    f"VALUES ({', '.join('?' * (len(COLUMNS) + 1))}) "
    f"ON CONFLICT(key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*COLUMNS[1:], "document"))
    + " WHERE excluded.rank < {stored}"
)


def _upsert(rank: Mapping[str, int]) -> str:
    """:data:`_UPSERT` comparing with the stored row's kind's rank *now* (a row keeps the
    number its kind had when it was written; a kind added since moves the others)."""
    cases = " ".join(f"WHEN '{kind}' THEN {n}" for kind, n in rank.items() if "'" not in kind)
    return _UPSERT.replace("{stored}", f"(CASE reports.kind {cases} ELSE reports.rank END)")


def db_path(state: Path) -> Path:
    return state / NAME


#: The files SQLite keeps beside the database.
_COMPANIONS = ("-wal", "-shm", "-journal")


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """The database at ``path`` (created with its schema when missing), closed after.

    The database and its journal files must be regular files (or absent): a FIFO or
    device there is refused (:func:`~envforge.core.fsutil.refuse_special_file`, exit 2),
    never opened. An SQLite error while it is open (this block's or the caller's queries)
    is one line naming the file: a file that is no database is exit 2 (move it away and
    the store starts empty), any other (I/O, locked, read-only) exit 4.
    """
    make_dirs(path.parent)
    for suffix in ("", *_COMPANIONS):
        refuse_special_file(path.with_name(path.name + suffix))
    try:
        with closing(sqlite3.connect(path, timeout=30.0, isolation_level=None)) as conn:
            conn.execute("PRAGMA busy_timeout = 30000")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(_DDL)
            _add_columns(conn)
            conn.executescript(tallies.DDL)
            tallies.migrate(conn)
            yield conn
    except sqlite3.DatabaseError as exc:
        raise _database_error(exc, path) from None


def _missing_columns(conn: sqlite3.Connection) -> list[str]:
    have = {str(r[1]) for r in conn.execute("PRAGMA table_info(reports)")}
    return [c for c in ADDED if c not in have]


def _add_columns(conn: sqlite3.Connection) -> None:
    """:data:`ADDED`'s columns on a store made before them (empty for its rows), under
    the write lock: two processes opening it together add them once."""
    if not _missing_columns(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for column in _missing_columns(conn):
            conn.execute(f"ALTER TABLE reports ADD COLUMN {column} {_TYPES[column]}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _database_error(exc: sqlite3.DatabaseError, path: Path) -> EnvforgeError:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    note = f"the evidence store {path} cannot be used: {reason}"
    if "not a database" in reason or "malformed" in reason:
        return BadPath(
            note,
            path=str(path),
            hint=f"move {path} away (the store starts empty; `evidence import` "
            "brings reports back), or set ENVFORGE_HOME to another folder",
        )
    return StorageUnavailable(
        note, path=str(path), hint="check the file system, or set ENVFORGE_HOME to another folder"
    )


def _created(record: Evidence) -> str:
    return record.created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _row(record: Evidence, document: str, rank: Mapping[Any, int]) -> tuple[Any, ...]:
    return (
        record.key,
        rank[record.kind],
        record.kind,
        record.recipe,
        record.recipe_hash,
        record.stack,
        record.outcome,
        _created(record),
        record.level,
        record.gpu.vendor,
        record.gpu.arch,
        record.gpu.product,
        record.pci_id,
        record.gpu_count,
        record.driver,
        record.kernel,
        record.torch,
        record.runtime,
        record.python,
        record.envforge_version,
        record.seconds,
        record.host,
        host_key(record.host, record.kernel, record.driver, record.gpu.product),
        record.certificate,
        record.signer,
        record.site,
        record.node,
        json.dumps([s.to_dict() for s in record.steps], separators=(",", ":")),
        document,
    )


def _fresh(
    pending: Iterable[tuple[Evidence, str]], there: set[str], rank: Mapping[Any, int]
) -> dict[str, tuple[Evidence, str]]:
    """The (record, document) each key not ``there`` ends up with, as :data:`_UPSERT`
    decides (the first copy, unless a later one ranks higher)."""
    chosen: dict[str, tuple[Evidence, str]] = {}
    for record, document in pending:
        first = chosen.get(record.key)
        if record.key not in there and (first is None or rank[record.kind] < rank[first[0].kind]):
            chosen[record.key] = (record, document)
    return chosen


def _steps(fresh: Iterable[tuple[Evidence, str]]) -> Iterator[tallies.StepKey]:
    """Every step result of ``fresh`` as ``step_tally`` counts it (its time as :func:`_row`
    stores it: ``StepResult.to_dict``'s, whose JSON text is its ``repr``)."""
    for record, _ in fresh:
        vendor, arch, column = record.gpu.vendor, record.gpu.arch, record.column
        for step in record.steps:
            yield (vendor, arch, column, step.name, step.status, repr(round(step.seconds, 3)))


def add(conn: sqlite3.Connection, items: Iterable[tuple[Evidence, str]]) -> list[Evidence]:
    """Store each (record, document text) in one transaction; the records that were new.

    Which keys are new is asked inside the transaction (``BEGIN IMMEDIATE`` holds the
    write lock), so a concurrent import of the same reports counts each once. The new
    rows go in by ``executemany`` and are counted into the tallies after, set-based, in
    the same transaction (:func:`tallies.insert_counted`); a key already there goes
    through :data:`_UPSERT` and the triggers (a certificate replaces its plain copy). A
    record whose key comes twice: its first copy is kept, unless a later one ranks
    higher. A 64 MB page cache: 100,000 rows into the indexes took half the CPU of the
    default 2 MB (bench/results-evidence-db.md)."""
    from envforge.evidence.kinds import ranks  # noqa: PLC0415 - see the imports

    rank = ranks()
    upsert = _upsert(rank)
    pending = list(items)
    conn.execute("PRAGMA cache_size = -65536")
    conn.execute("BEGIN IMMEDIATE")
    try:
        there = known(conn, list({record.key: None for record, _ in pending}))
        fresh = _fresh(pending, there, rank).values()
        tallies.insert_counted(
            conn,
            upsert,
            (_row(record, document, rank) for record, document in fresh),
            _steps(fresh),
        )
        conn.executemany(
            upsert,
            (_row(record, document, rank) for record, document in pending if record.key in there),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    added: list[Evidence] = []
    for record, _ in pending:
        if record.key not in there:
            there.add(record.key)
            added.append(record)
    return added


def known(conn: sqlite3.Connection, keys: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        rows = conn.execute(
            f"SELECT key FROM reports WHERE key IN ({', '.join('?' * len(chunk))})", chunk
        )
        found.update(r[0] for r in rows)
    return found


def record_of(row: Sequence[Any]) -> Evidence:
    """A row of ``reports`` (:data:`COLUMNS`, in order) as its :class:`Evidence`."""
    from envforge.evidence.records import Evidence, Gpu, parse_time  # noqa: PLC0415
    from envforge.probe.report import StepResult  # noqa: PLC0415 - see the imports

    v = dict(zip(COLUMNS, row, strict=True))
    return Evidence(
        key=v["key"],
        kind=v["kind"],
        recipe=v["recipe"],
        recipe_hash=v["recipe_hash"],
        stack=v["stack"],
        outcome=v["outcome"],
        created=parse_time(v["created"]),
        level=v["level"],
        gpu=Gpu(v["vendor"], v["arch"], v["product"]),
        gpu_count=v["gpu_count"],
        driver=v["driver"],
        kernel=v["kernel"],
        torch=v["torch"],
        runtime=v["runtime"],
        python=v["python"],
        envforge_version=v["envforge_version"],
        seconds=v["seconds"],
        steps=tuple(StepResult.from_dict(s) for s in loads(v["steps"])),
        certificate=v["certificate"],
        pci_id=v["pci_id"],
        host=v["host"],
        signer=v["signer"],
        site=v["site"],
        node=v["node"],
    )


def records(conn: sqlite3.Connection, recipe: str | None = None) -> tuple[Evidence, ...]:
    """Every record (of ``recipe``), newest first."""
    query = f"SELECT {', '.join(COLUMNS)} FROM reports"
    args: tuple[str, ...] = ()
    if recipe is not None:
        query, args = query + " WHERE recipe = ?", (recipe,)
    rows = conn.execute(query + " ORDER BY created DESC, key DESC", args)
    return tuple(record_of(r) for r in rows)


def pass_rows(conn: sqlite3.Connection, recipe: str) -> tuple[int, list[PassRow]]:
    """(runs of ``recipe``, its passing runs as :class:`PassRow`) for ``show``: one row
    per distinct (vendor, arch, product, driver, host) with its newest time, from the
    tally the triggers keep (:mod:`envforge.evidence.tallies`): a few rows, whatever the
    store's size; :func:`~envforge.evidence.certified_on.describe` reads no more than that."""
    (runs,) = conn.execute(
        "SELECT COALESCE(SUM(n), 0) FROM show_tally WHERE recipe = ?", (recipe,)
    ).fetchone()
    rows = conn.execute(
        "SELECT vendor, arch, product, driver, host_key, newest FROM show_tally "
        "WHERE recipe = ? AND passed = 1",
        (recipe,),
    )
    return int(runs), [PassRow(*r) for r in rows]


def node_rows(conn: sqlite3.Connection, recipe: str) -> list[NodeRow]:
    """``recipe``'s runs per (site, node, vendor, arch, outcome), from the tally the
    triggers keep (its matrix column: the recipe's name): ``show --by-node``."""
    rows = conn.execute(
        "SELECT site, node, vendor, arch, outcome, SUM(n) FROM node_tally WHERE col = ? "
        "GROUP BY 1, 2, 3, 4, 5",
        (recipe,),
    )
    return [_by_node.NodeRow(*r) for r in rows]


def documents(conn: sqlite3.Connection) -> list[str]:
    """Every stored report's text (what the store keeps, for checks of its content)."""
    return [r[0] for r in conn.execute("SELECT document FROM reports ORDER BY key")]


# --------------------------------------------------------------------------- files


def _meta(conn: sqlite3.Connection, name: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def sync_folder(
    conn: sqlite3.Connection,
    folder: Path,
    redact: Callable[[str], str],
    *,
    signatures: bool = False,
) -> tuple[Problem, ...]:
    """Read the ``*.json`` report files of ``folder`` not read before into the database
    (nothing when the folder's mtime did not change since the last read); the files that
    were skipped, and why."""
    from envforge.evidence import records as rec  # noqa: PLC0415 - see the imports

    try:
        stamp = str(folder.stat().st_mtime_ns)
    except OSError:
        return ()
    mark = f"mtime:{folder}"
    if _meta(conn, mark) == stamp:
        return ()
    seen = {r[0] for r in conn.execute("SELECT name FROM files")}
    new = sorted(
        str(folder / e.name)
        for e in os.scandir(folder)
        if e.name.endswith(".json") and str(folder / e.name) not in seen
    )
    problems: list[Problem] = []
    items: list[tuple[Evidence, str]] = []
    for name in new:
        try:
            text = read_limited(Path(name), rec.MAX_FILE_BYTES).decode("utf-8")
            items.append((rec.parse_document(loads(text), redact, signatures=signatures), text))
        except rec.EvidenceError as exc:
            problems.append(rec.Problem(name, exc.message))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            problems.append(rec.Problem(name, f"cannot read: {exc}"))
    add(conn, items)
    conn.executemany("INSERT OR IGNORE INTO files (name) VALUES (?)", [(n,) for n in new])
    conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (mark, stamp))
    return tuple(problems)
