"""Evidence from a registry's attestations: every signed in-toto attestation attached to an
image's digest (:mod:`envforge.publish.referrers`: the referrers API where the registry
answers it, else the ``sha256-<hex>`` tag schema, as ``attest verify REF`` reads them),
as evidence documents (:mod:`envforge.evidence.kinds.attestation`).

Each envelope is checked before it becomes a document: a DSSE envelope of an in-toto
Statement with our predicate (its schema), about the image (its subjects name the image
ID in that registry, the config digest), and signed: the first trusted key (``--trust``)
whose signature verifies is kept with it (the record is *signed* by that key); one that
no trusted key verifies is kept without a key (*unsigned*), except when a signature
names a trusted key's fingerprint and does not verify with it (altered after signing:
refused, named). What is refused is a :class:`Problem` naming ``REF #N``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envforge.core.jsonlimits import loads
from envforge.core.net import Deadline
from envforge.errors import EnvforgeError
from envforge.evidence.genuine import document_problem
from envforge.evidence.kinds import ranks
from envforge.evidence.kinds.attestation import document, predicate_of
from envforge.evidence.model import Evidence, EvidenceError, EvidenceSet, Problem
from envforge.evidence.records import Redactor, parse_document
from envforge.publish.attestation import statement_problems, subjects_of
from envforge.publish.dsse import INTOTO_PAYLOAD_TYPE, Envelope, verified_keys
from envforge.publish.referrers import envelopes_of, pinned
from envforge.publish.registry import remote_image
from envforge.publish.signing import TrustList


@dataclass(frozen=True)
class Fetched:
    """What one image's registry holds: its pinned name, the evidence documents of its
    attestations (source ``REF@sha256:… #N``) and the ones refused."""

    ref: str
    image_id: str
    documents: tuple[tuple[str, dict[str, Any]], ...]
    problems: tuple[Problem, ...]


def _refusal(raw: Any, trust: TrustList, subject: str) -> tuple[str | None, bytes | None]:
    """(why ``raw`` is refused, or None; the raw key of the trusted signer, or None)."""
    try:
        envelope = Envelope.from_dict(raw)
    except ValueError as exc:
        return f"not a DSSE envelope: {exc}", None
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
        return f"payloadType {envelope.payload_type[:60]!r} is not {INTOTO_PAYLOAD_TYPE}", None
    try:
        data = loads(envelope.payload)
    except ValueError:
        return "the payload is not JSON", None
    shape = statement_problems(data)
    if shape:
        return f"not a certification statement: {shape[0]}", None
    if subject.split(":", 1)[-1] not in (s.sha256 for s in subjects_of(data)):
        return f"its subject is not this image ({subject[:19]})", None
    keys = verified_keys(envelope, trust.keys.values())
    if keys:
        return None, keys[0].raw
    named = [s.keyid for s in envelope.signatures if s.keyid in trust.keys]
    if named:
        return (
            f"its signature by trusted key {named[0][:23]} does not verify (altered after signing)"
        ), None
    return None, None


def fetch(ref: str, trust: TrustList, *, deadline: Deadline | None = None) -> Fetched:
    """Every attestation attached to ``ref``'s digest, checked (see the module
    docstring); :class:`~envforge.errors.EnvforgeError` when the registry cannot say."""
    where = pinned(ref, deadline=deadline)
    image_id = remote_image(where, deadline=deadline).id
    docs: list[tuple[str, dict[str, Any]]] = []
    problems: list[Problem] = []
    for number, raw in enumerate(envelopes_of(where, deadline=deadline), 1):
        source = f"{where} #{number}"
        why, key = _refusal(raw, trust, image_id)
        if why:
            problems.append(Problem(source, f"attestation refused: {why}"))
        else:
            docs.append((source, document(raw, key)))
    return Fetched(where, image_id, tuple(docs), tuple(problems))


def without_same_run(
    label: tuple[str, Mapping[str, Any]] | None, docs: Sequence[tuple[str, dict[str, Any]]]
) -> list[tuple[str, Any]]:
    """The image's certificate (its label, when read) and its attestations, a run that
    both record counted once: an attestation names the certificate it was made with
    (``predicate.certificate``); the signed attestation is kept over the certificate,
    the certificate over an unsigned attestation (it has the steps' details)."""
    if label is None:
        return list(docs)
    digest = label[1].get("digest") if isinstance(label[1], Mapping) else None
    same = [d for d in docs if digest and _certificate_of(d[1]) == digest]
    if not same:
        return [label, *docs]
    signed = [d for d in same if "public_key" in d[1]]
    others = [d for d in docs if d not in same]
    return [*others, *signed] if signed else [label, *others]


def _certificate_of(doc: Mapping[str, Any]) -> str:
    try:
        return str(predicate_of(doc).get("certificate") or "")
    except EvidenceError:
        return ""


def registry_evidence(
    refs: Iterable[str],
    trust: TrustList,
    *,
    deadline: Deadline | None = None,
    redact: Redactor | None = None,
) -> EvidenceSet:
    """The attestations of every image of ``refs`` as records (each run once; what is
    refused, or a registry that cannot say, a :class:`Problem`)."""
    redactor = Redactor.for_this_host() if redact is None else redact
    rank = ranks()
    kept: dict[str, Evidence] = {}
    problems: list[Problem] = []
    total = 0
    names = list(refs)
    for ref in names:
        try:
            found = fetch(ref, trust, deadline=deadline)
        except EnvforgeError as exc:
            problems.append(Problem(ref, exc.one_line()))
            continue
        problems.extend(found.problems)
        if not found.documents and not found.problems:
            problems.append(Problem(found.ref, "no attestation is attached to this digest"))
        for source, doc in found.documents:
            why = document_problem(doc)
            if why:
                problems.append(Problem(source, f"refused: {why}"))
                continue
            try:
                record = parse_document(doc, redactor, signatures=True)
            except EvidenceError as exc:
                problems.append(Problem(source, exc.message))
                continue
            total += 1
            old = kept.get(record.key)
            if (
                old is None
                or rank[record.kind] < rank[old.kind]
                or (record.signer and not old.signer)
            ):
                kept[record.key] = record
    records = tuple(sorted(kept.values(), key=lambda r: (r.created, r.key), reverse=True))
    return EvidenceSet(records, tuple(problems), total - len(records), len(names))
