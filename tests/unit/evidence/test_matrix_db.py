"""The store's tallies (issue 21 §7): the matrix aggregated in SQL is the matrix the
records give (the same ``matrix.json``), and ``show``'s rows are what the reports say,
through imports, a certificate replacing its plain copy, deletions, updates, and a store
made before the tallies (counted once when opened)."""

from __future__ import annotations

import gc
import json
import sqlite3
import statistics
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from envforge.evidence import evidence_db, tallies
from envforge.evidence.evidence_store import import_documents, opened, read_store
from envforge.evidence.matrix import RUNS_PER_CELL, aggregate
from envforge.evidence.matrix_db import _step_tallies, store_matrix
from envforge.evidence.records import Evidence, Redactor, parse_document
from envforge.probe.report import StepResult
from tests.helpers.matrix_synth import corpus, make_certificate, make_report

QUIET = Redactor(())
NOW = datetime(2026, 11, 26, tzinfo=timezone.utc)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _both() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the matrix from the records, the matrix from the tallies), as ``matrix.json``."""
    expected = aggregate(read_store()).to_dict(NOW)
    with opened() as (conn, problems):
        got = store_matrix(conn, problems).to_dict(NOW)
    return expected, got


def _show_agrees() -> int:
    """Assert that ``show``'s tally says what the rows say, for every recipe; how many
    recipes there were."""
    with opened() as (conn, _problems):
        recipes = [r[0] for r in conn.execute("SELECT DISTINCT recipe FROM reports")]
        for recipe in recipes:
            (runs,) = conn.execute(
                "SELECT COUNT(*) FROM reports WHERE recipe = ?", (recipe,)
            ).fetchone()
            rows = conn.execute(
                "SELECT vendor, arch, product, driver, host_key, MAX(created) FROM reports "
                "WHERE recipe = ? AND outcome = 'pass' GROUP BY 1, 2, 3, 4, 5",
                (recipe,),
            )
            got_runs, passes = evidence_db.pass_rows(conn, recipe)
            assert (got_runs, sorted(passes)) == (runs, sorted(tuple(r) for r in rows))
        assert evidence_db.pass_rows(conn, "no-such-recipe") == (0, [])
    return len(recipes)


def _varied(n: int) -> list[tuple[str, object]]:
    """Reports at both levels, with an extra step in some, equal times in others."""
    docs: list[tuple[str, object]] = []
    for i, spec in enumerate(corpus(n, seed=5)):
        report = make_report(replace(spec, level="quick" if i % 4 == 0 else "full"))
        if i % 7 == 0:  # a step only some runs have, at the end
            report = replace(
                report, steps=(*report.steps, StepResult("check:extra.py", "pass", 0.25))
            )
        docs.append((f"r{i}", json.loads(report.to_json())))
    return docs


def test_the_store_matrix_is_the_records_matrix(home: Path) -> None:
    import_documents(_varied(400), redact=QUIET)
    expected, got = _both()
    assert got == expected
    assert got["reports"] == 400
    assert any(len(c["runs"]) == RUNS_PER_CELL for c in got["cells"])
    assert any("check:extra.py" in [s["name"] for s in c["steps"]] for c in got["cells"])


def test_a_certificate_replacing_its_report_and_a_deletion_keep_the_tallies(home: Path) -> None:
    specs = corpus(60, seed=8)
    reports = [replace(make_report(s), target="sha256:" + "ab" * 32) for s in specs]  # images
    import_documents(
        [(f"r{i}", json.loads(r.to_json())) for i, r in enumerate(reports)], redact=QUIET
    )
    # the same runs again as certificates, under another stack tag: the rows change stack
    certs = [
        (f"c{i}", make_certificate(replace(s, stack="torch2.13.0-cpu-py3.11"), r))
        for i, (s, r) in enumerate(zip(specs[:20], reports, strict=False))
    ]
    assert len(import_documents(certs, redact=QUIET).added) == 0  # replaced, not added
    expected, got = _both()
    assert got == expected
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        conn.execute("DELETE FROM reports WHERE rowid % 3 = 0")
        conn.execute("UPDATE reports SET outcome = 'fail', steps = '[]' WHERE rowid % 5 = 1")
    expected, got = _both()
    assert got == expected
    assert got["reports"] == 40
    assert _show_agrees() > 2


def _tallies(db: Path) -> list[list[tuple[Any, ...]]]:
    with sqlite3.connect(db) as conn:
        return [
            sorted(conn.execute(f"SELECT * FROM {t}"))
            for t in ("show_tally", "cell_tally", "step_tally", "node_tally")
        ]


def _parsed(doc: dict[str, Any]) -> tuple[Evidence, str]:
    return parse_document(doc, QUIET, signatures=True), json.dumps(doc)


@pytest.mark.parametrize("set_based", [True, False])
def test_a_batch_with_replacements_and_duplicates_is_counted_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, set_based: bool
) -> None:
    if not set_based:  # past the rowid room: the triggers count the batch
        monkeypatch.setattr(tallies, "_ROWID_ROOM", 0)
    specs = corpus(40, seed=9)
    probes = [replace(make_report(s), target="sha256:" + "ab" * 32) for s in specs]  # images
    reports = [json.loads(r.to_json()) for r in probes]
    certs = [
        make_certificate(replace(s, stack="torch2.13.0-cpu-py3.11"), r)
        for s, r in zip(specs[:10], probes, strict=False)
    ]
    # one batch, straight to the store: a run as a plain copy, then its certificate (the
    # row is replaced inside the batch), then the plain copy again (kept out); a run twice
    batch = [_parsed(d) for d in (*reports[:10], *certs, *reports[:10], *reports[10:], reports[20])]
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        assert len(evidence_db.add(conn, batch)) == 40
        assert conn.execute("SELECT COUNT(*) FROM tally_pause").fetchone() == (0,)
        assert conn.execute(
            "SELECT COUNT(*) FROM reports WHERE kind = 'certificate'"
        ).fetchone() == (10,)
    expected, got = _both()
    assert got == expected
    assert got["reports"] == 40
    assert _show_agrees() > 2
    counted = _tallies(home / "evidence.sqlite")
    again = import_documents([(f"a{i}", d) for i, d in enumerate((*reports, *certs))], redact=QUIET)
    assert (len(again.added), again.known) == (0, 40)  # idempotent: nothing counted twice
    assert _tallies(home / "evidence.sqlite") == counted


def test_set_based_counts_are_the_triggers_counts(home: Path, tmp_path: Path) -> None:
    import_documents(_varied(300), redact=QUIET)  # counted after the rows, per tally
    db, copy = home / "evidence.sqlite", tmp_path / "copy.sqlite"
    with evidence_db.connect(copy) as conn:  # the same rows one by one: the triggers count
        conn.execute("ATTACH DATABASE ? AS other", (str(db),))
        conn.execute("INSERT INTO main.reports SELECT * FROM other.reports ORDER BY random()")
    counted = _tallies(db)
    assert all(counted)
    assert counted == _tallies(copy)


def test_a_batch_that_fails_leaves_neither_rows_nor_counts(home: Path) -> None:
    docs = [json.loads(make_report(s).to_json()) for s in corpus(5, seed=3)]
    batch = [_parsed(d) for d in docs]
    # a kind that has no rank: the batch fails in the middle of its inserts
    batch[3] = (replace(batch[3][0], kind="bogus"), batch[3][1])
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        with pytest.raises(KeyError):
            evidence_db.add(conn, batch)
        assert conn.execute("SELECT COUNT(*) FROM reports").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM tally_pause").fetchone() == (0,)
    assert _tallies(home / "evidence.sqlite") == [[], [], [], []]
    import_documents([(f"r{i}", d) for i, d in enumerate(docs)], redact=QUIET)
    expected, got = _both()
    assert got == expected
    assert got["reports"] == 5


def test_a_store_from_before_the_tallies_is_counted_once_when_opened(home: Path) -> None:
    import_documents(_varied(120), redact=QUIET)
    db = home / "evidence.sqlite"
    with sqlite3.connect(db) as conn:  # as the store was: no tallies, no triggers, no mark
        for name in ("tally_insert", "tally_update", "tally_delete"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE cell_tally")
        conn.execute("DROP TABLE step_tally")
        conn.execute("DROP TABLE show_tally")
        conn.execute("DELETE FROM meta WHERE name = ?", (tallies.MARK,))
    expected, got = _both()
    assert got == expected
    assert _show_agrees() > 2
    with evidence_db.connect(db) as conn:
        conn.execute("UPDATE cell_tally SET n = n + 100")  # a second open counts nothing
    with evidence_db.connect(db) as conn:
        (total,) = conn.execute("SELECT SUM(n) FROM cell_tally").fetchone()
    assert total > 120


def test_a_store_marked_by_another_version_gets_this_versions_triggers(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import_documents(_varied(50), redact=QUIET)
    db = home / "evidence.sqlite"
    with sqlite3.connect(db) as conn:  # another version: its own mark, a trigger unlike ours
        conn.execute("UPDATE meta SET value = '1' WHERE name = ?", (tallies.MARK,))
        conn.execute("DROP TRIGGER tally_insert")
        conn.execute("CREATE TRIGGER tally_insert AFTER INSERT ON reports BEGIN SELECT 1; END")
    monkeypatch.setattr(tallies, "ANNOUNCE_FROM", 50)
    capsys.readouterr()
    import_documents(
        [(f"n{i}", doc) for i, (_, doc) in enumerate(_varied(130)[50:])], redact=QUIET
    )  # opened (migrated) first, then written
    assert capsys.readouterr().err == (
        "envforge: counting the evidence store's 50 reports "
        "once (a store from an earlier version)...\n"
    )
    expected, got = _both()
    assert got == expected
    assert got["reports"] == 130
    assert _show_agrees() > 2


def test_a_version_2_store_gets_the_new_triggers_and_keeps_its_counts(home: Path) -> None:
    import_documents(_varied(60), redact=QUIET)
    db = home / "evidence.sqlite"
    with sqlite3.connect(db) as conn:  # as version 2 left it: triggers that never pause
        conn.execute("UPDATE meta SET value = '2' WHERE name = ?", (tallies.MARK,))
        conn.execute("DROP TRIGGER tally_insert")
        conn.execute("CREATE TRIGGER tally_insert AFTER INSERT ON reports BEGIN SELECT 1; END")
        conn.execute("UPDATE cell_tally SET n = n + 100")
    with evidence_db.connect(db) as conn:
        (total,) = conn.execute("SELECT SUM(n) FROM cell_tally").fetchone()
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'tally_insert'"
        ).fetchone()
    assert total > 60  # not counted again: version 2 counts what this one does
    assert "tally_pause" in sql


def test_an_empty_store_has_an_empty_matrix(home: Path) -> None:
    expected, got = _both()
    assert got == expected
    assert got["cells"] == []


@pytest.mark.parametrize(
    "values",
    [
        [1.0],
        [1.0, 2.0],
        [0.5, 0.5, 3.0, 0.25],
        [2.0] * 6,
        [0.1, 0.2, 0.3, 0.4, 0.7, 1.1, 1.1],
        [0.3, 0.1, 0.2],
    ],
)
def test_the_median_from_counted_times_is_the_median_of_the_times(values: list[float]) -> None:
    conn = sqlite3.connect(":memory:")
    for statement in tallies._TABLES:
        conn.execute(statement)
    for i, value in enumerate(values):  # statuses split a time's count over rows
        conn.execute(
            "INSERT INTO step_tally VALUES ('amd', 'gfx1031', 'r', 'matmul', ?, ?, 1) "
            "ON CONFLICT DO UPDATE SET n = n + 1",
            ("pass" if i % 2 else "fail", value),
        )
    steps = _step_tallies(conn)[("amd", "gfx1031", "r")]
    assert steps.stats["matmul"] == (len(values), statistics.median(values), max(values))
    assert sum(steps.outcomes["matmul"].values()) == len(values)


def test_cells_read_only_their_newest_rows(home: Path) -> None:
    base = corpus(1, seed=1)[0]
    docs = [
        (
            f"r{i}",
            json.loads(
                make_report(
                    replace(
                        base,
                        created=base.created + timedelta(hours=i),
                        outcome="fail" if i == 0 else "pass",
                    )
                ).to_json()
            ),
        )
        for i in range(30)
    ]
    import_documents(docs, redact=QUIET)
    with opened() as (conn, problems):
        cell = store_matrix(conn, problems).cells[0]
    assert cell.runs[0].created == base.created + timedelta(hours=29)
    assert [r.created for r in cell.failures] == [base.created]
    assert cell.total == 30


def test_shows_newest_pass_moves_back_when_the_newest_run_goes(home: Path) -> None:
    base = corpus(1, seed=1)[0]
    docs = [
        (
            f"r{i}",
            json.loads(
                make_report(
                    replace(
                        base,
                        recipe="gfx1031",
                        outcome="pass",
                        created=base.created + timedelta(days=i),
                    )
                ).to_json()
            ),
        )
        for i in range(3)
    ]
    import_documents(docs, redact=QUIET)
    with opened() as (conn, _problems):
        (_, (row,)) = evidence_db.pass_rows(conn, "gfx1031")
        assert row.created.startswith(str((base.created + timedelta(days=2)).date()))
        conn.execute("DELETE FROM reports WHERE created = ?", (row.created,))
        (_, (row,)) = evidence_db.pass_rows(conn, "gfx1031")
        assert row.created.startswith(str((base.created + timedelta(days=1)).date()))
    assert _show_agrees() == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_an_import_gives_the_garbage_collector_back_as_it_found_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    seen: list[bool] = []
    real_add = evidence_db.add

    def add(conn: sqlite3.Connection, items: Any) -> list[Evidence]:
        seen.append(gc.isenabled())
        return real_add(conn, items)

    monkeypatch.setattr(evidence_db, "add", add)
    (gc.enable if enabled else gc.disable)()
    try:
        import_documents(_varied(3), redact=QUIET)
        assert gc.isenabled() is enabled
        monkeypatch.setattr(evidence_db, "add", lambda *_: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            import_documents(_varied(3), redact=QUIET)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    assert seen == [False]  # off while the reports are parsed and written
