"""``envforge knowledge refresh`` / ``status`` against a real HTTP server on 127.0.0.1
serving recorded index responses (tests/fixtures/index; see indexserver.py): PEP 691 and
PEP 503 forms, PEP 658 metadata, an ETag round trip, a 404, a timeout, a malformed page.
The CLI runs as a child process, with its own ENVFORGE_HOME (the response cache)."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from envforge.core.proc import Completed
from envforge.core.resources import data_file
from envforge.knowledge import load_table
from envforge.knowledge.parse import parse_table

from .helpers import Envforge, parse_json
from .indexserver import SLOW_SECONDS, IndexServer, serve

FIXTURE_VERSIONS = ["2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]


@pytest.fixture(scope="module")
def server() -> Iterator[IndexServer]:
    yield from serve()


@pytest.fixture
def cli(tmp_path: Path) -> Envforge:
    return Envforge(tmp_path / "home")


def _refresh(cli: Envforge, *args: str) -> tuple[Completed, dict[str, Any]]:
    done = cli("knowledge", "refresh", "--no-pytorch-index", "--json", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    return done, parse_json(done)


def _kinds(data: dict[str, Any], kind: str) -> list[str]:
    return [f["subject"] for f in data["findings"] if f["kind"] == kind]


def test_pep691_json_form(server: IndexServer, cli: Envforge) -> None:
    _, data = _refresh(cli, "--index", f"{server.url}/simple")
    assert data["torch_versions"] == FIXTURE_VERSIONS
    first = server.seen("/simple/torch/")[0]
    assert first.headers["Accept"].startswith("application/vnd.pypi.simple.v1+json")
    assert _kinds(data, "new-release") == []
    # the recorded page is trimmed: the table's older releases are reported as not listed
    assert "torch 2.12.0" in _kinds(data, "missing-release")
    assert "torch 2.13.0" not in _kinds(data, "missing-release")
    # 2.13's default build from its PEP 658 metadata (cuda-toolkit==13.0.3 -> cu130),
    # 2.15's from the JSON API (its metadata is a 404, as on the real index): both agree
    assert _kinds(data, "default-build") == []
    assert any(p.endswith(".metadata") for p in (r.path for r in server.requests))
    assert server.seen("/pypi/torch/json")
    # python ranges of the default builds and NumPy 2.4.0's yank match the table
    assert _kinds(data, "python-range") == []
    assert _kinds(data, "numpy-yanked") == []
    assert data["problems"] == []
    # the companions' pages were read; the table knows every release they list
    assert server.seen("/simple/torchvision/")
    assert server.seen("/simple/torchaudio/")
    assert _kinds(data, "companion-new") == []
    assert data["proposed_companions"] == []


def test_pep503_html_form_gives_the_same_releases(server: IndexServer, cli: Envforge) -> None:
    # the /html root serves no numpy page: a partial check, accepted here
    _, data = _refresh(cli, "--index", f"{server.url}/html", "--allow-partial")
    assert server.seen("/html/torch/")
    assert data["torch_versions"] == FIXTURE_VERSIONS
    assert _kinds(data, "python-range") == []
    assert _kinds(data, "new-release") == []


def test_etag_round_trip(server: IndexServer, cli: Envforge) -> None:
    _, first = _refresh(cli, "--index", f"{server.url}/simple", "--max-age", "0")
    before = len(server.seen("/simple/torch/"))
    _, second = _refresh(cli, "--index", f"{server.url}/simple", "--max-age", "0")
    again = server.seen("/simple/torch/")[before:]
    assert [r.headers.get("If-None-Match") for r in again] == ['"recorded-1"']
    assert [r.status for r in again] == [304]
    assert second["requests"]["revalidated"] >= 2  # torch and numpy pages
    assert second["torch_versions"] == first["torch_versions"]
    assert second["findings"] == first["findings"]


def test_fresh_cache_asks_nothing(server: IndexServer, cli: Envforge) -> None:
    _refresh(cli, "--index", f"{server.url}/simple")
    count = len(server.requests)
    _, data = _refresh(cli, "--index", f"{server.url}/simple")
    assert len(server.requests) == count
    assert data["requests"]["network"] == 0
    assert data["torch_versions"] == FIXTURE_VERSIONS


def test_404_is_reported_and_skipped(server: IndexServer, cli: Envforge) -> None:
    _, data = _refresh(
        cli, "--index", f"{server.url}/gone", "--index", f"{server.url}/simple", "--allow-partial"
    )
    assert data["torch_versions"] == FIXTURE_VERSIONS
    gone = [p for p in data["problems"] if p["url"] == f"{server.url}/gone/torch/"]
    assert gone == [
        {
            "url": f"{server.url}/gone/torch/",
            "kind": "http",
            "reason": "HTTP 404 Not Found",
            "status": 404,
        }
    ]


def test_no_index_answers_is_exit_4(server: IndexServer, cli: Envforge) -> None:
    done = cli("knowledge", "refresh", "--no-pytorch-index", "--index", f"{server.url}/gone")
    assert done.returncode == 4
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"{server.url}/gone/" in done.stderr


def test_timeout_is_reported_and_skipped(server: IndexServer, cli: Envforge) -> None:
    _done, data = _refresh(
        cli,
        "--index",
        f"{server.url}/slow",
        "--index",
        f"{server.url}/simple",
        "--timeout",
        "0.5",
        "--allow-partial",
    )
    slow = [p for p in data["problems"] if p["url"].startswith(f"{server.url}/slow/")]
    assert {p["kind"] for p in slow} == {"timeout"}
    assert len(slow) == 2
    assert data["torch_versions"] == FIXTURE_VERSIONS
    assert data["seconds"] < SLOW_SECONDS  # requests ran concurrently, each cut at 0.5 s


def test_malformed_page_names_the_url(server: IndexServer, cli: Envforge) -> None:
    _, data = _refresh(
        cli, "--index", f"{server.url}/bad", "--index", f"{server.url}/simple", "--allow-partial"
    )
    bad = [p for p in data["problems"] if p["url"] == f"{server.url}/bad/torch/"]
    assert len(bad) == 1
    assert bad[0]["kind"] == "malformed"
    assert "invalid JSON" in bad[0]["reason"]
    text = cli(
        "knowledge",
        "refresh",
        "--no-pytorch-index",
        "--index",
        f"{server.url}/bad",
        "--index",
        f"{server.url}/simple",
    )
    assert text.returncode == 4  # a partial check is not a success without --allow-partial
    assert f"problem: {server.url}/bad/torch/: malformed: invalid JSON" in text.stdout
    assert "Traceback" not in text.stdout + text.stderr


def test_new_release_and_overlay(server: IndexServer, cli: Envforge, tmp_path: Path) -> None:
    out = tmp_path / "proposed.yaml"
    _done, data = _refresh(cli, "--index", f"{server.url}/future", "-o", str(out))
    assert _kinds(data, "new-release") == ["torch 2.16.0"]
    human = cli("knowledge", "refresh", "--no-pytorch-index", "--index", f"{server.url}/future")
    assert "new on the index (not in the table):" in human.stdout
    assert "  torch 2.16.0: listed, Linux x86_64 wheels for CPython 3.11-3.15" in human.stdout
    overlay = yaml.safe_load(out.read_text(encoding="utf-8"))
    rows = overlay["releases"]
    assert [r["series"] for r in rows] == ["2.16"]
    row = rows[0]
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    assert row["versions"] == ["2.16.0"]
    assert row["checked"] == today
    assert row["python"] == ["3.11", "3.15"]
    assert f"{server.url}/future/torch/ (listed {today})" in row["source"]
    assert row["variants"]
    assert {v["confidence"] for v in row["variants"]} == {"uncertain"}
    # the proposed rows load with the shipped table's schema
    raw = yaml.safe_load(data_file("compat.yaml").read_text(encoding="utf-8"))
    merged = copy.deepcopy(raw)
    merged["releases"] = raw["releases"] + rows
    table = parse_table(merged, str(out))
    assert table.release("2.16.0") is not None
    assert len(table.releases) == len(load_table().releases) + 1


def test_new_companion_releases_are_proposed(
    server: IndexServer, cli: Envforge, tmp_path: Path
) -> None:
    """torchvision 0.30.0 (torch==2.16.0) and torchaudio 2.12.0 (no torch requirement):
    rows from their PEP 658 metadata; the second is uncertain and says so."""
    out = tmp_path / "proposed.yaml"
    _done, data = _refresh(cli, "--index", f"{server.url}/future", "-o", str(out))
    assert _kinds(data, "companion-new") == ["torchvision 0.30.0", "torchaudio 2.12.0"]
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    rows = {r["package"]: r for r in data["proposed_companions"]}
    vision, audio = rows["torchvision"], rows["torchaudio"]
    assert (vision["version"], vision["torch"], vision["requires"], vision["confidence"]) == (
        "0.30.0",
        "2.16.0",
        "==2.16.0",
        "verified",
    )
    assert vision["source"].startswith(f"{server.url}/packages/")
    assert vision["source"].endswith(
        "torchvision-0.30.0-py3-none-manylinux_2_28_x86_64.whl.metadata"
    )
    assert vision["checked"] == today
    # paired with torch 2.16.0, uploaded last before it
    assert (audio["version"], audio["torch"], audio["requires"], audio["confidence"]) == (
        "2.12.0",
        "2.16.0",
        "==2.16.0",
        "uncertain",
    )
    assert "names no torch requirement" in audio["note"]
    metadata = [r.path for r in server.requests if r.path.endswith(".metadata")]
    assert all(path.startswith("/packages/") for path in metadata)
    # the text form prints the rows the way companions.yaml writes them
    human = cli("knowledge", "refresh", "--no-pytorch-index", "--index", f"{server.url}/future")
    assert human.returncode == 0, human.stderr
    assert "  torchvision 0.30.0: listed; not in the companion table" in human.stdout
    assert (
        '  - {package: torchvision, version: "0.30.0", torch: "2.16.0", '
        'requires: "==2.16.0", source: ' in human.stdout
    )
    assert (
        "torchaudio 2.12.0: proposed uncertain: the wheel's METADATA names no torch "
        "requirement" in human.stdout
    )
    # -o: the overlay still loads as compat rows; the companion rows are comments in it
    text = out.read_text(encoding="utf-8")
    assert [r["series"] for r in yaml.safe_load(text)["releases"]] == ["2.16"]
    assert "# proposed companion rows: review, then add them to " in text


def test_status_current_and_behind(server: IndexServer, cli: Envforge) -> None:
    ok = cli("knowledge", "status", "--index", f"{server.url}/simple")
    assert ok.returncode == 0, ok.stderr
    assert "newest torch release: table 2.15.0, index 2.15.0" in ok.stdout
    # the companions, Triton and xformers are watched too (issue 30 §2)
    assert "  triton: table 3.9.0, index 3.9.0" in ok.stdout
    assert "  xformers: table 0.0.35, index 0.0.35" in ok.stdout
    assert "  torchcodec: table 0.17.0, index 0.17.0" in ok.stdout
    assert "  torchao: table 0.18.0, index 0.18.0" in ok.stdout
    assert ok.stdout.rstrip().endswith("current")
    behind = cli("knowledge", "status", "--index", f"{server.url}/future", "--json")
    assert behind.returncode == 1
    data = parse_json(behind)
    assert data["current"] is False
    assert data["missing"] == ["2.16.0"]
    assert data["newest_listed"] == "2.16.0"
    newer = {p["package"]: p["newer"] for p in data["packages"] if p["newer"]}
    assert newer == {"torchvision": ["0.30.0"], "torchaudio": ["2.12.0"]}
    down = cli("knowledge", "status", "--index", f"{server.url}/gone")
    assert down.returncode == 4
    assert "Traceback" not in down.stderr


def test_pytorch_variant_indexes(server: IndexServer, cli: Envforge) -> None:
    done = cli(
        "knowledge",
        "refresh",
        "--json",
        "--index",
        f"{server.url}/simple",
        "--pytorch-index",
        f"{server.url}/whl",
        "--allow-partial",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data = parse_json(done)
    # 2.15 published no cu126 wheels: a listing that has them is news
    assert "torch 2.15 cu126" in _kinds(data, "new-variant")
    # the cpu listing agrees with the table's CPython ranges (2.15: 3.11-3.15)
    assert not [s for s in _kinds(data, "python-range") if "+cpu" in s]
    assert "torch 2.12.0+cpu" in _kinds(data, "missing-variant")
    # variant indexes the server lacks are problems, not failures
    assert any(p["url"] == f"{server.url}/whl/rocm7.2/torch/" for p in data["problems"])
    roots = {r["role"]: r for r in data["roots"]}
    # cpu and cu126 torch pages, then the cpu torchvision page (torch 2.15's variants only)
    assert roots["pytorch-index"]["answered"] == 3
    # torchvision 0.29.3+cpu is only on the cpu index: its metadata gives the row
    assert "torchvision 0.29.3" in _kinds(data, "companion-new")
    [row] = [r for r in data["proposed_companions"] if r["version"] == "0.29.3"]
    assert (row["package"], row["torch"], row["requires"], row["confidence"]) == (
        "torchvision",
        "2.15.0",
        "==2.15.0",
        "verified",
    )
    assert row["source"] == (
        f"{server.url}/whl/cpu/torchvision-0.29.3%2Bcpu-cp311-cp311-"
        "manylinux_2_28_x86_64.whl.metadata"
    )


def test_unreachable_pytorch_root_is_one_problem(server: IndexServer, cli: Envforge) -> None:
    # nothing listens on port 1: every variant listing is refused, reported as one line
    done = cli(
        "knowledge",
        "refresh",
        "--index",
        f"{server.url}/simple",
        "--pytorch-index",
        "http://127.0.0.1:1/whl",
        "--allow-partial",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert len(lines) == 1
    assert lines[0].startswith("problem: http://127.0.0.1:1/whl/... (")
    assert "listings): unreachable: " in lines[0]
    assert "pytorch-index http://127.0.0.1:1/whl: " in done.stdout
    assert "did not answer (skipped)" in done.stdout
