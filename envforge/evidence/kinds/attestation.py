"""A signed attestation as evidence (``envforge.attestation/1``): one DSSE envelope of an
in-toto Statement with our certification predicate (:mod:`envforge.publish.attestation`),
kept with the public key that verified it.

``evidence import REF`` and ``matrix --from-registry`` read a digest's attestations from
its registry (:mod:`envforge.evidence.attested`); each becomes one record of this kind::

    {"schema": "envforge.attestation/1", "envelope": {DSSE envelope},
     "public_key": "<base64 of the 32 raw bytes of the trusted key that verified it>"}

``public_key`` is absent when no trusted key verified the envelope: the record is then
*unsigned* (as a certificate without a signature is). With ``signatures`` the envelope's
signature is checked again against ``public_key`` (an altered envelope is refused), as a
certificate's is against the key it carries; whether that key is trusted is the signed
policy's question (:mod:`envforge.evidence.signed`). The record's host facts, steps
(without detail: a predicate keeps none), level, recipe and stack tag come from the
predicate; the same statement read twice is one record (its key is the run's, as read
from the predicate)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from envforge.evidence.kinds.enveloped import payload_of, signer_of
from envforge.evidence.model import Evidence, EvidenceError, from_report
from envforge.knowledge.table import CompatTable

SCHEMA = "envforge.attestation/1"
#: The envelope's payload type (DSSE, in-toto).
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def document(envelope: Mapping[str, Any], public_key: bytes | None) -> dict[str, Any]:
    """The evidence document of ``envelope`` (verified by ``public_key``, None: by none)."""
    doc: dict[str, Any] = {"schema": SCHEMA, "envelope": dict(envelope)}
    if public_key is not None:
        doc["public_key"] = base64.b64encode(public_key).decode("ascii")
    return doc


def recognises(data: Mapping[str, Any]) -> bool:
    return data.get("schema") == SCHEMA


def statement_of(data: Mapping[str, Any]) -> Any:
    """The decoded statement of a document's envelope (no signature checked);
    :class:`EvidenceError` when it has none."""
    return payload_of(data, PAYLOAD_TYPE)


def predicate_of(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The certification predicate of the document (shape checked against its schema)."""
    from envforge.publish.attestation import statement_problems  # noqa: PLC0415 - light

    statement = statement_of(data)
    problems = statement_problems(statement)
    if problems:
        raise EvidenceError(f"not a certification statement: {problems[0]}")
    pred: Mapping[str, Any] = statement["predicate"]
    return pred


def report_of(pred: Mapping[str, Any]) -> dict[str, Any]:
    """The predicate as a probe report (``envforge.probe/1``) of the same run."""
    recipe = pred["recipe"]
    stack = pred.get("stack") if isinstance(pred.get("stack"), Mapping) else {}
    assert isinstance(stack, Mapping)
    return {
        "schema": "envforge.probe/1",
        "steps": [{**s, "detail": ""} for s in pred["steps"]],
        "level": pred["level"],
        "host": dict(pred["host"]),
        "created": pred["issuedAt"],
        "envforge_version": pred["envforgeVersion"],
        "seconds": round(sum(float(s["seconds"]) for s in pred["steps"]), 3),
        "recipe": {"name": recipe["name"], "hash": recipe["hash"]},
        "environment": {
            "target": "",
            "snapshot": {"torch": stack.get("torch_version")} if stack.get("torch_version") else {},
        },
    }


def read(
    data: Mapping[str, Any],
    redact: Callable[[str], str],
    *,
    signatures: bool,
    table: CompatTable | None,
) -> Evidence:
    pred = predicate_of(data)
    signer = signer_of(data, signatures=signatures, what="attestation")
    recipe = pred["recipe"]
    return from_report(
        report_of(pred),
        kind="attestation",
        redact=redact,
        recipe=str(recipe["name"]),
        recipe_hash=str(recipe["hash"]),
        stack=str(recipe.get("stack_tag") or ""),
        certificate=str(pred.get("certificate") or ""),
        signer=signer,
        table=table,
    )
