"""The probe command against this interpreter's own environment, for real: a worker
process imports torch and runs the quick probe's steps (CPU only).

Acceptance, not unit: they need torch in the interpreter that runs them (CI's .venv has
the CPU build); the unit tier runs without it (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envforge.cli import main
from tests.unit.evidence.test_summary import _cells, _table_rows


@pytest.fixture(autouse=True)
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's reports and caches stay out of the user's home."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "envforge-home"))


def test_require_free_fails_a_real_probe_naming_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    code = main(
        ["probe", "--level", "quick", "--require-free", "1048576", "--summary", str(summary)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "probe failed at step memory: fail: cpu: " in err
    assert "below --require-free 1048576 GiB" in err
    assert "at step memory (fail)" in summary.read_text()


def test_probe_summary_of_a_failing_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check = tmp_path / "check.py"
    check.write_text("raise RuntimeError('boom | <b>x</b>\\nsecond line')\n")
    summary = tmp_path / "summary.md"
    code = main(
        [
            "probe",
            "--level",
            "quick",
            "--check",
            str(check),
            "--summary",
            str(summary),
            "--step-timeout",
            "120",
        ]
    )
    assert code == 1
    text = summary.read_text()
    assert ": ❌ fail at step check" in text
    row = next(r for r in _table_rows(text) if "boom" in r)
    assert len(_cells(row)) == 4
    assert "&lt;b&gt;" in row
    capsys.readouterr()
