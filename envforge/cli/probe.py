"""``envforge probe``: the timed, isolated probe of an interpreter's environment.

Without ``--recipe`` the probe accepts whatever is installed (no version pins) and uses the
GPU when torch sees one, else the CPU ("auto"). With ``--recipe`` it checks the recipe's
pins, sets the recipe's env vars for the worker, and a GPU recipe without a visible GPU
reports ``no-device``. Progress goes to stderr (a live table on a TTY, one line per step
otherwise); the verdict and ``--json`` data go to stdout.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TextIO

import click

from envforge.cli.common import echo_json, json_option, load_checked, set_option
from envforge.errors import CertificationFailed, InvalidInput
from envforge.probe.report import ProbeReport, StepResult, summarize
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import CHECK_PREFIX, ProbeSpec, step_timeout_problem
from envforge.recipe.model import LEVELS, Level

_HINTS = {
    "hang": "a hung GPU call; see the recipe's known issues (envforge show RECIPE), "
    "or raise --step-timeout if the step is only slow",
    "crash": "the worker died in this step; its stderr is in the detail "
    "(envforge probe --json shows all of it)",
    "oom": "out of memory; close other GPU users or lower PYTORCH_HIP_ALLOC_CONF/"
    "PYTORCH_CUDA_ALLOC_CONF limits",
    "no-device": "torch sees no GPU: check the torch wheel and device access (envforge doctor)",
    "fail": "see the step's detail; `envforge show RECIPE` lists the pins and known issues",
}


def register(group: click.Group) -> None:
    group.add_command(probe)


class ProbeTable:
    """Live table of steps (step, status, seconds, detail) as the probe runs.

    On a TTY the running step shows as a "running" row that is rewritten in place when it
    ends; elsewhere (logs, CI) one plain line per finished step.
    """

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.width = shutil.get_terminal_size((100, 20)).columns if self.tty else 160

    def header(self, text: str) -> None:
        self.stream.write(text + "\n")
        if self.tty:
            self.stream.write(f"  {'STEP':<24} {'STATUS':<10} {'SECONDS':>8}  DETAIL\n")
        self.stream.flush()

    def step_started(self, step: str, deadline: float) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[K  {step:<24} {'running':<10} {'':>8}  "
                              f"(deadline {deadline:g}s)")
            self.stream.flush()

    def step_finished(self, result: StepResult) -> None:
        row = f"  {result.name:<24} {result.status:<10} {result.seconds:8.2f}  {result.detail}"
        if self.tty:
            row = "\r\x1b[K" + _colour(row[: self.width - 1], result.status)
        self.stream.write(row + "\n")
        self.stream.flush()


def _colour(text: str, status: str) -> str:
    code = {"pass": "32", "skip": "2"}.get(status, "31")
    return f"\x1b[{code}m{text}\x1b[0m"


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """While probing, SIGTERM stops the worker like Ctrl-C does (nothing left running)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command()
@click.option(
    "--recipe", "recipe_ref", metavar="RECIPE", help="Check this recipe's pins and device."
)
@set_option
@click.option(
    "--level",
    type=click.Choice(LEVELS),
    default=None,
    help="quick: versions, device, memory, tensor, matmul, transfer; full adds conv2d, "
    "autocast, gradient checkpointing. Default: the recipe's, else full.",
)
@click.option(
    "--step-timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Deadline of each step (default: the recipe's, else 60).",
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A Python file run in the worker; passes if it does not raise (repeatable).",
)
@json_option
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write DIR/probe.json and DIR/probe.junit.xml.",
)
@click.option(
    "--python",
    "python",
    metavar="PATH",
    default=None,
    help="Probe this interpreter's environment (default: the one running envforge).",
)
def probe(  # noqa: PLR0917 - click passes options positionally
    recipe_ref: str | None,
    overrides: tuple[str, ...],
    level: Level | None,
    step_timeout: float | None,
    checks: tuple[Path, ...],
    as_json: bool,
    report_dir: Path | None,
    python: str | None,
) -> None:
    """Probe an environment step by step, each step under a deadline in an isolated process.

    Exit 0 when every step passes, 1 when one fails, hangs, crashes, runs out of memory or
    finds no device.
    """
    if step_timeout is not None and step_timeout_problem(step_timeout):
        raise InvalidInput(f"--step-timeout {step_timeout_problem(step_timeout)}",
                           hint="--step-timeout 60")
    if report_dir is not None and report_dir.exists() and not report_dir.is_dir():
        raise InvalidInput(f"--report {report_dir}: exists and is not a folder",
                           hint="pass a folder (it is created when missing)")
    if recipe_ref is None:
        if overrides:
            raise InvalidInput("--set needs --recipe", hint="envforge probe --recipe cpu --set ...")
        spec = ProbeSpec.for_installed(
            level=level or "full",
            step_timeout=step_timeout if step_timeout is not None else 60.0,
            extra_checks=checks,
        )
    else:
        recipe = load_checked(recipe_ref, overrides)
        spec = ProbeSpec.from_recipe(
            recipe, level=level, step_timeout=step_timeout, extra_checks=checks
        )
    target = LocalPythonTarget(python=python or sys.executable)
    table = ProbeTable()
    live = not as_json or table.tty
    if live:
        what = f"recipe {spec.recipe_name}" if spec.recipe_name else "installed packages"
        table.header(
            f"Probing {target.description} against {what}: level {spec.level}, "
            f"{spec.step_timeout:g}s per step"
        )
    started = time.monotonic()
    with _term_as_interrupt():
        report = run_probe(spec, target, listener=table if live else None)
    if report_dir is not None:
        _write_report(report, report_dir)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(
            f"{report.status.upper()}: {summarize(report.steps)} "
            f"in {time.monotonic() - started:.1f}s"
        )
    problem = report.first_problem
    if problem is not None or not report.passed:
        _raise_failed(report, problem, spec)


def _write_report(report: ProbeReport, folder: Path) -> None:
    try:
        json_path, junit_path = report.write(folder)
    except OSError as exc:
        raise InvalidInput(
            f"--report {folder}: cannot write: {exc.strerror or exc}",
            hint="pass a folder you can write to",
        ) from None
    click.echo(f"wrote {json_path} and {junit_path}", err=True)


def _hint(problem: StepResult, spec: ProbeSpec) -> str | None:
    if problem.name.startswith(CHECK_PREFIX) and problem.status == "fail":
        path = next((c.path for c in spec.checks if c.step == problem.name), "the check")
        return f"the check raised; run it with the probed interpreter to debug: python {path}"
    if problem.status == "fail" and spec.recipe_name is None:
        return "see the step's detail"
    hint = _HINTS.get(problem.status)
    if hint and spec.recipe_name:
        hint = hint.replace("RECIPE", spec.recipe_name)
    return hint


def _raise_failed(report: ProbeReport, problem: StepResult | None, spec: ProbeSpec) -> None:
    if problem is None:  # every step skipped (should not happen): name the first
        problem = report.steps[0] if report.steps else None
    if problem is None:
        raise CertificationFailed("probe ran no steps")
    detail = problem.detail if len(problem.detail) <= 300 else problem.detail[:297] + "..."
    raise CertificationFailed(
        f"probe failed at step {problem.name}: {problem.status}: {detail}",
        hint=_hint(problem, spec),
    )
