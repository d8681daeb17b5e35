"""A certificate (:class:`envforge.publish.certificate.Certificate`: formats
``envforge.certificate/3``, ``/2`` and ``/1``, an image's or a venv's binding): the local
store's files and the ``certificate.json`` beside a ``probe.json``. Its digest is checked
(an altered certificate is not read), and with ``signatures`` its signature against the
key it names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from envforge.evidence.model import Evidence, EvidenceError, from_report
from envforge.knowledge.table import CompatTable
from envforge.publish.certificate import FORMATS as CERT_FORMATS
from envforge.publish.certificate import Certificate


def recognises(data: Mapping[str, Any]) -> bool:
    schema = data.get("schema")
    return isinstance(schema, str) and schema in CERT_FORMATS


def read(
    data: Mapping[str, Any],
    redact: Callable[[str], str],
    *,
    signatures: bool,
    table: CompatTable | None,
) -> Evidence:
    cert = Certificate.from_data(data, source="certificate")
    signer = cert.signed_by or ""
    if signer and signatures:
        from envforge.publish.signing import check_signature  # noqa: PLC0415 - cryptography

        check = check_signature(cert.data)
        if check.state != "valid":
            raise EvidenceError(f"certificate signature: {check.reason}")
    return from_report(
        cert.report,
        kind="certificate",
        redact=redact,
        recipe=cert.recipe_name,
        recipe_hash=cert.recipe_hash,
        stack=cert.stack_tag,
        certificate=cert.digest,
        signer=signer,
        table=table,
    )
