"""``envforge fleet preflight``: the files that probe a node before a job lands on it, and
``envforge fleet node-check``, what the Slurm script runs (:mod:`envforge.fleet.preflight`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from envforge.cli.common import load_checked, note
from envforge.cli.running import gpu_environ, pick_for
from envforge.core.fsutil import REPORT_FILES, check_folder_target, write_files
from envforge.core.resources import templates_dir
from envforge.errors import CertificationFailed, InvalidInput
from envforge.fleet.k8s import pod_script
from envforge.fleet.preflight import (
    Preflight,
    drain_reason,
    k8s_files,
    preflight_spec,
    slurm_files,
)
from envforge.probe.bundle import worker_source
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import ProbeSpec, step_timeout_problem

ENGINES = ("slurm", "kubernetes")
#: The GPU resource each vendor's device plugin offers (Kubernetes).
RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


def _timeout(value: float | None) -> float | None:
    if value is not None and step_timeout_problem(value):
        raise InvalidInput(
            f"--step-timeout {step_timeout_problem(value)}", hint="--step-timeout 60"
        )
    return value


@click.command("preflight")
@click.option("--engine", type=click.Choice(ENGINES), required=True, help="Whose files to write.")
@click.option("--recipe", "recipe_ref", required=True, metavar="RECIPE", help="The job's recipe.")
@click.option(
    "--out",
    "-o",
    "out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    show_default=True,
    help="Folder to write into.",
)
@click.option(
    "--python",
    metavar="PATH",
    help="Slurm: the job environment's Python on the nodes (default: the one running envforge).",
)
@click.option(
    "--reports",
    default="/var/log/envforge-preflight",
    show_default=True,
    metavar="DIR",
    help="Slurm: where each node keeps its preflight reports and logs.",
)
@click.option(
    "--image",
    metavar="REF",
    help="Kubernetes: the job's image, which the init container probes "
    "(default: envforge/RECIPE:STACK).",
)
@click.option("--namespace", default="default", show_default=True, help="Kubernetes namespace.")
@click.option("--step-timeout", type=float, metavar="SECONDS", help="Deadline of each step.")
@click.option("--require-healthy", is_flag=True, help="A failing GPU health fact fails the node.")
@click.option(
    "--collective", is_flag=True, help="Add the all-reduce across the job's GPUs (two or more)."
)
def preflight_cmd(  # noqa: PLR0917 - click passes options positionally by name
    engine: str,
    recipe_ref: str,
    out: Path,
    python: str | None,
    reports: str,
    image: str | None,
    namespace: str,
    step_timeout: float | None,
    require_healthy: bool,
    collective: bool,
) -> None:
    """Write a preflight that probes a node before each job: a Slurm Prolog/Epilog script
    that drains a failing node, or a Kubernetes init container that stops the job's pod.

    Both run the recipe's quick probe on the job's GPUs; the Slurm script adds the GPU
    health step. The failure reason is ``envforge: STEP: one line``.
    """
    recipe = load_checked(recipe_ref)
    spec = ProbeSpec.from_recipe(recipe, step_timeout=_timeout(step_timeout))
    spec = preflight_spec(spec, collective)
    pre = Preflight(
        recipe=recipe_ref,
        python=python,
        envforge=(sys.executable, "-m", "envforge"),
        reports=reports,
        step_timeout=spec.step_timeout,
        require_healthy=require_healthy,
        collective=collective,
        image=image or f"envforge/{recipe.name}:{recipe.stack_tag}",
        namespace=namespace,
        gpus=1 if recipe.gpu.vendor in RESOURCES else 0,
        gpu_resource=RESOURCES.get(recipe.gpu.vendor, RESOURCES["nvidia"]),
    )
    if engine == "slurm":
        files = slurm_files(pre, spec)
    else:
        files = k8s_files(pre, spec, worker_source(), pod_script(), _preflight_script())
    check_folder_target(out, setting="--out", files=tuple(files))
    out.mkdir(parents=True, exist_ok=True)
    write_files(
        [
            (out / name, text, 0o755 if name.endswith(".sh") else 0o644)
            for name, text in files.items()
        ]
    )
    for name in files:
        note(f"wrote {out / name}")


def _preflight_script() -> str:

    return (templates_dir() / "fleet" / "k8s-preflight.py").read_text(encoding="utf-8")


@click.command("node-check", hidden=True)
@click.option("--recipe", "recipe_ref", required=True, metavar="RECIPE")
@click.option("--python", metavar="PATH")
@click.option("--step-timeout", type=float, metavar="SECONDS")
@click.option("--report", "report_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--require-healthy", is_flag=True)
@click.option("--collective", is_flag=True)
def node_check_cmd(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str,
    python: str | None,
    step_timeout: float | None,
    report_dir: Path | None,
    require_healthy: bool,
    collective: bool,
) -> None:
    """The preflight's check on a node (what the Slurm script runs): the recipe's quick
    probe with the health step on the GPUs the job was granted. Prints nothing and exits
    0 when it passes; prints ``envforge: STEP: one line`` and exits 1 when it fails."""

    if report_dir is not None:
        check_folder_target(report_dir, setting="--report", files=REPORT_FILES)
    recipe = load_checked(recipe_ref)
    spec = ProbeSpec.from_recipe(recipe, step_timeout=_timeout(step_timeout))
    spec = replace(preflight_spec(spec, collective), health=True, require_healthy=require_healthy)
    # The Prolog runs outside the job's cgroup, with the node's numbering in both of
    # Slurm's variables; inside a job the pick carries the job's (envforge.host.grant).
    environ = gpu_environ(pick_for(recipe, None, from_grant=True))
    report = run_probe(spec, LocalPythonTarget(python=python or sys.executable, env=environ))
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        report.write(report_dir)
    reason = drain_reason(report)
    if reason is not None:
        click.echo(reason)  # stdout: the one line the script drains the node with
        raise CertificationFailed(f"preflight failed: {reason}")
