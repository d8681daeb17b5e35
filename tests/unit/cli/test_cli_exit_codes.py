"""The exit code a command asks for with ``ctx.exit(N)`` is the process's exit code.

Outside click's standalone mode, ``ctx.exit(N)`` does not raise: click's ``main`` returns N.
``fleet task`` (what each sbatch array element runs) ends that way, so a task whose
certification failed must exit non-zero for Slurm to record the failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import envforge.cli.fleet as fleet_cli
from envforge.cli import main


@pytest.mark.parametrize("code", [0, 1, 4])
def test_fleet_task_exits_with_the_tasks_code(
    code: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[int] = []

    def run_task(_plan: object, _where: Path, index: int) -> int:
        ran.append(index)
        return code

    monkeypatch.setattr(fleet_cli, "load_plan", lambda _folder: object())
    monkeypatch.setattr(fleet_cli, "run_task", run_task)
    assert main(["fleet", "task", str(tmp_path), "3"]) == code
    assert ran == [3]


def test_a_command_that_returns_nothing_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert capsys.readouterr().out
