"""Whether a report is shaped like a real probe run: what an import checks before it counts.

A hand-written ``probe.json`` (one ``pass`` step, a GPU product typed in) decodes like a
real report. A real run of the probe reports every step its spec lists
(:mod:`envforge.probe.spec`): the torch steps of its level first, in their order
(:data:`~envforge.probe.spec.QUICK_STEPS`, :data:`~envforge.probe.spec.FULL_STEPS`),
then only steps of the known kinds (``import:NAME``, the companions' device steps, the
``audit``, ``health``, ``collective``, ``check:NAME``), each once, with a known status
and a finite, bounded time;
its overall status is the one its steps give; its host facts have their types and forms.
:func:`document_problem` says why a document (a probe report, a certificate's report, a
venv's certification) is not such a run, or None. An incremental venv certification
(``"incremental": true``: only the steps a change can affect) and an exported record
(``envforge.evidence/1``, which does not say whether it was incremental) may hold a part
of the level's steps, in their order; everything else is checked the same.

This does not prove who ran the probe (a signature does: :mod:`envforge.publish.signing`;
a fleet plan's nonce does for ``fleet collect``: :mod:`envforge.fleet.outcome`); it
refuses what no probe run writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from envforge.evidence.kinds.attestation import predicate_of
from envforge.evidence.kinds.signed_probe import report_of as signed_report_of
from envforge.evidence.records import EvidenceError, parse_time
from envforge.probe.report import PASSING, STATUSES
from envforge.probe.spec import (
    CHECK_PREFIX,
    COMPANION_STEPS,
    FULL_STEPS,
    IMPORT_PREFIX,
    QUICK_STEPS,
)
from envforge.recipe.checks import MAX_STEP_TIMEOUT

LEVELS: dict[str, tuple[str, ...]] = {"quick": QUICK_STEPS, "full": FULL_STEPS}
#: Steps a run may add after its level's torch steps, besides imports and checks
#: (``audit``, ``health``: run on the host after the worker; ``collective``: the
#: worker's all-reduce, :mod:`envforge.probe.spec`).
_EXTRA_STEPS = frozenset(
    {*(s for steps in COMPANION_STEPS.values() for s in steps), "audit", "health", "collective"}
)
#: Most steps a report may list (imports of a large stack and many checks included).
MAX_STEPS = 2000
_MAX_TEXT = 512
#: Seconds a whole run may have taken (every step at its deadline, and then some).
_MAX_SECONDS = MAX_STEP_TIMEOUT * 64
_PCI = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}", re.ASCII)
_HOST_ID = re.compile(r"h-[0-9a-f]{16}", re.ASCII)
_VERSION = re.compile(r"[0-9A-Za-z.+!_-]{1,64}", re.ASCII)
#: A report dated this far ahead of this host's clock is refused.
_FUTURE = timedelta(days=1)


def _seconds_problem(value: Any, where: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{where}: seconds is not a number"
    if not math.isfinite(value) or not 0 <= value <= _MAX_SECONDS:
        return f"{where}: seconds {value!r} is not a time a probe takes"
    return None


def _step_problem(step: Any, number: int) -> str | None:
    where = f"steps[{number}]"
    if not isinstance(step, Mapping):
        return f"{where} is not an object"
    name, status = step.get("name"), step.get("status")
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TEXT:
        return f"{where}: name is not a step name"
    if status not in STATUSES:
        return f"{where}: status {status!r} is not one of {', '.join(STATUSES)}"
    if not isinstance(step.get("detail", ""), str):
        return f"{where}: detail is not a string"
    return _seconds_problem(step.get("seconds"), where)


def _known(name: str) -> bool:
    for prefix in (IMPORT_PREFIX, CHECK_PREFIX):
        if name.startswith(prefix):
            return len(name) > len(prefix)
    return name in _EXTRA_STEPS


def _order_problem(
    names: list[str], base: tuple[str, ...], level: str, partial: bool
) -> str | None:
    if len(set(names)) != len(names):
        return "a step is listed twice"
    torch = [n for n in names if n in FULL_STEPS]
    if partial:
        wanted = [n for n in base if n in torch]
    else:
        wanted = list(base)
        if names[: len(base)] != wanted:
            return (
                f"its steps are not those of a {level} probe run "
                f"({', '.join(base)} first, in order)"
            )
    if torch != wanted:
        return f"its steps are not those of a {level} probe run (step {torch[-1]!r} out of place)"
    unknown = next((n for n in names if n not in FULL_STEPS and not _known(n)), None)
    if unknown is not None:
        return f"step {unknown[:60]!r} is no step of a probe run"
    return None


def steps_problem(steps: Any, level: Any, *, partial: bool = False) -> str | None:
    """Why ``steps`` (a report's JSON list) are not those of a real run at ``level``."""
    if level not in LEVELS:
        return f"level {level!r} is not quick or full"
    if not isinstance(steps, list) or not 0 < len(steps) <= MAX_STEPS:
        return f"steps is not a list of 1 to {MAX_STEPS} steps"
    for number, step in enumerate(steps):
        why = _step_problem(step, number)
        if why:
            return why
    return _order_problem([s["name"] for s in steps], LEVELS[level], level, partial)


def _text_problem(value: Any, key: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        return f"{key} is not a string of at most {_MAX_TEXT} characters"
    return None


def _gpu_problem(gpu: Any, number: int) -> str | None:
    where = f"host.gpus[{number}]"
    if not isinstance(gpu, Mapping):
        return f"{where} is not an object"
    for key in ("name", "arch", "vendor"):
        why = _text_problem(gpu.get(key), f"{where}.{key}", optional=key != "name")
        if why:
            return why
    pci = gpu.get("pci_id")
    if pci is not None and not (isinstance(pci, str) and _PCI.fullmatch(pci)):
        return f"{where}.pci_id is not VENDOR:DEVICE in hex"
    return None


def _map_problem(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, Mapping)
        or len(value) > 16
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= _MAX_TEXT
            for k, v in value.items()
        )
    ):
        return f"{key} is not an object of strings"
    return None


def host_problem(host: Any) -> str | None:
    """Why ``host`` (a report's JSON object) is not host facts as the probe records them."""
    if not isinstance(host, Mapping):
        return "host is not an object"
    for key in ("kernel", "machine"):
        why = _text_problem(host.get(key), f"host.{key}", optional=False)
        if why:
            return why
    why = (
        _text_problem(host.get("driver"), "host.driver")
        or _text_problem(host.get("node"), "host.node")
        or _text_problem(host.get("site"), "host.site")
    )
    if why:
        return why
    gpus = host.get("gpus", [])
    if not isinstance(gpus, list) or len(gpus) > 64:
        return "host.gpus is not a list of at most 64 GPUs"
    for number, gpu in enumerate(gpus):
        why = _gpu_problem(gpu, number)
        if why:
            return why
    ident = host.get("id")
    if ident is not None and not (isinstance(ident, str) and _HOST_ID.fullmatch(ident)):
        return "host.id is not an anonymous host id (h- and 16 hex digits)"
    return _map_problem(host.get("granted"), "host.granted") or _map_problem(
        host.get("fleet"), "host.fleet"
    )


def _created_problem(value: Any) -> str | None:
    try:
        when = parse_time(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None:
        return "created is not an ISO 8601 time"
    if when > datetime.now(timezone.utc) + _FUTURE:
        return f"created {value!r} is in the future"
    return None


def report_problem(report: Any, *, partial: bool = False) -> str | None:
    """Why ``report`` (a probe report's JSON object) is not what a probe run writes."""
    if not isinstance(report, Mapping):
        return "its report is not a JSON object"
    steps = report.get("steps")
    why = (
        steps_problem(steps, report.get("level"), partial=partial)
        or host_problem(report.get("host"))
        or _created_problem(report.get("created"))
        or _seconds_problem(report.get("seconds", 0.0), "the report")
    )
    if why:
        return why
    version = report.get("envforge_version")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        return "envforge_version is not a version"
    for key in ("recipe", "environment"):
        if not isinstance(report.get(key, {}), Mapping):
            return f"{key} is not an object"
    said = report.get("status")
    real = "pass" if all(s["status"] in PASSING for s in steps or ()) else "fail"
    if said is not None and said != real:
        return f"its status {said!r} is not what its steps give ({real})"
    return None


def document_problem(doc: Any) -> str | None:
    """Why ``doc`` (a decoded evidence document) does not hold a real probe run; None for
    documents that are no report of a run (they are refused where they are parsed)."""
    if not isinstance(doc, Mapping):
        return None
    schema = doc.get("schema")
    if schema == "envforge.probe/1":
        return report_problem(doc)
    if isinstance(schema, str) and schema.startswith("envforge.certificate/"):
        # a venv's incremental certification re-ran only what a change could affect
        return report_problem(doc.get("report"), partial=bool(doc.get("incremental")))
    if schema == "envforge.evidence/1":
        return steps_problem(doc.get("steps"), doc.get("level"), partial=True) or _created_problem(
            doc.get("created")
        )
    if schema == "envforge.attestation/1":  # a predicate: its steps, host facts and time
        return _attestation_problem(doc)
    if schema == "envforge.signed-probe/1":  # the signed report
        try:
            return report_problem(signed_report_of(doc))
        except EvidenceError as exc:
            return exc.message
    if schema is None and isinstance(doc.get("report"), Mapping):  # a venv's certification
        return report_problem(doc["report"], partial=doc.get("incremental") is True)
    return None


def _attestation_problem(doc: Mapping[str, Any]) -> str | None:
    try:
        pred = predicate_of(doc)
    except EvidenceError as exc:
        return exc.message
    return (
        steps_problem(pred.get("steps"), pred.get("level"))
        or host_problem(pred.get("host"))
        or _created_problem(pred.get("issuedAt"))
    )
