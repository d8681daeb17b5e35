"""Issue 33 §8, which node: runs grouped by site and node in the matrix (records and the
store's tallies alike) and in ``show --by-node``; node names kept in the site's own store
and left out of what leaves the site unless it shares them; hostile node names inert."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from envforge.cli import main
from envforge.evidence import evidence_db, tallies
from envforge.evidence.by_node import node_groups, rows_of
from envforge.evidence.evidence_store import (
    export_lines,
    import_documents,
    opened,
    read_store,
    record,
    sanitized_report,
    signed_report,
)
from envforge.evidence.kinds.signed_probe import report_of
from envforge.evidence.local_store import store_by_node
from envforge.evidence.matrix import aggregate, render_page
from envforge.evidence.matrix_db import store_matrix
from envforge.evidence.records import Redactor, parse_document
from envforge.evidence.summary import summarizing
from envforge.probe.report import ProbeReport
from envforge.publish.signing import SigningKey, generate, load_signing_key
from tests.helpers.matrix_synth import Spec, make_report

QUIET = Redactor(())
WHEN = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
NOW = datetime(2026, 11, 28, tzinfo=timezone.utc)
BASE = Spec(
    vendor="amd",
    arch="gfx90a",
    product="AMD Instinct MI250X",
    driver="amdgpu 6.8.0",
    recipe="mi250x",
    stack="torch2.13.0-rocm7.1-py3.12",
    outcome="pass",
    created=WHEN,
)
HOSTILE = "</script><img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"


def _report(hours: int, site: str | None, node: str | None, **changes: Any) -> ProbeReport:
    report = make_report(replace(BASE, created=WHEN + timedelta(hours=hours), **changes))
    return replace(report, host=replace(report.host, site=site, node=node))


#: lumi's nid002 fails twice and passes once; nid001 always passes; mahti names no node.
FLEET = [
    _report(0, "lumi", "nid001"),
    _report(1, "lumi", "nid001"),
    _report(2, "lumi", "nid002", outcome="fail"),
    _report(3, "lumi", "nid002", outcome="hang"),
    _report(4, "lumi", "nid002"),
    _report(5, "mahti", None),
    _report(6, "lumi", "nid003", recipe="cpu"),
]


def _docs(reports: list[ProbeReport]) -> list[tuple[str, Any]]:
    return [(f"r{i}", json.loads(r.to_json())) for i, r in enumerate(reports)]


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    return load_signing_key(generate(tmp_path / "keys", "site")[0])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ENVFORGE_SHARE_NODE_NAMES", raising=False)
    monkeypatch.delenv("ENVFORGE_SITE", raising=False)
    return tmp_path / "home"


# --------------------------------------------------------------------------- grouping


def test_a_cell_by_node_names_the_worst_node_first() -> None:
    m = aggregate([parse_document(r.to_dict(), QUIET) for r in FLEET], by="node")
    cell = m.cell("amd:gfx90a", "mi250x")
    assert cell is not None
    assert [(g.site, g.node, g.total, g.bad, g.verdict) for g in cell.groups] == [
        ("lumi", "nid002", 3, 2, "mixed"),
        ("lumi", "nid001", 2, 0, "pass"),
        ("mahti", "", 1, 0, "pass"),
    ]
    assert dict(cell.groups[0].counts) == {"fail": 1, "hang": 1, "pass": 1}
    assert [(g.node, g.total) for g in m.groups] == [
        ("nid002", 3),
        ("nid001", 2),
        ("nid003", 1),
        ("", 1),
    ]
    by_site = aggregate([parse_document(r.to_dict(), QUIET) for r in FLEET], by="site")
    cell = by_site.cell("amd:gfx90a", "mi250x")
    assert cell is not None
    assert [(g.site, g.node, g.total) for g in cell.groups] == [("lumi", "", 5), ("mahti", "", 1)]


def test_the_json_shape_by_node_by_site_and_by_default() -> None:
    records = [parse_document(r.to_dict(), QUIET) for r in FLEET]
    data = aggregate(records, by="node").to_dict(NOW)
    assert data["by"] == "node"
    assert data["groups"][0] == {
        "site": "lumi",
        "node": "nid002",
        "counts": {"pass": 1, "fail": 1, "hang": 1, "crash": 0, "oom": 0, "no-device": 0},
        "total": 3,
        "verdict": "mixed",
    }
    cell = next(c for c in data["cells"] if c["column"] == "mi250x")
    assert [(g["site"], g["node"], g["verdict"]) for g in cell["groups"]][:1] == [
        ("lumi", "nid002", "mixed")
    ]
    assert (cell["failures"][0]["site"], cell["failures"][0]["node"]) == ("lumi", "nid002")
    by_site = aggregate(records, by="site").to_dict(NOW)
    assert by_site["by"] == "site"
    assert all("node" not in g for g in by_site["groups"])
    run = by_site["cells"][0]["runs"][0]
    assert "site" in run
    assert "node" not in run
    plain = json.dumps(aggregate(records).to_dict(NOW))  # the default: no node, no site
    assert "nid00" not in plain
    assert '"groups"' not in plain
    assert '"by"' not in plain
    with pytest.raises(ValueError, match="by must be one of site, node"):
        aggregate(records, by="rack")


def test_a_hostile_node_name_is_inert_in_the_page() -> None:
    report = _report(0, "lumi", HOSTILE, outcome="fail")
    data = aggregate([parse_document(report.to_dict(), QUIET)], by="node").to_dict(NOW)
    page = render_page(data)
    match = re.search(
        r'<script type="application/json" id="matrix-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    assert "<" not in match.group(1)
    assert "<img" not in page
    assert "data-pwned" not in page.replace(match.group(1), "")  # only in the inert JSON
    assert json.loads(match.group(1))["groups"][0]["node"] == HOSTILE
    assert "grouped by node" in page


def test_show_groups_say_a_node_per_line_escaped() -> None:
    groups = node_groups(rows_of(parse_document(r.to_dict(), QUIET) for r in FLEET))
    assert [g.line() for g in groups] == [
        "lumi / nid002: 3 runs (gfx90a): 1 pass, 1 fail, 1 hang",
        "lumi / nid001: 2 runs (gfx90a): 2 pass",
        "lumi / nid003: 1 run (gfx90a): 1 pass",
        "mahti / (node not recorded): 1 run (gfx90a): 1 pass",
    ]
    evil = node_groups(rows_of([parse_document(_report(0, "s", "n\x1b[2J\n").to_dict(), QUIET)]))
    assert "\x1b" not in evil[0].line()
    assert "\n" not in evil[0].line()


# --------------------------------------------------------------------------- the store


def _both(by: str) -> tuple[dict[str, Any], dict[str, Any]]:
    expected = aggregate(read_store(), by=by).to_dict(NOW)
    with opened() as (conn, problems):
        got = store_matrix(conn, problems, by).to_dict(NOW)
    return expected, got


def test_the_store_keeps_node_names_and_its_grouped_matrix_is_the_records(home: Path) -> None:
    assert len(import_documents(_docs(FLEET), redact=QUIET).added) == len(FLEET)
    assert {(r.site, r.node) for r in read_store().records} >= {("lumi", "nid002"), ("mahti", "")}
    for by in ("", "site", "node"):
        expected, got = _both(by)
        assert got == expected
    with evidence_db.connect(home / "evidence.sqlite") as conn:  # the triggers keep up
        conn.execute("DELETE FROM reports WHERE node = 'nid001'")
        conn.execute("UPDATE reports SET node = 'nid009' WHERE outcome = 'hang'")
    expected, got = _both("node")
    assert got == expected
    assert [(g["node"], g["total"]) for g in got["groups"]][:2] == [("nid002", 2), ("nid009", 1)]


def test_show_by_node_reads_the_tally(home: Path) -> None:
    import_documents(_docs(FLEET), redact=QUIET)
    groups = store_by_node("mi250x")
    assert [(g.site, g.node, g.total, g.verdict) for g in groups] == [
        ("lumi", "nid002", 3, "mixed"),
        ("lumi", "nid001", 2, "pass"),
        ("mahti", "", 1, "pass"),
    ]
    assert store_by_node("no-such-recipe") == ()


def test_a_store_from_before_the_node_columns_gets_them_and_counts_them(home: Path) -> None:
    import_documents(_docs(FLEET[:3]), redact=QUIET)
    db = home / "evidence.sqlite"
    with sqlite3.connect(db) as conn:  # as version 3 left it: no node tally, no columns
        for name in ("tally_insert", "tally_update", "tally_delete"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE node_tally")
        conn.execute("DROP INDEX reports_by_cell")  # names no column dropped below
        conn.execute("ALTER TABLE reports DROP COLUMN node")
        conn.execute("ALTER TABLE reports DROP COLUMN site")
        conn.execute("UPDATE meta SET value = '3' WHERE name = ?", (tallies.MARK,))
    import_documents(_docs(FLEET[3:]), redact=QUIET)  # opened: columns added, tally counted
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM reports WHERE node = ''").fetchone() == (4,)
        (mark,) = conn.execute("SELECT value FROM meta WHERE name = ?", (tallies.MARK,)).fetchone()
    assert mark == tallies.VERSION
    expected, got = _both("node")
    assert got == expected
    assert got["reports"] == len(FLEET)


# --------------------------------------------------------------------------- sharing


def test_what_leaves_the_site_has_no_node_name_unless_it_shares_them(
    home: Path, key: SigningKey
) -> None:
    report = FLEET[2].to_dict()
    assert "node" not in sanitized_report(report, QUIET)["host"]  # a certificate's report
    assert sanitized_report(report, QUIET)["host"]["site"] == "lumi"  # the site is shared
    assert sanitized_report(report, QUIET, node=True)["host"]["node"] == "nid002"
    assert "node" not in report_of(signed_report(report, key, QUIET))["host"]
    assert report_of(signed_report(report, key, QUIET, node=True))["host"]["node"] == "nid002"
    record(report, redact=QUIET)  # the site's own store keeps it
    (kept,) = read_store().records
    assert (kept.site, kept.node) == ("lumi", "nid002")
    (line,) = export_lines([kept], redact=QUIET)
    assert "nid002" not in line
    assert json.loads(line)["site"] == "lumi"
    (shared,) = export_lines([kept], redact=Redactor(("nid002",)), node=True)
    assert json.loads(shared)["node"] == "nid002"  # opted in: not redacted as a host name


def test_a_signed_report_without_its_node_still_files_it_in_the_store(
    home: Path, key: SigningKey
) -> None:
    run = signed_report(FLEET[2].to_dict(), key, QUIET)
    assert "node" not in report_of(run)["host"]
    record(run, node="nid002")
    (kept,) = read_store().records
    assert kept.node == "nid002"


def test_an_import_names_the_node_a_fleet_task_said(home: Path) -> None:
    plain = json.loads(replace(FLEET[0], host=replace(FLEET[0].host, node=None)).to_json())
    import_documents(
        [("task-0/certificate.json", plain)],
        redact=QUIET,
        nodes={"task-0/certificate.json": "nid007"},
    )
    (kept,) = read_store().records
    assert kept.node == "nid007"


def test_the_export_command_leaves_node_names_out_unless_opted_in(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import_documents(_docs(FLEET), redact=QUIET)
    out = tmp_path / "bundle.jsonl"
    assert main(["evidence", "export", "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["node_names"] is False
    assert "nid00" not in out.read_text()
    monkeypatch.setenv("ENVFORGE_SHARE_NODE_NAMES", "1")
    assert main(["evidence", "export", "-o", str(out)]) == 0
    assert "nid002" in out.read_text()


# --------------------------------------------------------------------------- commands


def test_matrix_by_node_writes_groups_and_says_the_page_names_nodes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import_documents(_docs(FLEET), redact=QUIET)
    out = tmp_path / "site"
    assert main(["matrix", "-o", str(out), "--by", "node", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["by"] == "node"
    assert "names 3 nodes" in captured.err
    data = json.loads((out / "matrix.json").read_text(encoding="utf-8"))
    assert data["groups"][0]["node"] == "nid002"
    monkeypatch.setenv("ENVFORGE_SHARE_NODE_NAMES", "yes")
    assert main(["matrix", "-o", str(out), "--by", "node"]) == 0
    assert "names" not in capsys.readouterr().err
    assert main(["matrix", "-o", str(out)]) == 0  # the default page names no node
    assert "nid00" not in (out / "matrix.json").read_text(encoding="utf-8")
    assert main(["matrix", "-o", str(out), "--by", "rack"]) == 2


def test_show_by_node_lists_the_nodes(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = [replace(r, recipe_name="cpu") for r in FLEET]
    import_documents(_docs(reports), redact=QUIET)
    assert main(["show", "cpu", "--by-node"]) == 0
    text = capsys.readouterr().out
    assert "  by node (most failures first):\n    lumi / nid002: 3 runs (gfx90a)" in text
    assert main(["show", "cpu", "--by-node", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["by_node"][0]["node"] == "nid002"
    assert main(["show", "cpu", "--json"]) == 0
    assert "by_node" not in json.loads(capsys.readouterr().out)


def test_show_by_node_lists_the_worst_nodes_and_counts_the_rest(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = [
        _report(i, "lumi", f"n{i:03d}", recipe="cpu", outcome="fail" if i < 42 else "pass")
        for i in range(50)
    ]
    import_documents(_docs(reports), redact=QUIET)
    assert main(["show", "cpu", "--by-node"]) == 0
    lines = capsys.readouterr().out.splitlines()
    named = [ln for ln in lines if ln.startswith("    lumi / ")]
    assert len(named) == 40
    assert all("1 fail" in ln for ln in named)
    assert lines[-1] == (
        "    ... and 10 more node(s), 2 with runs that did not pass (--json lists every one)"
    )


def test_fleet_collect_files_a_run_under_the_node_its_task_json_names(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envforge.fleet.planning import load_plan
    from tests.unit.fleet.test_hostile_fleet import _write, report

    plan_dir = tmp_path / "plan"
    argv = ["fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "--level", "quick"]
    assert main([*argv, "--nodes", "1", "-o", str(plan_dir)]) == 0
    doc = report(load_plan(plan_dir), 0)
    del doc["host"]["node"]  # as a certificate (or a signed report) carries it: none
    _write(plan_dir, 0, doc)  # task.json: {"node": "n1"}
    capsys.readouterr()
    assert main(["fleet", "collect", str(plan_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 1
    assert [r.node for r in read_store().records] == ["n1"]


def test_a_ci_summary_names_the_node_only_when_the_site_shares_them(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "summary.md"
    with summarizing(out, "envforge certify mi250x") as notes:
        notes.add(FLEET[2])
    text = out.read_text(encoding="utf-8")
    assert "| site | lumi |" in text
    assert "nid002" not in text
    monkeypatch.setenv("ENVFORGE_SHARE_NODE_NAMES", "1")
    with summarizing(out, "envforge certify mi250x") as notes:
        notes.add(FLEET[2])
    assert "| node | nid002 |" in out.read_text(encoding="utf-8")


def test_the_light_outcome_list_is_the_evidence_models() -> None:
    """by_node keeps its own copy (it loads without the knowledge table); the order and
    names are the model's, so a node's counts and a matrix cell's say the same."""
    from envforge.evidence import by_node, model

    assert by_node.OUTCOMES == model.OUTCOMES


@pytest.mark.parametrize(
    ("counts", "verdict", "bad"),
    [
        ({}, "pass", 0),
        ({"pass": 3}, "pass", 0),
        ({"pass": 2, "hang": 1}, "mixed", 1),
        ({"oom": 1, "fail": 2}, "fail", 3),
    ],
)
def test_a_node_group_and_a_matrix_group_judge_alike(
    counts: dict[str, int], verdict: str, bad: int
) -> None:
    from envforge.evidence.by_node import NodeGroup
    from envforge.evidence.matrix import Group

    node = NodeGroup("site", "n1", ("amd:gfx90a",), counts)
    group = Group("site", "n1", counts)
    for tallied in (node, group):
        assert (tallied.verdict, tallied.bad, tallied.total) == (verdict, bad, sum(counts.values()))
    assert node.to_dict()["counts"] == group.to_dict("node")["counts"]
