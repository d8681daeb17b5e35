"""Progress on stderr: build/push output (:class:`BuildDisplay`) and probe steps
(:class:`ProbeProgress`), each a live display on a TTY and plain lines for logs."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TYPE_CHECKING, TextIO

from envforge.errors import clip

if TYPE_CHECKING:
    from envforge.probe.report import StepResult

#: In an import step's detail: modules it did not import, each with why (the worker's).
SKIPPED_MARK = "; skipped "


class BuildDisplay:
    """Build output for people (a TTY: step lines kept, other output on one status line)
    or for logs (every line as it comes)."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._status = False

    def __call__(self, line: str) -> None:
        if not self.tty:
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        width = shutil.get_terminal_size((100, 20)).columns
        elapsed = time.monotonic() - self.started
        if line.startswith("Step "):
            self._clear()
            self.stream.write(f"\x1b[1m[{elapsed:6.1f}s] {line[: width - 10]}\x1b[0m\n")
        else:
            text = " ".join(line.split())
            self.stream.write(f"\r\x1b[K\x1b[2m    {text[: width - 6]}\x1b[0m")
            self._status = True
        self.stream.flush()

    def _clear(self) -> None:
        if self._status:
            self.stream.write("\r\x1b[K")
            self._status = False

    def close(self) -> None:
        if self.tty:
            self._clear()
            self.stream.flush()


class ProbeProgress:
    """The probe's steps as they run (a ``ProbeListener``).

    On a TTY the running step shows as a "running" row that is rewritten in place when it
    ends; elsewhere (logs, CI) one plain line per finished step. ``table=True`` (``envforge
    probe``) prints columns with the full detail and colours; ``table=False`` (the probe
    inside ``build``, ``certify`` and ``shell --fallback``) one short line per step.
    """

    def __init__(
        self, stream: TextIO | None = None, tty: bool | None = None, *, table: bool = True
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.table = table
        self.width = shutil.get_terminal_size((100, 20)).columns if self.tty else 160

    def header(self, text: str) -> None:
        self.stream.write(text + "\n")
        if self.tty and self.table:
            self.stream.write(f"  {'STEP':<24} {'STATUS':<10} {'SECONDS':>8}  DETAIL\n")
        self.stream.flush()

    def step_started(self, step: str, deadline: float) -> None:
        if not self.tty:
            return
        if self.table:
            self.stream.write(
                f"\r\x1b[K  {step:<24} {'running':<10} {'':>8}  (deadline {deadline:g}s)"
            )
        else:
            self.stream.write(f"\r\x1b[K  {step:<24} running (deadline {deadline:g}s)")
        self.stream.flush()

    def step_finished(self, result: StepResult) -> None:
        if self.table:
            row = f"  {result.name:<24} {result.status:<10} {result.seconds:8.2f}  {result.detail}"
            if self.tty:
                row = "\r\x1b[K" + _colour(row[: self.width - 1], result.status)
        else:
            prefix = "\r\x1b[K" if self.tty else ""
            # a pass says no more, unless an import step skipped modules (and why)
            shown = result.status != "pass" or SKIPPED_MARK in result.detail
            detail = f"  {clip(result.detail, 160)}" if shown and result.detail else ""
            row = f"{prefix}  {result.name:<24} {result.status:<9} {result.seconds:7.2f}s{detail}"
        self.stream.write(row + "\n")
        self.stream.flush()


def _colour(text: str, status: str) -> str:
    code = {"pass": "32", "warn": "33", "skip": "2"}.get(status, "31")
    return f"\x1b[{code}m{text}\x1b[0m"
