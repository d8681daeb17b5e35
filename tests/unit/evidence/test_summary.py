"""``--summary FILE``: Markdown for $GITHUB_STEP_SUMMARY, escaped so that nothing a check
prints can break the table or inject Markdown/HTML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envforge.cli import main
from envforge.evidence.summary import cell, fenced, section
from envforge.probe.report import ProbeReport, ReportHost, StepResult


def _report(*steps: StepResult) -> ProbeReport:
    return ProbeReport(
        steps=steps,
        level="quick",
        target="python",
        host=ReportHost("Linux 6.8", "x86_64"),
        envforge_version="0.1.0",
        created="2026-11-20T12:00:00Z",
        recipe_name="cpu",
    )


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def _cells(row: str) -> list[str]:
    """A GFM table row split on unescaped pipes."""
    return list(re.split(r"(?<!\\)\|", row)[1:-1])


NASTY = (
    "a | b\n| --- |\nnext line <script>alert(1)</script> **bold** [link](http://x) "
    "`code` ``` fence\r\n# heading"
)


def test_a_nasty_message_stays_in_its_cell() -> None:
    report = _report(
        StepResult("device", "pass", 0.1, "ok"),
        StepResult("check:x.py", "fail", 0.2, NASTY),
        StepResult("matmul", "skip", 0.0, "not run"),
    )
    text = section("envforge probe --recipe cpu", report)
    rows = _table_rows(text)
    step_rows = [r for r in rows if "check" in r or "device" in r or "matmul" in r]
    assert len(step_rows) == 3  # one line per step: the newlines became <br>
    for row in step_rows:
        assert len(_cells(row)) == 4, row
    bad = next(r for r in step_rows if "check" in r)
    assert "<script>" not in bad
    assert "&lt;script&gt;" in bad
    assert "\\*\\*bold\\*\\*" in bad
    assert "\\[link\\](http://x)" in bad
    assert text.startswith("### envforge probe --recipe cpu: ❌ fail at step check:x.py (fail)")
    # The full detail is in a fence that its own ``` cannot close.
    fence_open = next(line for line in text.splitlines() if line.startswith("````"))
    assert fence_open == "````text"
    assert NASTY.replace("\r\n", "\n") in text.replace("\r\n", "\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_one_cell(text: str) -> None:
    out = cell(text)
    assert "\n" not in out
    assert "\r" not in out
    assert len(_cells(f"| {out} |")) == 1
    assert "<" not in out.replace("<br>", "")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_a_fence_is_never_closed_by_its_content(text: str) -> None:
    block = fenced(text)
    fence = block.split("\n", 1)[0][: -len("text")]
    inner = block.splitlines()[1:-1]
    assert not any(line.strip().startswith(fence) for line in inner)


def test_a_pass_and_an_error_before_the_probe() -> None:
    ok = section(
        "envforge build cpu",
        _report(StepResult("device", "pass", 0.1, "cpu")),
        facts=[("certificate", "sha256:abc"), ("signed by", "unsigned")],
    )
    assert ok.startswith("### envforge build cpu: ✅ pass\n")
    assert "| signed by | unsigned |" in ok
    err = section("envforge build cpu", None, error="cannot reach the engine | exit 4")
    assert err.startswith("### envforge build cpu: ❌ error")
    assert "cannot reach the engine \\| exit 4" in err


def test_probe_summary_is_appended_even_when_the_probe_cannot_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    code = main(
        ["probe", "--recipe", "cpu", "--python", "/nonexistent/python", "--summary", str(summary)]
    )
    assert code == 4
    text = summary.read_text()
    assert text.startswith("# earlier step\n### envforge probe --recipe cpu: ❌ error")
    assert "/nonexistent/python" in text
    capsys.readouterr()
    assert main(["probe", "--summary", str(tmp_path)]) == 2  # a folder: refused at once
    assert "--summary" in capsys.readouterr().err


def test_venv_build_summary_shows_the_report_and_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``build --backend venv --summary``: a pass appends the steps; a failed probe (the
    backend raises) appends the report it left in the venv's markers."""
    from envforge.backends import venv
    from envforge.errors import CertificationFailed

    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    report = _report(StepResult("device", "pass", 0.1, "cpu"))

    def passing(recipe: object, options: object) -> venv.VenvBuildResult:
        return venv.VenvBuildResult(
            "cpu",
            tmp_path / "v",
            "built",
            venv.Interpreter("python3", "python3", "3.11.7"),
            report,
            1.0,
        )

    monkeypatch.setattr(venv, "make", passing)
    summary = tmp_path / "summary.md"
    assert main(["build", "cpu", "--backend", "venv", "--summary", str(summary)]) == 0
    assert summary.read_text().startswith("### envforge build cpu: ✅ pass")
    assert "| backend | venv |" in summary.read_text()

    bad = _report(StepResult("matmul", "fail", 0.1, "wrong | answer"))
    location = venv.venv_location

    def failing(recipe: object, options: object) -> venv.VenvBuildResult:
        markers = location(recipe) / venv.MARKER_DIR  # type: ignore[arg-type]
        bad.write(markers)
        raise CertificationFailed("cpu: the probe did not pass")

    monkeypatch.setattr(venv, "make", failing)
    assert main(["build", "cpu", "--backend", "venv", "--summary", str(summary)]) == 1
    text = summary.read_text()
    assert "### envforge build cpu: ❌ fail at step matmul (fail)" in text
    assert "wrong \\| answer" in text
    capsys.readouterr()
