"""Aggregation (counts, newest date, driver range, dedup), the page's safety, atomic writes
and the ``envforge matrix`` command's errors."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from envforge.cli import main
from envforge.errors import InvalidInput, Unavailable
from envforge.evidence.matrix import (
    FAILURES_PER_CELL,
    RUNS_PER_CELL,
    aggregate,
    csp_hash,
    natural_key,
    render_page,
    script_json,
    write_files,
    write_site,
)
from envforge.evidence.records import Evidence, Redactor, parse_document, read_evidence
from tests.helpers.matrix_synth import Spec, corpus, make_certificate, make_report, write_corpus

WHEN = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
BASE = Spec(
    vendor="amd",
    arch="gfx1031",
    product="AMD Radeon RX 6700 XT",
    driver="amdgpu 6.8.0",
    recipe="gfx1031",
    stack="torch2.13.0-rocm7.1-py3.12",
    outcome="pass",
    created=WHEN,
)
QUIET = Redactor(("alice-ws", "alice"))
XSS = (
    '</script><script>document.body.setAttribute("data-pwned","1")</script>'
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"
)


def record(**changes: Any) -> Evidence:
    return parse_document(make_report(replace(BASE, **changes)).to_dict(), QUIET)


def at(hours: int, **changes: Any) -> Evidence:
    return record(created=WHEN + timedelta(hours=hours), **changes)


def test_counts_and_verdicts_per_cell() -> None:
    runs = [
        at(0),
        at(1),
        at(2, outcome="fail"),
        at(3, outcome="hang"),
        at(4, outcome="crash"),
        at(5, outcome="no-device"),
        at(6, outcome="oom"),
        at(7, recipe="cpu"),
        at(8, recipe="cpu", outcome="hang"),
    ]
    m = aggregate(runs)
    cell = m.cell("amd:gfx1031", "gfx1031")
    assert cell is not None
    assert dict(cell.counts) == {
        "pass": 2,
        "fail": 1,
        "hang": 1,
        "crash": 1,
        "no-device": 1,
        "oom": 1,
    }
    assert cell.total == 7
    assert cell.verdict == "mixed"
    cpu = m.cell("amd:gfx1031", "cpu")
    assert cpu is not None
    assert cpu.verdict == "mixed"
    assert m.reports == 9
    assert aggregate([at(0), at(1)]).cells[0].verdict == "pass"
    assert aggregate([at(0, outcome="hang")]).cells[0].verdict == "fail"
    data = m.to_dict()
    cell_data = next(c for c in data["cells"] if c["column"] == "gfx1031")
    assert cell_data["counts"] == {
        "pass": 2,
        "fail": 1,
        "hang": 1,
        "crash": 1,
        "oom": 1,
        "no-device": 1,
    }


def test_the_newest_date_is_the_latest_run_in_the_cell() -> None:
    m = aggregate([at(-48), at(30, outcome="fail"), at(5), at(99, recipe="cpu")])
    cell = m.cell("amd:gfx1031", "gfx1031")
    assert cell is not None
    assert cell.newest == WHEN + timedelta(hours=30)
    data = next(c for c in m.to_dict()["cells"] if c["column"] == "gfx1031")
    assert data["newest"] == "2026-11-21T18:00:00Z"
    assert [r["created"] for r in data["runs"]] == [
        "2026-11-21T18:00:00Z",
        "2026-11-20T17:00:00Z",
        "2026-11-18T12:00:00Z",
    ]


def test_the_driver_range_is_in_version_order_not_text_order() -> None:
    m = aggregate(
        [
            at(0, driver="amdgpu 6.8.0"),
            at(1, driver="amdgpu 6.10.5"),
            at(2, driver="amdgpu 6.2.4"),
            at(3, driver=""),
            at(
                4,
                vendor="nvidia",
                arch="sm_89",
                product="NVIDIA GeForce RTX 4090",
                driver="nvidia 580.65.06",
            ),
            at(
                5,
                vendor="nvidia",
                arch="sm_89",
                product="NVIDIA GeForce RTX 4090",
                driver="nvidia 580.9.1",
            ),
        ]
    )
    amd = m.cell("amd:gfx1031", "gfx1031")
    nvidia = m.cell("nvidia:sm_89", "gfx1031")
    assert amd is not None
    assert nvidia is not None
    assert amd.drivers == ("amdgpu 6.2.4", "amdgpu 6.10.5")
    assert nvidia.drivers == ("nvidia 580.9.1", "nvidia 580.65.06")
    assert aggregate([at(0, driver="")]).cells[0].drivers is None
    assert natural_key("gfx90a") < natural_key("gfx1010") < natural_key("gfx1100")


def test_duplicates_are_counted_once(tmp_path: Path) -> None:
    specs = corpus(40, seed=3)
    write_corpus(tmp_path / "reports", specs, certificates_every=2)
    # the store holds the certificates again
    for i, spec in enumerate(specs[:10]):
        cert = make_certificate(spec)
        (tmp_path / "store").mkdir(exist_ok=True)
        (tmp_path / "store" / f"{i}.json").write_text(json.dumps(cert), encoding="utf-8")
    found = read_evidence([tmp_path / "reports", tmp_path / "store"], QUIET)
    m = aggregate(found)
    assert m.reports == 40
    assert m.duplicates == 20 + 10
    assert m.to_dict()["duplicates"] == 30
    expected: dict[tuple[str, str], int] = {}
    for spec in specs:
        row = parse_document(make_report(spec).to_dict(), QUIET).gpu.row_key
        expected[(row, spec.recipe)] = expected.get((row, spec.recipe), 0) + 1
    assert {(c.row, c.column): c.total for c in m.cells} == expected


def test_step_timings_runs_and_failures_per_cell() -> None:
    runs = [at(i, outcome="fail" if i % 3 == 0 else "pass") for i in range(RUNS_PER_CELL + 8)]
    cell = aggregate(runs).cells[0]
    assert len(cell.runs) == RUNS_PER_CELL
    assert cell.runs[0].created == WHEN + timedelta(hours=RUNS_PER_CELL + 7)
    assert len(cell.failures) == FAILURES_PER_CELL
    assert all(r.outcome == "fail" for r in cell.failures)
    matmul = next(s for s in cell.steps if s.name == "matmul")
    assert matmul.runs == len(runs)
    assert dict(matmul.outcomes) == {"pass": 12, "fail": 6}
    seconds = sorted(s.seconds for r in runs for s in r.steps if s.name == "matmul")
    assert matmul.max == seconds[-1]
    assert seconds[0] <= matmul.median <= seconds[-1]
    assert [s.name for s in cell.steps][:3] == ["env-snapshot", "expected-versions", "device"]
    data = aggregate(runs).to_dict()["cells"][0]
    assert data["failures"][0]["failing_step"]["name"] == "matmul"
    assert "max abs difference" in data["failures"][0]["failing_step"]["detail"]


def test_rows_and_columns_are_ordered_and_carry_products() -> None:
    m = aggregate(
        [
            at(0, vendor="none", arch=None, product="", driver="", recipe="cpu"),
            at(1, vendor="nvidia", arch="sm_89", product="NVIDIA GeForce RTX 4090", recipe="sm_90"),
            at(2, arch="gfx1100", product="AMD Radeon RX 7900 XTX", recipe="gfx1100"),
            at(3, arch="gfx90a", product="AMD Instinct MI210", recipe="gfx90a"),
            at(4, product="AMD Radeon RX 6700"),
            at(5),
            at(6),
        ]
    )
    assert [r.key for r in m.rows] == [
        "amd:gfx90a",
        "amd:gfx1031",
        "amd:gfx1100",
        "nvidia:sm_89",
        "none:cpu",
    ]
    assert [c.key for c in m.columns] == ["cpu", "gfx90a", "gfx1031", "gfx1100", "sm_90"]
    assert m.rows[1].products == ("AMD Radeon RX 6700 XT", "AMD Radeon RX 6700")


def test_script_json_cannot_end_the_script_element() -> None:
    data = {"detail": XSS + "&amp; \u2028 ' <!-- -->"}
    text = str(script_json(data))
    for bad in ("<", ">", "&", "'", "\u2028"):
        assert bad not in text
    assert json.loads(text) == data


def test_the_page_embeds_hostile_text_inertly_and_pins_its_script() -> None:
    m = aggregate([at(0, outcome="crash", detail=XSS, recipe="x<b>y</b>")])
    page = render_page(m.to_dict())
    assert "<img" not in page
    assert page.count("</script>") == 2
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 1
    assert f"script-src '{csp_hash(scripts[0])}'" in page
    match = re.search(
        r'<script type="application/json" id="matrix-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    assert "<" not in match.group(1)
    assert "data-pwned" not in page.replace(match.group(1), "")  # only in the inert JSON
    data = json.loads(match.group(1))
    assert data["cells"][0]["failures"][0]["failing_step"]["detail"] == XSS
    assert data["columns"][0]["key"] == "x<b>y</b>"
    assert "http://" not in page
    assert "https://" not in page


def test_the_site_has_no_paths_or_names_of_the_host(tmp_path: Path) -> None:
    write_corpus(tmp_path / "ev", corpus(20, seed=5))
    site = write_site(aggregate(read_evidence([tmp_path / "ev"], QUIET)), tmp_path / "site")
    for path in (site.index, site.data):
        text = path.read_text(encoding="utf-8")
        assert "alice" not in text
        assert str(tmp_path) not in text


def test_write_files_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "site"
    write_files(out, {"index.html": "old index", "matrix.json": "old data"})
    real_replace = os.replace
    calls: list[str] = []

    def failing_second(src: Any, dst: Any) -> None:
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_second)
    with pytest.raises(Unavailable, match="no space left"):
        write_files(out, {"index.html": "new index", "matrix.json": "new data"})
    monkeypatch.setattr(os, "replace", real_replace)
    assert (out / "index.html").read_text() == "old index"
    assert (out / "matrix.json").read_text() == "old data"
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "matrix.json"]

    fresh = tmp_path / "new" / "deeper"
    calls.clear()
    monkeypatch.setattr(os, "replace", failing_second)
    with pytest.raises(Unavailable):
        write_files(fresh, {"index.html": "a", "matrix.json": "b"})
    assert not (tmp_path / "new").exists()


def test_write_files_refuses_a_file_for_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="is a file, not a folder"):
        write_files(tmp_path / "file", {"index.html": "a"})
    with pytest.raises(InvalidInput, match="is a file, not a folder"):
        write_files(tmp_path / "file" / "site", {"index.html": "a"})


# --------------------------------------------------------------------------- the command


def _evidence(tmp_path: Path) -> Path:
    folder = tmp_path / "ev"
    write_corpus(folder, corpus(12, seed=9))
    (folder / "broken.json").write_text("{", encoding="utf-8")
    (folder / "other.json").write_text('{"schema": "x/1"}', encoding="utf-8")
    return folder


def test_the_command_writes_the_site_and_names_skipped_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _evidence(tmp_path)
    out = tmp_path / "site"
    assert main(["matrix", "--evidence", str(folder), "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["reports"] == 12
    assert summary["duplicates"] == 6
    assert summary["skipped"] == 2
    err = captured.err.strip().splitlines()
    assert err == [
        f"envforge: skipped {folder / 'broken.json'}: not JSON: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        f"envforge: skipped {folder / 'other.json'}: not an envforge report (schema 'x/1')",
    ]
    data = json.loads((out / "matrix.json").read_text(encoding="utf-8"))
    assert data["reports"] == 12
    assert (out / "index.html").read_text(encoding="utf-8").startswith("<!doctype html>")
    assert main(["matrix", "--evidence", str(folder), "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out / 'index.html'}")


def test_the_default_evidence_is_the_local_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    assert main(["matrix", "-o", str(tmp_path / "empty"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reports"] == 0
    store = tmp_path / "home" / "certificates"
    store.mkdir(parents=True)
    cert = make_certificate(BASE)
    (store / (cert["digest"].split(":")[1] + ".json")).write_text(json.dumps(cert))
    assert main(["matrix", "-o", str(tmp_path / "one"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reports"] == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--evidence", "/nonexistent/evidence"],
            2,
            "--evidence /nonexistent/evidence: no such file or folder",
        ),
        (["-o", "{file}"], 2, "is a file, not a folder"),
        (["-o", "/proc/envforge-matrix-site"], 4, "cannot write /proc/envforge-matrix-site"),
        ([], 2, "Missing option '-o'"),
    ],
)
def test_bad_arguments_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    (tmp_path / "file").write_text("x")
    args = [a.replace("{file}", str(tmp_path / "file")) for a in args]
    if "-o" not in args and "--evidence" in args:
        args += ["-o", str(tmp_path / "site")]
    if "--evidence" not in args:
        args += ["--evidence", str(_evidence(tmp_path))]
    assert main(["matrix", *args]) == code
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "site").exists()
