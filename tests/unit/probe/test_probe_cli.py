"""``envforge probe`` argument errors (exit 2, one line, no traceback) and its live table."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.cli.display import ProbeProgress
from envforge.probe.report import StepResult


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["probe", "--set", "numpy=<2"], "--set needs --recipe"),
        (["probe", "--step-timeout", "0"], "--step-timeout must be positive"),
        (["probe", "--step-timeout", "inf"], "--step-timeout must be positive and at most"),
        (["probe", "--step-timeout", "nan"], "got nan"),
        (["probe", "--step-timeout", "-1"], "got -1"),
        (["probe", "--step-timeout", "1e300"], "got 1e+300"),
        (["probe", "--check", "/dev/zero"], "check file /dev/zero: not a regular file"),
        (["probe", "--check", "/nonexistent/check.py"], "check file /nonexistent/check.py"),
        (["probe", "--recipe", "no-such-recipe"], "no recipe named 'no-such-recipe'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_missing_interpreter_is_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--python", "/nonexistent/python3"]) == 4
    err = capsys.readouterr().err
    assert "not found or not executable" in err
    assert "Traceback" not in err


def test_a_report_path_that_is_a_file_is_refused_before_probing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    assert main(["probe", "--python", "/nonexistent/python3", "--report", str(blocker)]) == 2
    assert "--report" in capsys.readouterr().err
    assert blocker.read_text() == "keep me"


def test_table_plain_lines_when_not_a_tty() -> None:
    out = io.StringIO()
    table = ProbeProgress(out, tty=False)
    table.header("Probing python")
    table.step_started("conv2d", 60.0)
    table.step_finished(StepResult("conv2d", "hang", 60.01, "no result within the 60s deadline"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "Probing python"
    assert lines[1].split()[:3] == ["conv2d", "hang", "60.01"]
    assert "\x1b" not in out.getvalue()
    assert len(lines) == 2


def test_table_rewrites_the_running_row_on_a_tty() -> None:
    out = io.StringIO()
    table = ProbeProgress(out, tty=True)
    table.step_started("matmul", 15.0)
    assert "running" in out.getvalue()
    assert "deadline 15s" in out.getvalue()
    table.step_finished(StepResult("matmul", "pass", 0.02, "ok"))
    assert out.getvalue().count("\r\x1b[K") == 2
    assert out.getvalue().endswith("\x1b[0m\n")


def test_inside_a_slurm_job_the_probe_says_the_grant_and_keeps_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_GPUS": "1",
        "CUDA_VISIBLE_DEVICES": "1",
        "SLURMD_NODENAME": "gpu-a",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["probe", "--python", "/nonexistent/python3"]) == 4
    err = capsys.readouterr().err
    assert "the scheduler granted GPU 1 (SLURM_JOB_GPUS=1 on gpu-a)" in err


def test_outside_a_job_the_probe_says_no_grant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert main(["probe", "--python", "/nonexistent/python3"]) == 4
    assert "granted" not in capsys.readouterr().err
