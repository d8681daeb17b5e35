"""``envforge fleet plan|submit|status|collect``: certify recipes on a fleet's nodes.

``plan`` writes ``DIR/plan.json`` and the engine's files (:mod:`envforge.fleet`): Slurm
sbatch arrays, Kubernetes Jobs (``jobs.yaml``), or a GitHub Actions workflow
(``workflow.yml``). ``submit`` hands them to the scheduler, ``status`` says where each task
is (exit 0 all passed, 1 any failed, missing or not finished, 4 scheduler unreachable),
``collect`` imports every task's report into the evidence store, checks each is about the
planned recipe and written by that task's probe run (others are ``refused``, not
imported), and writes the matrix site (exit 1 when any failed, was refused or is missing).
``task`` (hidden) is what each array task runs on its node.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.backends import BACKENDS
from envforge.cli.backend_options import backend_option
from envforge.cli.choices import RegistryChoice
from envforge.cli.common import (
    OutputPath,
    ca_bundle_option,
    echo_json,
    json_option,
    load_checked,
    note,
    require_signed_option,
    say,
    set_option,
    signed_policy,
    signing_key_ref_option,
    trust_option,
    wheelhouse_option,
)
from envforge.cli.fleet_nodes import GPU_COUNT, NodeChoice, clean_cmd, node_options, plan_arguments
from envforge.cli.fleet_options import pairs, preamble_text, probe_check_options, seconds
from envforge.cli.fleet_preflight import node_check_cmd, preflight_cmd
from envforge.core.fsutil import check_folder_target
from envforge.errors import CertificationFailed, InvalidInput, Unavailable, printable
from envforge.evidence.evidence_store import import_documents
from envforge.evidence.matrix import aggregate, write_site
from envforge.evidence.records import Redactor
from envforge.fleet import outcome, runs
from envforge.fleet.engines import ENGINES, engine_for
from envforge.fleet.outcome import counts
from envforge.fleet.plan import PlanChecks, Site
from envforge.fleet.planning import load_plan, make_plan
from envforge.fleet.signing_ref import key_ref
from envforge.fleet.task import run_task
from envforge.fleet.values import arch_problem
from envforge.fleet.write import submit, write_plan
from envforge.knowledge import load_table
from envforge.knowledge.gpu_names import arch_for_name

if TYPE_CHECKING:
    from envforge.fleet.outcome import TaskState
    from envforge.fleet.plan import Plan
    from envforge.fleet.slurm_state import JobState

#: The longest ``status --wait --timeout`` (30 days).
MAX_WAIT = 30 * 86400
#: ``status --wait`` without ``--timeout`` gives up after this long (a day).
DEFAULT_WAIT = 86400.0


@click.group("fleet")
def fleet() -> None:
    """Certify recipes on a fleet's nodes: Slurm arrays, Kubernetes Jobs, Actions matrix."""


@fleet.command("plan")
@click.option(
    "--engine",
    type=RegistryChoice(lambda: ENGINES),
    required=True,
    help="Which scheduler's files to write.",
)
@click.option(
    "--recipe",
    "recipes",
    multiple=True,
    required=True,
    metavar="RECIPE",
    help="A recipe name or file (repeatable).",
)
@click.option(
    "--arch",
    "archs",
    multiple=True,
    metavar="ARCH|GPU",
    help="Certify on nodes of this GPU arch, or GPU by name (MI300X, 'RTX 4090'; "
    "repeatable; default: each recipe's).",
)
@backend_option("Certify an image (docker) or a virtualenv (venv)", default="docker")
@wheelhouse_option("venv/docker: folder of wheels each task installs from.")
@click.option(
    "--nodes",
    type=int,
    default=1,
    show_default=True,
    help="Nodes (tasks) per recipe and arch (at most 1000 tasks in a plan).",
)
@click.option(
    "--gpus",
    type=GPU_COUNT,
    default=None,
    metavar="N|all",
    help="GPUs per task, or all: each node's GPUs in one task (default: 1 on a GPU arch).",
)
@click.option(
    "--level",
    type=click.Choice(["quick", "full"]),
    default=None,
    help="Probe level (default: the recipe's).",
)
@click.option("--partition", default="", help="Slurm partition.")
@click.option("--account", default="", help="Slurm account.")
@click.option(
    "--time",
    "time_limit",
    default=None,
    help="Slurm time limit per task [default: 00:30:00]; Kubernetes: the Job's deadline "
    "(default: the step timeouts and an image pull).",
)
@click.option(
    "--feature",
    "features",
    multiple=True,
    metavar="ARCH=FEATURE",
    help="Slurm node feature for an arch when it is not the arch's name; with "
    "--every-node, a bare FEATURE every listed node must have.",
)
@click.option("--qos", default="", help="Slurm quality of service.")
@click.option("--reservation", default="", help="Slurm reservation.")
@click.option(
    "--cpus-per-task", type=int, default=0, metavar="N", help="Slurm CPUs per task (0: default)."
)
@click.option(
    "--sbatch-arg",
    "sbatch_args",
    multiple=True,
    metavar="--NAME[=VALUE]",
    help="A further sbatch option as an #SBATCH line (repeatable): --sbatch-arg=--exclusive.",
)
@click.option(
    "--preamble",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Shell lines each Slurm task runs before envforge (module load ...).",
)
@ca_bundle_option("PEM bundle each task's build trusts (passed on as build --ca-bundle).")
@signing_key_ref_option
@set_option
@click.option("--namespace", default="default", show_default=True, help="Kubernetes namespace.")
@click.option(
    "--arch-label",
    default="",
    metavar="KEY",
    help="Kubernetes node label holding the arch (instead of the vendors' labels).",
)
@click.option(
    "--registry",
    default="",
    metavar="HOST[:PORT]/NS",
    help="Where the recipes' images are (Kubernetes, docker backend).",
)
@click.option(
    "--toleration",
    "tolerations",
    multiple=True,
    metavar="KEY[=VALUE]:EFFECT",
    help="Kubernetes: a taint the pods tolerate (repeatable).",
)
@click.option("--cpu", default="2", show_default=True, help="Kubernetes: CPU per pod.")
@click.option(
    "--mem",
    default="",
    metavar="SIZE",
    help="Memory per task: Slurm --mem (64G); a Kubernetes pod's request and limit (default 16Gi).",
)
@click.option(
    "--ttl",
    type=int,
    default=7 * 86400,
    show_default=True,
    metavar="S",
    help="Kubernetes: seconds a finished Job (and its pods' logs) is kept.",
)
@click.option(
    "--image",
    "digests",
    multiple=True,
    metavar="REF@sha256:...",
    help="Kubernetes: run this image by digest for its repository (repeatable).",
)
@click.option(
    "--pod-group",
    "groups",
    multiple=True,
    type=int,
    metavar="GID",
    help="Kubernetes: a supplementary group of the pods (AMD: the nodes' render, video GIDs).",
)
@click.option(
    "--runner-label",
    "runner_labels",
    multiple=True,
    metavar="LABEL",
    help="GitHub runner labels besides the arch (default: self-hosted, gpu).",
)
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=OutputPath(),
    metavar="DIR",
    help="Folder for plan.json and the engine's files.",
)
@json_option
@node_options
@probe_check_options
def plan_cmd(  # noqa: PLR0917 - click passes options positionally by name
    engine: str,
    recipes: tuple[str, ...],
    archs: tuple[str, ...],
    backend: str,
    wheelhouse: Path | None,
    nodes: int,
    gpus: int | str | None,
    level: str | None,
    partition: str,
    account: str,
    time_limit: str,
    features: tuple[str, ...],
    qos: str,
    reservation: str,
    mem: str,
    cpus_per_task: int,
    sbatch_args: tuple[str, ...],
    preamble: Path | None,
    ca_bundle: Path | None,
    signing_key: str,
    overrides: tuple[str, ...],
    namespace: str,
    arch_label: str,
    registry: str,
    tolerations: tuple[str, ...],
    cpu: str,
    ttl: int,
    digests: tuple[str, ...],
    groups: tuple[int, ...],
    runner_labels: tuple[str, ...],
    out: Path,
    as_json: bool,
    where: NodeChoice,
    checks: PlanChecks,
) -> None:
    """Write a fleet plan (plan.json) and the scheduler's files for it."""
    check_folder_target(out, setting="-o")
    site = Site(
        partition=partition,
        account=account,
        time=time_limit or "00:30:00",
        features=pairs(features, "--feature"),
        namespace=namespace,
        arch_label=arch_label,
        registry=registry,
        runner_labels=runner_labels or ("self-hosted", "gpu"),
        qos=qos,
        reservation=reservation,
        mem=mem,
        cpus_per_task=cpus_per_task,
        sbatch_args=sbatch_args,
        preamble=preamble_text(preamble),
        tolerations=tolerations,
        cpu=cpu,
        deadline=seconds(time_limit),
        ttl=ttl,
        digests=digests,
        groups=groups,
    )
    loaded = [(_ref(r), load_checked(r, overrides)) for r in recipes]
    archs = _named_archs(archs)

    plan = make_plan(
        engine,
        loaded,
        archs=archs,
        backend=backend,
        nodes=nodes,
        images=BACKENDS[backend].runs_images(),
        site=site,
        wheelhouse=str(wheelhouse.resolve()) if wheelhouse else "",
        level=level or "",
        envforge=(sys.executable, "-m", "envforge"),
        ca_bundle=str(ca_bundle.resolve()) if ca_bundle else "",
        overrides=overrides,
        **plan_arguments(engine, where, recipes=loaded, archs=archs, site=site, gpus=gpus),
        signing_key=key_ref(signing_key, out) if signing_key else "",
        checks=checks,
    )
    written = write_plan(plan, out.resolve())
    if as_json:
        echo_json({"plan": plan.id, "tasks": len(plan.tasks), "files": [str(p) for p in written]})
        return
    for path in written:
        click.echo(str(path))
    note(
        f"plan {plan.id}: {len(plan.tasks)} task{'' if len(plan.tasks) == 1 else 's'} "
        f"({engine}); next: envforge fleet submit {out}"
    )


def _named_archs(archs: tuple[str, ...]) -> tuple[str, ...]:
    """``--arch`` values as archs: a GPU by the table's names (``--arch MI300X``) becomes
    its arch, said on stderr; an inexact name is exit 2 listing the candidates."""
    if all(arch_problem(a) is None for a in archs):
        return archs  # archs and cpu as given

    table = load_table()
    out = []
    for text in archs:
        arch = text if arch_problem(text) is None else arch_for_name(text, table, what="--arch")
        if arch != text.strip().lower():
            note(f"--arch {text} -> {arch}", tagged=True)
        out.append(arch)
    return tuple(out)


def _ref(ref: str) -> str:
    """A recipe file is kept as an absolute path (nodes run elsewhere); a name as is."""
    path = Path(ref)
    return str(path.resolve()) if ref.endswith((".yaml", ".yml")) or "/" in ref else ref


@fleet.command("submit")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), metavar="DIR")
@json_option
def submit_cmd(folder: Path, as_json: bool) -> None:
    """Submit a plan: sbatch (Slurm), kubectl apply (Kubernetes)."""
    plan = load_plan(folder.resolve())
    jobs = submit(plan, folder.resolve())
    number = (runs.numbers(folder.resolve()) or [0])[-1]
    if as_json:
        echo_json({"plan": plan.id, "run": number, "jobs": jobs})
        return
    for job in jobs:
        click.echo(job)
    run = f" as run {number} ({runs.run_folder(folder, number)})" if number else ""
    note(f"submitted plan {plan.id}{run}; next: envforge fleet status {folder} --wait")


def _states(
    plan: Plan, folder: Path, run: int | None, *, strict: bool
) -> tuple[int, tuple[TaskState, ...]]:
    """(the run read, each task's state in it)."""
    number, where = runs.chosen(folder.resolve(), run)
    queued: Mapping[int, JobState] = {}
    try:
        queued = engine_for(plan.engine, str(folder / "plan.json")).queued(plan, where)
    except Unavailable as exc:
        if strict:
            raise
        say(f"{exc.one_line()}: tasks without a report count as missing")
    return number, outcome.states(plan, where, queued, Redactor.for_this_host())


run_option = click.option(
    "--run",
    type=click.IntRange(1, runs.MAX_RUNS),
    default=None,
    metavar="N",
    help="Which run of the plan (default: the newest; runs/NNN).",
)


def _print(found: tuple[TaskState, ...]) -> None:
    for item in found:
        node = item.to_dict()
        where = f" on {node['node']}" if node["node"] else ""
        gpus = outcome.gpus_text(node)
        detail = f": {item.detail}" if item.detail else ""
        # task.json is written on the node: its values reach the terminal escaped
        click.echo(
            printable(
                f"{item.task.index:03d}  {item.task.recipe:<14} "
                f"{item.task.arch:<8} {item.state}{where}{gpus}{detail}"
            )
        )


def _verdict(found: tuple[TaskState, ...], waited: str = "") -> None:
    n = counts(found)
    summary = ", ".join(f"{v} {k}" for k, v in n.items() if v)
    if n["blocked"] and not (n["queued"] or n["running"]):
        first = next(s for s in found if s.state == "blocked")
        raise Unavailable(
            f"fleet: {summary}; task {first.task.index} cannot start: {first.detail}",
            hint="scancel its job, then plan again with values the partition takes "
            "(scontrol show partition)",
        )
    if n["failed"] or n["missing"] or n["refused"]:
        raise CertificationFailed(
            f"fleet: {summary}", hint="see each task's line above and its log (runs/NNN/logs/)"
        )
    if n["queued"] or n["running"]:
        raise CertificationFailed(
            f"fleet: {summary}{waited}", hint="envforge fleet status DIR --wait [--timeout S]"
        )
    note(f"fleet: {summary}")


@fleet.command("status")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), metavar="DIR")
@click.option(
    "--wait", is_flag=True, help="Wait until no task is queued or running (or can start)."
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_WAIT,
    show_default=True,
    metavar="S",
    help="With --wait: give up after S seconds (exit 1, named).",
)
@run_option
@json_option
def status_cmd(folder: Path, wait: bool, timeout: float, run: int | None, as_json: bool) -> None:
    """Each task's state (exit 0 all passed, 1 any failed/missing/unfinished, 4 unreachable
    or a task that cannot start)."""
    if not (math.isfinite(timeout) and 0 <= timeout <= MAX_WAIT):
        raise InvalidInput(
            f"--timeout {timeout:g}: must be a number of seconds from 0 to {MAX_WAIT}",
            hint="--timeout 3600",
        )
    plan = load_plan(folder.resolve())
    start = time.monotonic()
    waited = ""
    while True:
        number, found = _states(plan, folder, run, strict=True)
        busy = any(s.state in ("queued", "running") for s in found)
        if not (wait and busy):
            break
        if time.monotonic() - start >= timeout:
            waited = f" (timed out after {timeout:g} s of --wait)"
            break
        time.sleep(1.0)
    if as_json:
        echo_json({"plan": plan.id, "run": number, "tasks": [s.to_dict() for s in found]})
    else:
        _print(found)
    _verdict(found, waited)


@fleet.command("collect")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), metavar="DIR")
@click.option(
    "-o",
    "--output",
    "site",
    type=OutputPath(),
    default=None,
    metavar="SITE",
    help="Also write the matrix site (index.html, matrix.json) here.",
)
@run_option
@click.option(
    "--from-logs",
    "logs",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    metavar="FILE|DIR",
    help="Kubernetes: first import the reports framed in these pod logs (kubectl logs).",
)
@require_signed_option
@trust_option("Public key file of signers to trust (repeatable; default: $ENVFORGE_TRUSTED_KEYS).")
@json_option
def collect_cmd(
    folder: Path,
    site: Path | None,
    *,
    run: int | None,
    logs: Path | None,
    require_signed: bool,
    trust: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Import every task's report of a run into the evidence store; check none is missing.

    With --require-signed (or ENVFORGE_REQUIRE_SIGNED=1) only reports signed by a trusted
    key are imported and put in the site; each task says how its report is signed."""
    policy = signed_policy(require_signed, trust)
    plan = load_plan(folder.resolve())
    from_logs = _from_logs(plan, folder, logs) if logs is not None else ()
    number, found = _states(plan, folder, run, strict=False)
    docs = [(s.source, s.document) for s in found if s.document is not None and s.record]
    nodes = {s.source: str(s.to_dict()["node"]) for s in found}  # the node task.json names
    imported = import_documents(docs, refuse=policy.refused, nodes=nodes)
    records = [s.record for s in found if s.record]
    counted, left = policy.split(r.signer for r in records)
    summary: dict[str, Any] = {
        "plan": plan.id,
        "run": number,
        "added": len(imported.added),
        "known": imported.known,
        "tasks": [
            {**s.to_dict(), "signed": policy.label(s.record.signer) if s.record else None}
            for s in found
        ],
        "require_signed": policy.required,
        "not_counted": left if policy.required else 0,
    }
    if logs is not None:
        summary["logs_refused"] = [why for _, why in from_logs]
    if site is not None:
        written = write_site(aggregate([r for r in records if policy.counts(r.signer)]), site)
        summary["site"] = str(written.index)
    if as_json:
        echo_json(summary)
    else:
        _print(found)
        note(
            f"{len(imported.added)} report(s) added to the evidence store, "
            f"{imported.known} already there" + (f"; wrote {summary['site']}" if site else "")
        )
        unsigned = sum(1 for r in records if not policy.trusted_signer(r.signer))
        if policy.required and left:
            note(f"{left} report(s) not signed by a trusted key: not counted ({counted} counted)")
        elif unsigned:
            note(f"{unsigned} of {len(records)} report(s) unsigned or not trusted (counted)")
    _verdict(found)
    if from_logs:
        raise CertificationFailed(
            f"fleet: {len(from_logs)} report(s) in the logs refused", hint="see the lines above"
        )


def _from_logs(plan: Plan, folder: Path, logs: Path) -> tuple[tuple[str, str], ...]:
    """Import the pod logs' reports (:mod:`envforge.fleet.podlog`); what was refused."""
    from envforge.fleet.podlog import import_logs  # noqa: PLC0415 - Kubernetes only

    done = import_logs(plan, folder.resolve(), logs)
    for _, why in done.refused:
        say(printable(f"refused: {why}"))  # a log's text reaches the terminal escaped
    note(f"{len(done.written)} report(s) read from the pod logs", tagged=True)
    return done.refused


@fleet.command("task", hidden=True)
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False), metavar="DIR")
@click.argument("index", type=int)
@run_option
@click.pass_context
def task_cmd(ctx: click.Context, folder: Path, index: int, run: int | None) -> None:
    """Run one task of a plan on this node (what the sbatch array runs)."""
    plan = load_plan(folder.resolve())
    where = runs.chosen(folder.resolve(), run)[1] if run is not None else folder.resolve()
    ctx.exit(run_task(plan, where, index))


for _command in (clean_cmd, preflight_cmd, node_check_cmd):  # cli/fleet_nodes, fleet_preflight
    fleet.add_command(_command)
