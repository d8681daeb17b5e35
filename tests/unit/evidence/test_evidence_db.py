"""The evidence database (issue 21 §7): idempotent imports keyed by the report's digest,
a certificate preferred over a plain copy of its run, concurrent writers, migration of the
file store on first use, and ``show``'s line read from the columns alone."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from envforge.evidence import evidence_db
from envforge.evidence.certified_on import certified_on
from envforge.evidence.evidence_store import import_documents, read_store, store_certified_on
from envforge.evidence.records import Redactor, parse_document
from tests.helpers.matrix_synth import corpus, make_certificate, make_report

QUIET = Redactor(())


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _docs(n: int, seed: int = 3) -> list[tuple[str, object]]:
    return [
        (f"r{i}", json.loads(make_report(s).to_json())) for i, s in enumerate(corpus(n, seed=seed))
    ]


def test_an_import_is_idempotent_and_the_records_read_back_equal(home: Path) -> None:
    docs = _docs(40)
    first = import_documents(docs, redact=QUIET)
    again = import_documents(docs, redact=QUIET)
    assert (len(first.added), first.known) == (40, 0)
    assert (len(again.added), again.known) == (0, 40)
    stored = read_store().records
    assert sorted(r.key for r in stored) == sorted(r.key for r in first.added)
    by_key = {r.key: r for r in first.added}
    assert all(by_key[r.key] == r for r in stored)  # every field, the steps too
    assert [r.created for r in stored] == sorted((r.created for r in stored), reverse=True)


def test_a_certificate_replaces_the_plain_report_of_its_run(home: Path) -> None:
    spec = corpus(1)[0]
    report = replace(make_report(spec), target="sha256:" + "ab" * 32)  # an image's run
    import_documents([("probe", json.loads(report.to_json()))], redact=QUIET)
    (plain,) = read_store().records
    assert plain.kind == "probe"
    result = import_documents([("cert", make_certificate(spec, report))], redact=QUIET)
    assert (len(result.added), result.known) == (0, 1)
    (kept,) = read_store().records
    assert kept.key == plain.key
    assert kept.kind == "certificate"
    assert kept.certificate.startswith("sha256:")


def _writer(home: str, seed: int) -> int:
    import os

    os.environ["ENVFORGE_HOME"] = home
    docs = _docs(25, seed=seed)
    return len(import_documents(docs, redact=QUIET).added)


def test_concurrent_writers_lose_nothing(home: Path) -> None:
    """Four processes import overlapping sets at once (seeds 0, 1, 1, 2): every distinct
    report is stored exactly once, and no writer fails on a lock."""
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        added = pool.starmap(_writer, [(str(home), s) for s in (0, 1, 1, 2)])
    distinct = {parse_document(d, QUIET).key for s in (0, 1, 2) for _, d in _docs(25, seed=s)}
    assert sum(added) == len(distinct)
    assert len(read_store().records) == len(distinct)


def test_the_file_store_is_migrated_on_first_use_and_each_file_read_once(home: Path) -> None:
    reports, certs = home / "reports", home / "certificates"
    reports.mkdir(parents=True)
    certs.mkdir()
    specs = corpus(6, seed=9)
    for i, spec in enumerate(specs[:4]):
        (reports / f"{i}.json").write_text(make_report(spec).to_json())
    (reports / "broken.json").write_text("{")
    (certs / "c.json").write_text(json.dumps(make_certificate(specs[4])))
    found = read_store()
    assert len(found.records) == 5
    assert [p.source.rsplit("/", 1)[1] for p in found.problems] == ["broken.json"]
    assert (home / "evidence.sqlite").is_file()
    assert not read_store().problems  # the folders did not change: nothing read again
    (certs / "d.json").write_text(json.dumps(make_certificate(specs[5])))  # a new build
    assert len(read_store().records) == 6


def test_show_from_the_columns_says_what_certified_on_says_from_the_records(home: Path) -> None:
    docs = _docs(200, seed=5)
    import_documents(docs, redact=QUIET)
    records = read_store().records
    for recipe in sorted({r.recipe for r in records}):
        for gpu in (True, False):
            assert store_certified_on(recipe, gpu=gpu, arch=recipe) == certified_on(
                records, recipe, gpu=gpu, arch=recipe
            )
    assert store_certified_on("nothing") == "not yet certified on any GPU"


def test_show_reads_one_row_per_host_and_driver_with_its_newest_time(home: Path) -> None:
    """Nightly passes of one host are one row for ``show`` (its newest), and the line is
    the one the records give."""
    spec = corpus(1, seed=9)[0]
    nights = [
        replace(spec, outcome="pass", created=spec.created + timedelta(days=d)) for d in range(30)
    ]
    import_documents(
        [(str(i), json.loads(make_report(s).to_json())) for i, s in enumerate(nights)], redact=QUIET
    )
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        runs, rows = evidence_db.pass_rows(conn, spec.recipe)
    assert runs == 30
    assert len(rows) == 1
    assert rows[0].created.startswith((spec.created + timedelta(days=29)).strftime("%Y-%m-%d"))
    records = read_store().records
    assert store_certified_on(spec.recipe) == certified_on(records, spec.recipe)


def test_the_database_is_in_wal_mode(home: Path) -> None:
    read_store()
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_run_twice_in_one_batch_is_one_record_its_certificate(home: Path) -> None:
    """One import holding a run's report, its certificate and the report again (as a
    ``--report DIR`` folder does, in either order) adds one record: the certificate."""
    spec = corpus(1, seed=5)[0]
    report = replace(make_report(spec), target="sha256:" + "cd" * 32)
    plain = json.loads(report.to_json())
    others = _docs(5, seed=6)
    batch = [("probe", plain), *others, ("cert", make_certificate(spec, report)), ("again", plain)]
    result = import_documents(batch, redact=QUIET)
    assert (len(result.added), result.known) == (6, 0)
    key = parse_document(plain, QUIET).key
    (kept,) = [r for r in read_store().records if r.key == key]
    assert kept.kind == "certificate"
    assert [r.kind for r in result.added if r.key == key] == ["certificate"]


def test_a_large_batch_counts_what_was_new_and_what_was_known(home: Path) -> None:
    """Batches larger than one key query (500): a second import overlapping the first
    adds only the new reports and counts the rest as known."""
    docs = _docs(700, seed=8)
    first = import_documents(docs[:600], redact=QUIET)
    second = import_documents(docs[50:], redact=QUIET)
    assert (len(first.added), first.known) == (600, 0)
    assert (len(second.added), second.known) == (100, 550)
    assert not {r.key for r in second.added} & {r.key for r in first.added}
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        assert len(evidence_db.documents(conn)) == 700
