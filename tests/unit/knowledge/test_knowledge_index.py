"""The index client's parsers and the refresh/status comparisons, on recorded pages
(tests/fixtures/index) and on arbitrary input: never a crash, always a named problem."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envforge.knowledge import load_table
from envforge.knowledge.compare import compare_numpy, compare_torch
from envforge.knowledge.index import (
    PEP691_JSON,
    IndexProblem,
    Listing,
    cuda_variant,
    parse_listing,
    requires_dist,
)
from envforge.knowledge.refresh import StatusReport, problem_lines, stale_rows
from tests.helpers import paths

FIXTURES = paths.TESTS / "fixtures" / "index"
URL = "http://127.0.0.1:9/simple/torch/"


def _listing(name: str, ctype: str, project: str = "torch") -> Listing:
    got = parse_listing((FIXTURES / name).read_bytes(), ctype, URL, project)
    assert isinstance(got, Listing), got
    return got


def test_json_and_html_forms_agree() -> None:
    js = _listing("torch.json", PEP691_JSON)
    html = _listing("torch.html", "text/html")
    assert js.form == "json"
    assert html.form == "html"
    assert js.versions() == html.versions() == ("2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0")
    assert {f.filename for f in js.files} == {f.filename for f in html.files}
    f = next(f for f in js.files if f.filename.startswith("torch-2.15.0-cp315-cp315t-"))
    assert f.pythons == ()
    assert f.pythons_t == ("3.15",)
    assert f.linux_x86_64
    assert f.url.startswith("http://127.0.0.1:9/packages/")  # relative URLs resolved
    win = next(f for f in js.files if f.filename.endswith("win_amd64.whl"))
    assert not win.linux_x86_64


def test_numpy_yanked_flag() -> None:
    np = _listing("numpy.json", PEP691_JSON, "numpy")
    assert np.yanked_versions() == ("2.4.0",)
    f = next(f for f in np.files if f.version == "2.4.0")
    assert f.yanked_reason == "Backward compatibility bug"


@pytest.mark.parametrize(
    ("body", "ctype", "reason"),
    [
        (b'{"meta": {"api-version": "1.1"}, "files": [', PEP691_JSON, "invalid JSON"),
        (b'{"meta": {"api-version": "2.0"}, "files": []}', PEP691_JSON, "not 1.x"),
        (b'{"meta": {"api-version": "1.0"}}', PEP691_JSON, "no 'files' list"),
        (b'{"meta": {"api-version": "1.0"}, "files": [3]}', PEP691_JSON, "files[0]"),
        (b"[]", PEP691_JSON, "not an object"),
        (b"\xff\xfe", "text/html", "not UTF-8"),
        (b"just text", "text/html", "no tags"),
        (b"%PDF", "application/pdf", "unexpected content type"),
    ],
)
def test_malformed_listing_is_a_problem(body: bytes, ctype: str, reason: str) -> None:
    got = parse_listing(body, ctype, URL, "torch")
    assert isinstance(got, IndexProblem)
    assert got.kind == "malformed"
    assert reason in got.reason
    assert got.one_line().startswith(URL)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.sampled_from([PEP691_JSON, "text/html", "", "x/y"]))
def test_no_listing_content_crashes_the_parser(body: bytes, ctype: str) -> None:
    got = parse_listing(body, ctype, URL, "torch")
    assert isinstance(got, (Listing, IndexProblem))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"filename": st.text(max_size=60), "url": st.text(max_size=30)},
            optional={
                "yanked": st.one_of(st.booleans(), st.text(max_size=5)),
                "requires-python": st.text(max_size=8),
            },
        ),
        max_size=5,
    )
)
def test_no_json_file_entry_crashes_the_parser(files: list[dict[str, object]]) -> None:
    body = json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()
    got = parse_listing(body, PEP691_JSON, URL, "torch")
    assert isinstance(got, (Listing, IndexProblem))


@pytest.mark.parametrize(
    ("reqs", "variant"),
    [
        (['cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"'], "cu130"),
        (['nvidia-cuda-runtime-cu12==12.4.127; platform_system == "Linux"'], "cu124"),
        (['nvidia-cuda-runtime-cu11 (==11.7.99) ; platform_system == "Linux"'], "cu117"),
        (["nvidia-cuda-nvrtc-cu12 (==12.1.105)"], "cu121"),
        (["filelock", "sympy"], None),
    ],
)
def test_cuda_variant_from_requirements(reqs: list[str], variant: str | None) -> None:
    assert cuda_variant(reqs) == variant


def test_recorded_metadata_names_the_default_build() -> None:
    text = (FIXTURES / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata").read_text()
    assert cuda_variant(requires_dist(text)) == "cu130"


def test_compare_torch_on_the_recorded_page() -> None:
    table = load_table()
    found = compare_torch(table, _listing("torch.json", PEP691_JSON))
    kinds = {(f.kind, f.subject) for f in found}
    assert ("missing-release", "torch 2.12.0") in kinds  # trimmed page
    assert not [f for f in found if f.kind in ("new-release", "python-range", "yanked")]
    # a table that still ends at 2.13 sees 2.14.0, 2.14.1 and 2.15.0 as new
    old = replace(
        table, releases=tuple(r for r in table.releases if r.series not in ("2.14", "2.15"))
    )
    new = [
        f.subject
        for f in compare_torch(old, _listing("torch.json", PEP691_JSON))
        if f.kind == "new-release"
    ]
    assert new == ["torch 2.14.0", "torch 2.14.1", "torch 2.15.0"]


def test_compare_numpy_sees_a_yank_the_table_lacks() -> None:
    table = load_table()
    page = _listing("numpy.json", PEP691_JSON, "numpy")
    assert compare_numpy(table, page) == []
    unyanked = replace(
        table,
        numpy_releases=tuple(replace(n, yanked=()) for n in table.numpy_releases),
    )
    found = compare_numpy(unyanked, page)
    assert [(f.kind, f.subject) for f in found] == [("numpy-yanked", "numpy 2.4.0")]


def test_problem_lines_merge_one_root() -> None:
    problems = [
        IndexProblem(f"http://h/whl/cu{n}/torch/", "unreachable", "no DNS") for n in (118, 121)
    ]
    problems.append(IndexProblem("http://o/simple/torch/", "timeout", "no answer"))
    assert problem_lines(problems) == [
        "http://h/whl/... (2 listings): unreachable: no DNS",
        "http://o/simple/torch/: timeout: no answer",
    ]


def test_status_reports_rows_not_checked_for_90_days() -> None:
    table = load_table()
    assert stale_rows(table, datetime.date(2027, 2, 21)) == ()  # 90 days after 2026-11-23
    late = stale_rows(table, datetime.date(2027, 2, 22))
    assert [s for s, _ in late] == [r.series for r in table.releases]
    assert {c for _, c in late} == {"2026-11-23"}
    unchecked = replace(table, releases=(replace(table.releases[0], checked=""),))
    assert stale_rows(unchecked, datetime.date(2026, 11, 23)) == (("1.12", "never"),)
    report = StatusReport("u", "2027-03-01", "2.15.0", "2.15.0", (), late[:1], 90)
    assert report.current
    assert "rows not checked for more than 90 days: 1.12 (2026-11-23)" in report.lines()
