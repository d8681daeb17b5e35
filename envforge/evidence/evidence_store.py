"""The local evidence store: every certification's report, kept with its host facts.

Where evidence lives under ``ENVFORGE_HOME``:

* ``evidence.sqlite``: one row per report (:mod:`envforge.evidence.evidence_db`): ``probe
  --report`` runs, everything ``envforge evidence import`` and ``fleet collect`` brought
  in (:func:`save_document`), and the certificates below;
* ``certificates/<hex digest>.json``: every backend's ``build``/``certify`` verdicts (pass
  or fail), the :class:`envforge.publish.certificate.CertificateStore` (a certificate is
  kept exactly as issued: its digest and signature cover it), read into the database when
  it changed;

Every run becomes evidence through one function, :func:`record`: a certificate (a Docker
image's, a venv's) or a probe report (``probe --report``; with a signing key, the report
as kept here signed: :func:`signed_report`).
* ``reports/<run key>.json``: the store before the database, migrated on first use (the
  files stay; each is read once).

What this store keeps of a probe report (:func:`sanitized_report`): the steps (names and
details through :class:`envforge.evidence.records.Redactor`), the host facts (GPU product, arch,
vendor and PCI id, driver, kernel, the anonymous host id of
:func:`envforge.probe.report.host_id`), the torch/ROCm/CUDA versions torch saw
(:data:`SNAPSHOT_KEPT`) and the envforge version. The probed interpreter's path is
reduced to its last part, and the rest of the environment snapshot (the executable, the
platform string, environment variables) is dropped: user names and this host's names are
never stored, nor the GPUs' serial UUIDs of its health facts (the facts are kept). The
name of the node a scheduler ran the probe on is the site's own fact: the store keeps it
(column ``node``; a signed report, a certificate, an export drop it unless the site
shares node names, :mod:`envforge.core.sharing`), and the site's name too. An import
refuses, named, a report that is not shaped like a real probe run
(:mod:`envforge.evidence.genuine`: its level's steps, the schema). Imported
certificates are kept as they are (altering them would break their
digest); their reports come from other hosts and were made in containers.

``envforge evidence export`` writes :meth:`envforge.evidence.records.Evidence.to_export` lines:
normalised records (no probe target, no snapshot) with step details redacted again, and
without node names unless the site shares them.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from envforge.core import paths
from envforge.evidence import evidence_db
from envforge.evidence.genuine import document_problem
from envforge.evidence.kinds import ranks, signed_probe
from envforge.evidence.local_store import opened as opened  # noqa: PLC0414 - re-exported
from envforge.evidence.local_store import sources as sources  # noqa: PLC0414 - re-exported
from envforge.evidence.local_store import store_certified_on as store_certified_on  # noqa: PLC0414
from envforge.evidence.records import (
    Evidence,
    EvidenceSet,
    Problem,
    Redactor,
    documents,
    parse_document,
)
from envforge.knowledge.compiled import load_table
from envforge.knowledge.table import CompatTable
from envforge.probe.report import without_uuids
from envforge.publish.certificate import Certificate, CertificateStore, legacy_venv

if TYPE_CHECKING:
    from envforge.publish.signing import SigningKey

#: Environment-snapshot keys a stored report keeps (versions only).
SNAPSHOT_KEPT = (
    "python",
    "implementation",
    "numpy",
    "torch",
    "hip",
    "cuda",
    "git",
    "arch_flags",
    "cudnn",
)


def read_store(
    environ: Mapping[str, str] | None = None,
    *,
    signatures: bool = False,
    recipe: str | None = None,
) -> EvidenceSet:
    """Everything in the store (``recipe``: only that recipe's records)."""
    del signatures  # rows are checked when they are read in (see :func:`opened`)
    with opened(environ) as (conn, problems):
        return EvidenceSet(evidence_db.records(conn, recipe), problems)


def _redact_any(value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_any(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: _redact_any(v, redact) for k, v in value.items()}
    return value


def _compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


def sanitized_report(
    report: Mapping[str, Any], redact: Redactor | None = None, *, node: bool = False
) -> dict[str, Any]:
    """A probe report's JSON form as it may be kept or shared (see the module docstring):
    ``node``: with the node's name (the store's own copy, or a site that shares them)."""
    redactor = Redactor.for_this_host() if redact is None else redact
    return _sanitized(report, redactor, node=node)[0]


def _sanitized(
    report: Mapping[str, Any], redactor: Redactor, *, node: bool = False
) -> tuple[dict[str, Any], str]:
    """:func:`sanitized_report` and its compact JSON text (written once)."""
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
    host = data.get("host")
    name = host.get("node") if isinstance(host, Mapping) else None
    if isinstance(host, Mapping) and "node" in host:  # a node's name is a host name:
        data["host"] = {k: v for k, v in host.items() if k != "node"}  # not redacted
    health = data.get("health")
    if isinstance(health, Mapping):  # the facts stay, the boards' serial UUIDs do not
        data["health"] = without_uuids(health)
    text = _compact(data)
    if redactor.may_change(text):  # else the walk below would copy it unchanged
        redacted = _redact_any(data, redactor)
        assert isinstance(redacted, dict)
        data, text = redacted, _compact(redacted)
    if node and name is not None:
        data["host"] = {**data["host"], "node": name}
        text = _compact(data)
    return data, text


def _state(root: Path | None) -> Path:
    """The store's folder: ``root`` names its ``reports`` folder (as callers passed it
    when reports were files), else ENVFORGE_HOME's."""
    return paths.state_dir() if root is None else root.parent


def save_document(
    doc: Mapping[str, Any], key: str, root: Path | None = None, *, node: str = ""
) -> Path:
    """Keep ``doc`` (its record's key is ``key``) in the store's database; the database's
    path. A report already there is kept as it was. ``node``: the node it ran on, kept in
    the row when the document does not name it (a signed report without it)."""
    record = parse_document(doc, lambda text: text)
    if node and not record.node:
        record = replace(record, node=node)
    if record.key != key:
        raise ValueError(f"save_document: key {key} is not the document's ({record.key})")
    path = evidence_db.db_path(_state(root))
    with evidence_db.connect(path) as conn:
        evidence_db.add(conn, [(record, json.dumps(doc, separators=(",", ":")))])
    return path


def _key_of(doc: Mapping[str, Any], redact: Redactor) -> str:
    return parse_document(doc, redact).key


def record(
    run: Certificate | Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    store: CertificateStore | None = None,
    redact: Redactor | None = None,
    node: str = "",
) -> Path:
    """Keep a run as evidence: the one way in for every backend and ``probe --report``.

    A :class:`~envforge.publish.certificate.Certificate` (any binding, pass or fail) is
    kept as issued in the certificate store (``store``, else ``ENVFORGE_HOME``'s of
    ``environ``), which ``publish`` reads and the database reads in when next opened;
    its issuer decides what its report holds (the digest covers it: a venv's is
    :func:`sanitized_report` already). A probe report (``ProbeReport.to_dict()``) is
    sanitized and kept in the database, with the node's name (``node``: the node of a
    signed report, which may not carry it). Returns the file or the database kept in."""
    if isinstance(run, Certificate):
        return (store or CertificateStore(paths.certificates_dir(environ))).save(run)
    if signed_probe.recognises(run):  # signed from what this store keeps: kept as signed
        key = parse_document(run, lambda text: text).key
        return save_document(run, key, paths.reports_dir(environ), node=node)
    redactor = Redactor.for_this_host() if redact is None else redact
    doc = sanitized_report(run, redactor, node=True)  # the site's own store
    return save_document(doc, _key_of(doc, redactor), paths.reports_dir(environ))


def signed_report(
    run: Mapping[str, Any], key: SigningKey, redact: Redactor | None = None, *, node: bool = False
) -> dict[str, Any]:
    """A probe report (``ProbeReport.to_dict()``) as this store keeps it, signed by ``key``
    (:mod:`envforge.evidence.kinds.signed_probe`): what ``probe --report`` writes as
    ``probe.signed.json`` and :func:`record` keeps; ``node``: with the node's name (a
    signed report is made to be shared: only when the site shares node names)."""
    return signed_probe.sign_report(sanitized_report(run, redact, node=node), key)


# --------------------------------------------------------------------------- import


@dataclass(frozen=True)
class Imported:
    """What ``evidence import`` did: records added, already there, skipped."""

    added: tuple[Evidence, ...]
    known: int
    problems: tuple[Problem, ...]


def _storable(doc: Mapping[str, Any], redact: Redactor) -> tuple[Mapping[str, Any], str]:
    """What the store keeps of ``doc``, and its text."""
    schema = doc.get("schema")
    if legacy_venv(doc):  # a venv's certified.json before certificate format 3
        copy = dict(doc)
        copy["report"] = sanitized_report(doc["report"], redact)
        return copy, _compact(copy)
    if schema == "envforge.probe/1":
        return _sanitized(doc, redact, node=True)  # the store is the site's own
    return doc, _compact(doc)  # certificates as issued; exported records are normalised


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a while, and back as it was after. An
    import makes millions of objects and no cycles, and each full collection walks all
    of them (and the caller's documents): 100,000 reports, ~8 of 38 s of CPU here."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_documents(
    docs: Iterable[tuple[str, Any]],
    problems: Iterable[Problem] = (),
    *,
    root: Path | None = None,
    redact: Redactor | None = None,
    refuse: Callable[[Evidence], str | None] | None = None,
    nodes: Mapping[str, str] | None = None,
) -> Imported:
    """Check each document and keep the new ones in the store, in one transaction (each
    document parsed and written to text once; the compatibility table read once). A run
    that comes twice is one record: its best-ranked copy (a certificate over a report).
    ``refuse``: why a parsed record is not kept (None: kept), e.g. unsigned ones.
    ``nodes``: source -> the node it ran on (``fleet collect``: what the task's
    ``task.json`` says), kept in the row of a record whose document does not name it."""
    redactor = Redactor.for_this_host() if redact is None else redact
    table = load_table()  # once, not per NVIDIA report without an arch
    with _collector_paused():
        return _import(docs, problems, root, redactor, table, refuse=refuse, nodes=nodes or {})


def _import(
    docs: Iterable[tuple[str, Any]],
    problems: Iterable[Problem],
    root: Path | None,
    redactor: Redactor,
    table: CompatTable,
    *,
    refuse: Callable[[Evidence], str | None] | None = None,
    nodes: Mapping[str, str],
) -> Imported:
    skipped = list(problems)
    rank = ranks()
    items: dict[str, tuple[Evidence, str]] = {}
    for source, raw in docs:
        refused = document_problem(raw)  # not what a probe run writes: never counted
        if refused:
            skipped.append(Problem(source, f"refused: {refused}"))
            continue
        try:
            doc, text = _storable(raw, redactor) if isinstance(raw, Mapping) else (raw, "")
            stored = parse_document(doc, redactor, signatures=True, table=table)
        except Exception as exc:  # what _storable meets in a malformed report, too
            skipped.append(Problem(source, str(getattr(exc, "message", exc))))
            continue
        if not stored.node and nodes.get(source):
            stored = replace(stored, node=nodes[source])
        why = refuse(stored) if refuse is not None else None
        if why:
            skipped.append(Problem(source, why))
            continue
        first = items.get(stored.key)
        if first is None or rank[stored.kind] < rank[first[0].kind]:
            items[stored.key] = (stored, text)
    with evidence_db.connect(evidence_db.db_path(_state(root))) as conn:
        added = evidence_db.add(conn, items.values())
    known = len(items) - len(added)
    return Imported(tuple(added), known, tuple(skipped))


def import_paths(paths_: Iterable[Path], *, root: Path | None = None) -> Imported:
    problems: list[Problem] = []
    docs = list(documents(paths_, problems))
    return import_documents(docs, problems, root=root)


# --------------------------------------------------------------------------- export


def export_lines(
    records: Iterable[Evidence],
    *,
    recipe: str | None = None,
    redact: Redactor | None = None,
    node: bool = False,
) -> Iterator[str]:
    """One JSON line per record (``envforge.evidence/1``), redacted, newest first;
    ``node``: with node names (only when the site shares them), not redacted."""
    redactor = Redactor.for_this_host() if redact is None else redact
    for record in records:
        if recipe is not None and record.recipe != recipe:
            continue
        line = _redact_any(record.to_export(), redactor)
        if node and record.node:
            line["node"] = record.node
        yield json.dumps(line, sort_keys=False)
