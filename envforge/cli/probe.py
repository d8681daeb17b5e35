"""``envforge probe``: the timed, isolated probe of an interpreter's environment.

Without ``--recipe`` the probe accepts whatever is installed (no version pins) and uses the
GPU when torch sees one, else the CPU ("auto"). With ``--recipe`` it checks the recipe's
pins, sets the recipe's env vars for the worker, and a GPU recipe without a visible GPU
reports ``no-device``. Progress goes to stderr (a live table on a TTY, one line per step
otherwise); the verdict and ``--json`` data go to stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.cli.common import (
    echo_json,
    effective_settings,
    gpu_option,
    json_option,
    level_option,
    load_checked,
    load_signer,
    python_option,
    report_option,
    say,
    set_option,
    signing_key_option,
    step_timeout_option,
    summary_option,
    term_as_interrupt,
)
from envforge.cli.display import ProbeProgress
from envforge.cli.running import gpu_environ, health_options, pick_for, require_free_option
from envforge.core.fsutil import REPORT_FILES, check_folder_target, write_atomically
from envforge.core.sharing import sharing
from envforge.errors import CertificationFailed, InvalidInput, clip
from envforge.evidence.evidence_store import record, signed_report
from envforge.evidence.kinds.signed_probe import FILE_NAME as SIGNED_NAME
from envforge.evidence.summary import summarizing
from envforge.host.grant import granted
from envforge.probe.report import summarize
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import CHECK_PREFIX, ProbeSpec, step_timeout_problem
from envforge.recipe.model import Level

if TYPE_CHECKING:
    from envforge.probe.report import ProbeReport, StepResult
    from envforge.publish.signing import SigningKey

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


@click.command()
@click.option(
    "--recipe", "recipe_ref", metavar="RECIPE", help="Check this recipe's pins and device."
)
@set_option
@level_option(
    "quick: versions, device, memory, tensor, matmul, transfer; full adds conv2d, "
    "autocast, gradient checkpointing. Both import every distribution the recipe asks "
    "for and run torchvision's/torchaudio's device steps. Default: the recipe's, else full."
)
@step_timeout_option("Deadline of each step (default: the recipe's, else 60).", "SECONDS")
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A Python file run in the worker; passes if it does not raise (repeatable).",
)
@json_option
@report_option("Write DIR/probe.json and DIR/probe.junit.xml.", "DIR")
@python_option("Probe this interpreter's environment (default: the one running envforge).")
@summary_option
@gpu_option
@require_free_option
@health_options
@signing_key_option
def probe(  # noqa: PLR0917 - click passes options positionally
    recipe_ref: str | None,
    overrides: tuple[str, ...],
    level: Level | None,
    step_timeout: float | None,
    checks: tuple[Path, ...],
    as_json: bool,
    report_dir: Path | None,
    python: str | None,
    summary_file: Path | None,
    gpu: str | None,
    require_free: float | None,
    health: bool,
    require_healthy: bool,
    collective: bool,
    signing_key: Path | None,
) -> None:
    """Probe an environment step by step, each step under a deadline in an isolated process.

    Exit 0 when every step passes (a warning, such as a GPU whose memory other processes
    hold, still passes), 1 when one fails, hangs, crashes, runs out of memory or finds no
    device, or a GPU has less free than --require-free.
    """
    if step_timeout is not None and step_timeout_problem(step_timeout):
        raise InvalidInput(
            f"--step-timeout {step_timeout_problem(step_timeout)}", hint="--step-timeout 60"
        )
    key = None
    if report_dir is not None:  # before the probe runs: a file in the way is exit 2 now
        check_folder_target(report_dir, setting="--report", files=REPORT_FILES)
        key = _signer(signing_key)
    title = "envforge probe" + (f" --recipe {recipe_ref}" if recipe_ref else "")
    with summarizing(summary_file, title) as notes:
        if recipe_ref is None:
            if overrides:
                raise InvalidInput(
                    "--set needs --recipe", hint="envforge probe --recipe cpu --set ..."
                )
            pick = pick_for(None, gpu)
            spec = ProbeSpec.for_installed(
                level=level or "full",
                step_timeout=step_timeout if step_timeout is not None else 60.0,
                extra_checks=checks,
            )
        else:
            recipe = load_checked(recipe_ref, overrides)
            pick = pick_for(recipe, gpu)
            spec = ProbeSpec.from_recipe(
                recipe, level=level, step_timeout=step_timeout, extra_checks=checks
            )
        if require_free is not None:
            spec = replace(spec, require_free=require_free)
        spec = replace(spec, health=health, require_healthy=require_healthy, collective=collective)
        if gpu is None:
            _say_grant()
        target = LocalPythonTarget(python=python or sys.executable, env=gpu_environ(pick))
        table = ProbeProgress()
        live = not as_json or table.tty
        if live:
            what = f"recipe {spec.recipe_name}" if spec.recipe_name else "installed packages"
            table.header(
                f"Probing {target.description} against {what}: level {spec.level}, "
                f"{spec.step_timeout:g}s per step"
            )
        started = time.monotonic()
        with term_as_interrupt():
            report = run_probe(spec, target, listener=table if live else None)
        notes.add(report)
        if report_dir is not None:
            _write_report(report, report_dir, key)
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


def _signer(signing_key: Path | None) -> SigningKey | None:
    """The key the report is signed with: --signing-key, $ENVFORGE_SIGNING_KEY or the
    settings' signing_key (loaded before the probe runs: a bad key is exit 2 now)."""
    settings = effective_settings({"signing_key": signing_key}, None, ("signing_key",))
    return load_signer(settings.path("signing_key"))


def _write_report(report: ProbeReport, folder: Path, key: SigningKey | None) -> None:
    """Write the report's files (with a key, also ``probe.signed.json``: the report as
    the evidence store keeps it, signed) and keep the run in the local evidence store."""
    run: Mapping[str, Any] = report.to_dict()
    try:
        json_path, junit_path = report.write(folder)
        if key is not None:  # made to be shared: a node's name only if the site shares them
            run = signed_report(run, key, node=sharing().node_names)
            signed = folder / SIGNED_NAME
            write_atomically(signed, json.dumps(run, indent=2) + "\n", setting="--report")
            click.echo(f"wrote {signed} (signed by {key.public.label})", err=True)
    except OSError as exc:
        raise InvalidInput(
            f"--report {folder}: cannot write: {exc.strerror or exc}",
            hint="pass a folder you can write to",
        ) from None
    click.echo(f"wrote {json_path} and {junit_path}", err=True)
    stored = record(run, node=report.host.node or "")  # a certification: probe --report
    click.echo(f"kept in the evidence store: {stored}", err=True)


def _hint(problem: StepResult, spec: ProbeSpec) -> str | None:
    if problem.name.startswith(CHECK_PREFIX) and problem.status == "fail":
        path = next((c.path for c in spec.checks if c.step == problem.name), "the check")
        return f"the check raised; run it with the probed interpreter to debug: python {path}"
    if problem.name == "memory" and problem.status == "fail" and spec.require_free:
        return (
            "other processes hold the GPU's memory (named in the detail where the driver "
            "shows them): stop them, or lower --require-free"
        )
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
    detail = clip(problem.detail, 300)  # the cause, at the end, is kept
    raise CertificationFailed(
        f"probe failed at step {problem.name}: {problem.status}: {detail}",
        hint=_hint(problem, spec),
    )


def _say_grant() -> None:
    """Inside a scheduler's job, say what it granted. The probe runs in this process's own
    environment, where the scheduler has already narrowed the GPUs (its
    ``CUDA_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES`` are inherited as they are, in the
    job's numbering: from 0 under ConstrainDevices): the grant is said, not re-applied,
    so the node's GRES indexes never replace the job's numbers (:mod:`envforge.host.grant`)."""
    grant = granted(os.environ)
    if grant is not None:
        say(
            f"the scheduler granted GPU {grant.gpus} ({grant.describe()}); "
            "probing the GPUs this job sees"
        )
