"""pytest plugin: the seconds each test file took (setup + call + teardown of its tests).

``scripts/test`` loads it (``-p tests.helpers.filetimes``) for the unit and the acceptance
run: the slowest files are printed at the end of the run, and every file's time is written
as ``SECONDS<TAB>FILE`` lines to ``$ENVFORGE_FILE_TIMES`` when that is set, for the
summary table of the CI run. The next slow test file is then visible in every CI log.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: How many files the terminal summary lists (all of them go to $ENVFORGE_FILE_TIMES).
SHOWN = 15


class FileTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] = self.seconds.get(path, 0.0) + report.duration

    def ranked(self) -> list[tuple[str, float]]:
        return sorted(self.seconds.items(), key=lambda item: (-item[1], item[0]))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        ranked = self.ranked()
        if not ranked:
            return
        total = sum(seconds for _, seconds in ranked)
        terminalreporter.write_sep("=", f"seconds per test file (slowest {SHOWN})")
        for path, seconds in ranked[:SHOWN]:
            terminalreporter.write_line(f"{seconds:8.1f}  {path}")
        terminalreporter.write_line(f"{total:8.1f}  all {len(ranked)} files")
        target = os.environ.get("ENVFORGE_FILE_TIMES")
        if target:
            lines = "".join(f"{seconds:.1f}\t{path}\n" for path, seconds in ranked)
            Path(target).write_text(lines, encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: its reports reach the controller, which counts them
    config.pluginmanager.register(FileTimes(), "envforge-file-times")
