"""The local evidence store: every certification's report, kept with its host facts.

Where evidence lives under ``ENVFORGE_HOME``:

* ``certificates/<hex digest>.json``: Docker ``build``/``certify`` verdicts (pass or fail),
  the :class:`envforge.certificate.CertificateStore` (a certificate is kept exactly as
  issued: its digest and signature cover it);
* ``reports/<run key>.json``: ``probe --report`` runs, venv ``build`` certifications and
  everything ``envforge evidence import`` brought in (:func:`save_document`).

What this store keeps of a probe report (:func:`sanitized_report`): the steps (names and
details through :class:`envforge.evidence.Redactor`), the host facts (GPU product, arch,
vendor and PCI id, driver, kernel, the anonymous host id of
:func:`envforge.probe.report.host_id`), the torch/ROCm/CUDA versions torch saw
(:data:`SNAPSHOT_KEPT`) and the envforge version. The probed interpreter's path is
reduced to its last part, and the rest of the environment snapshot (the executable, the
platform string, environment variables) is dropped: host names and user names are never
stored. Imported certificates are kept as they are (altering them would break their
digest); their reports come from other hosts and were made in containers.

``envforge evidence export`` writes :meth:`envforge.evidence.Evidence.to_export` lines:
normalised records (no probe target, no snapshot) with step details redacted again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from envforge import paths
from envforge.evidence import (
    Evidence,
    EvidenceSet,
    Problem,
    Redactor,
    documents,
    parse_document,
    read_evidence,
)
from envforge.fsutil import write_atomically

#: Environment-snapshot keys a stored report keeps (versions only).
SNAPSHOT_KEPT = (
    "python", "implementation", "numpy", "torch", "hip", "cuda", "git", "arch_flags", "cudnn",
)


def sources(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The store's folders (certificates first)."""
    return [paths.certificates_dir(environ), paths.reports_dir(environ)]


def read_store(
    environ: Mapping[str, str] | None = None,
    *,
    signatures: bool = False,
    recipe: str | None = None,
) -> EvidenceSet:
    """Everything in the store (``recipe``: only documents that mention that recipe name,
    a pre-filter on the text; callers still check ``Evidence.recipe``)."""
    return read_evidence(
        [p for p in sources(environ) if p.is_dir()],
        signatures=signatures,
        needle=json.dumps(recipe) if recipe is not None else None,
    )


def _redact_any(value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_any(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: _redact_any(v, redact) for k, v in value.items()}
    return value


def sanitized_report(report: Mapping[str, Any], redact: Redactor | None = None) -> dict[str, Any]:
    """A probe report's JSON form as the store keeps it (see the module docstring)."""
    redactor = Redactor.for_this_host() if redact is None else redact
    data = dict(report)
    env = data.get("environment")
    if isinstance(env, Mapping):
        snapshot = env.get("snapshot")
        kept = (
            {k: snapshot[k] for k in SNAPSHOT_KEPT if k in snapshot}
            if isinstance(snapshot, Mapping)
            else {}
        )
        target = str(env.get("target", ""))
        if "/" in target or "\\" in target:
            target = PurePath(target).name  # an interpreter path: its owner is no fact
        data["environment"] = {"target": target, "snapshot": kept}
    result = _redact_any(data, redactor)
    assert isinstance(result, dict)
    return result


def save_document(doc: Mapping[str, Any], key: str, root: Path | None = None) -> Path:
    """Write ``doc`` as ``reports/<key>.json`` (atomically; an existing one is kept)."""
    folder = paths.reports_dir() if root is None else root
    target = folder / f"{key}.json"
    if not target.exists():
        write_atomically(target, json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return target


def _key_of(doc: Mapping[str, Any], redact: Redactor) -> str:
    return parse_document(doc, redact).key


def record_probe(report: Mapping[str, Any], *, root: Path | None = None,
                 redact: Redactor | None = None) -> Path:
    """Keep a ``probe`` run (its ``ProbeReport.to_dict()``) in the store."""
    redactor = Redactor.for_this_host() if redact is None else redact
    doc = sanitized_report(report, redactor)
    return save_document(doc, _key_of(doc, redactor), root)


def record_venv(marker: Mapping[str, Any], *, root: Path | None = None,
                redact: Redactor | None = None) -> Path:
    """Keep a venv certification (the ``certified.json`` form: recipe, recipe_hash,
    fingerprint, level, report) in the store."""
    redactor = Redactor.for_this_host() if redact is None else redact
    doc = dict(marker)
    doc["report"] = sanitized_report(marker["report"], redactor)
    return save_document(doc, _key_of(doc, redactor), root)


# --------------------------------------------------------------------------- import


@dataclass(frozen=True)
class Imported:
    """What ``evidence import`` did: records added, already there, skipped."""

    added: tuple[Evidence, ...]
    known: int
    problems: tuple[Problem, ...]


def _storable(doc: Mapping[str, Any], redact: Redactor) -> Mapping[str, Any]:
    schema = doc.get("schema")
    if schema is None and isinstance(doc.get("report"), Mapping):  # a venv marker
        copy = dict(doc)
        copy["report"] = sanitized_report(doc["report"], redact)
        return copy
    if schema == "envforge.probe/1":
        return sanitized_report(doc, redact)
    return doc  # certificates as issued; exported records are already normalised


def import_documents(
    docs: Iterable[tuple[str, Any]],
    problems: Iterable[Problem] = (),
    *,
    root: Path | None = None,
    redact: Redactor | None = None,
) -> Imported:
    """Check each document and keep the new ones in ``reports/`` (see module docstring)."""
    redactor = Redactor.for_this_host() if redact is None else redact
    known_keys = {r.key for r in read_store().records} if root is None else {
        r.key for r in read_evidence([root] if root.is_dir() else []).records
    }
    skipped = list(problems)
    added: list[Evidence] = []
    known = 0
    for source, raw in docs:
        try:
            record = parse_document(raw, redactor)
        except Exception as exc:
            skipped.append(Problem(source, str(getattr(exc, "message", exc))))
            continue
        if record.key in known_keys:
            known += 1
            continue
        doc = _storable(raw, redactor)
        stored = parse_document(doc, redactor)
        if stored.key in known_keys:
            known += 1
            continue
        save_document(doc, stored.key, root)
        known_keys.update({record.key, stored.key})
        added.append(stored)
    return Imported(tuple(added), known, tuple(skipped))


def import_paths(paths_: Iterable[Path], *, root: Path | None = None) -> Imported:
    problems: list[Problem] = []
    docs = list(documents(paths_, problems))
    return import_documents(docs, problems, root=root)


# --------------------------------------------------------------------------- export


def export_lines(
    records: Iterable[Evidence], *, recipe: str | None = None, redact: Redactor | None = None
) -> Iterator[str]:
    """One JSON line per record (``envforge.evidence/1``), redacted, newest first."""
    redactor = Redactor.for_this_host() if redact is None else redact
    for record in records:
        if recipe is not None and record.recipe != recipe:
            continue
        yield json.dumps(_redact_any(record.to_export(), redactor), sort_keys=False)
