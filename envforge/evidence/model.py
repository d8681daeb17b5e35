"""The evidence record: one probe run as a frozen :class:`Evidence` (its outcome, time,
host facts and steps, redacted), made from a probe report by :func:`from_report`. What is
read and how: :mod:`envforge.evidence.records`; the kinds of document:
:mod:`envforge.evidence.kinds`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from envforge.errors import InvalidInput
from envforge.evidence.run_facts import Gpu, gpu_of, pci_of, run_key, runtime_of, stack_name
from envforge.knowledge.table import CompatTable
from envforge.probe.report import SCHEMA as PROBE_SCHEMA
from envforge.probe.report import ProbeReport, StepResult

Outcome = Literal["pass", "fail", "hang", "crash", "oom", "no-device"]
#: A run's outcome: ``pass``, else the status of its first step that neither passed nor
#: was skipped (a report with no steps is a ``fail``).
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "hang", "crash", "oom", "no-device")
#: A kind as envforge.evidence.kinds.KINDS names it (which copy of a run read more than
#: once is kept: the kind listed first).
Kind = str
#: Characters of a step detail that are kept.
DETAIL_LIMIT = 4000
VENDORS = ("amd", "nvidia", "none")
EXPORT_SCHEMA = "envforge.evidence/1"


class EvidenceError(InvalidInput):
    """A file that is not readable evidence (the message names what is wrong)."""


@dataclass(frozen=True)
class Problem:
    """A file (or a bundle's line) that was skipped, and why."""

    source: str
    message: str

    def line(self) -> str:
        return " ".join(f"{self.source}: {self.message}".split())


@dataclass(frozen=True)
class Evidence:
    """One probe run, normalised; see the module docstring for what is (not) kept."""

    key: str
    kind: Kind
    recipe: str
    recipe_hash: str
    stack: str
    outcome: Outcome
    created: datetime
    level: str
    gpu: Gpu
    gpu_count: int
    driver: str
    kernel: str
    torch: str
    runtime: str
    python: str
    envforge_version: str
    seconds: float
    steps: tuple[StepResult, ...]
    certificate: str = ""
    pci_id: str = ""
    #: Anonymous host id (``h-…``), "" when the report has none.
    host: str = ""
    #: Fingerprint of the key that signed the certificate ("" when unsigned).
    signer: str = ""
    #: The site that ran it (setting ``site``; "" when unnamed) and the node a scheduler
    #: ran it on ("" when unknown or not shared: :mod:`envforge.core.sharing`).
    site: str = ""
    node: str = ""

    def to_export(self, *, node: bool = False) -> dict[str, Any]:
        """The ``envforge.evidence/1`` form (one line of ``evidence export``); ``node``:
        with the node's name (only when the site shares node names)."""
        return {
            "schema": EXPORT_SCHEMA,
            "key": self.key,
            "kind": self.kind,
            "recipe": self.recipe,
            "recipe_hash": self.recipe_hash,
            "stack": self.stack,
            "outcome": self.outcome,
            "created": self.created.astimezone(timezone.utc).isoformat().replace("+00:00", "Z"),
            "level": self.level,
            "gpu": {
                "vendor": self.gpu.vendor,
                "arch": self.gpu.arch,
                "product": self.gpu.product,
                "pci_id": self.pci_id,
            },
            "gpu_count": self.gpu_count,
            "driver": self.driver,
            "kernel": self.kernel,
            "torch": self.torch,
            "runtime": self.runtime,
            "python": self.python,
            "envforge_version": self.envforge_version,
            "seconds": self.seconds,
            "host": self.host,
            "site": self.site,
            **({"node": self.node} if node and self.node else {}),
            "certificate": self.certificate,
            "signer": self.signer,
            "steps": [s.to_dict() for s in self.steps],
        }

    @property
    def column(self) -> str:
        """The matrix column: the recipe, else the stack, else ``(unnamed)``."""
        return self.recipe or self.stack or "(unnamed)"

    @property
    def date(self) -> str:
        return self.created.strftime("%Y-%m-%d")

    @property
    def first_problem(self) -> StepResult | None:
        return next((s for s in self.steps if s.status not in ("pass", "warn", "skip")), None)


@dataclass(frozen=True)
class EvidenceSet:
    """Everything read: the records (deduplicated), the skipped files, the counts."""

    records: tuple[Evidence, ...]
    problems: tuple[Problem, ...] = ()
    duplicates: int = 0
    files: int = 0


# --------------------------------------------------------------------------- parsing


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def parse_time(text: str) -> datetime:
    """ISO 8601 (``2026-11-20T12:00:00Z``, with or without an offset) → aware UTC."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    when = datetime.fromisoformat(value)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


def _outcome(report: ProbeReport) -> Outcome:
    if report.passed:
        return "pass"
    problem = report.first_problem
    if problem is None or problem.status not in OUTCOMES:
        return "fail"
    status: Outcome = problem.status  # an Outcome: checked just above
    return status


def _redacted_step(step: StepResult, redact: Callable[[str], str]) -> StepResult:
    name, detail = redact(step.name), redact(step.detail[:DETAIL_LIMIT])
    if name is step.name and detail is step.detail:
        return step
    return StepResult(name=name, status=step.status, seconds=step.seconds, detail=detail)


def from_report(
    raw: Mapping[str, Any],
    *,
    kind: Kind,
    redact: Callable[[str], str],
    recipe: str = "",
    recipe_hash: str = "",
    stack: str = "",
    certificate: str = "",
    signer: str = "",
    table: CompatTable | None = None,
) -> Evidence:
    if not isinstance(raw, Mapping):
        raise EvidenceError("its report is not a JSON object")
    schema = raw.get("schema", PROBE_SCHEMA)
    if schema != PROBE_SCHEMA:
        raise EvidenceError(f"unknown report schema {schema!r} (expected {PROBE_SCHEMA})")
    for key, kind_of in (("host", dict), ("recipe", dict), ("environment", dict)):
        if raw.get(key) is not None and not isinstance(raw[key], kind_of):
            raise EvidenceError(f"key {key!r} is not a JSON object")
    report = ProbeReport.from_dict(raw)
    key = run_key(report)
    try:
        created = parse_time(report.created)
    except ValueError:
        raise EvidenceError(f"key 'created' is not an ISO 8601 time: {report.created!r}") from None
    snapshot = report.snapshot
    torch, python = _str(snapshot.get("torch")), _str(snapshot.get("python"))
    runtime, variant = runtime_of(snapshot)
    recipe = recipe or _str(report.recipe_name)
    steps = tuple(_redacted_step(s, redact) for s in report.steps)
    gpu = gpu_of(report, recipe, table)
    return Evidence(
        key=key,
        kind=kind,
        recipe=recipe,
        recipe_hash=recipe_hash or _str(report.recipe_hash),
        stack=stack or stack_name(torch, variant, python),
        outcome=_outcome(report),
        created=created,
        level=report.level,
        gpu=gpu,
        gpu_count=len(report.host.gpus),
        driver=redact(_str(report.host.driver)),
        kernel=redact(report.host.kernel),
        torch=torch,
        runtime=runtime,
        python=python,
        envforge_version=report.envforge_version,
        seconds=round(report.seconds, 3),
        steps=steps,
        certificate=certificate,
        pci_id=pci_of(report, gpu),
        host=_str(report.host.id),
        signer=signer,
        site=_str(report.host.site),
        node=_str(report.host.node),
    )
