"""A signed probe report (``envforge.signed-probe/1``): the report as the evidence store
keeps it (:func:`envforge.evidence.evidence_store.sanitized_report`) in a DSSE envelope
signed with the site's ed25519 key, the envelope format of attestations
(:mod:`envforge.publish.dsse`), with the signer's public key::

    {"schema": "envforge.signed-probe/1",
     "envelope": {"payloadType": "application/vnd.envforge.probe+json",
                  "payload": "<base64 of the report's JSON>", "signatures": [...]},
     "public_key": "<base64 of the 32 raw public key bytes>"}

``probe --report DIR`` with a signing key writes it as ``DIR/probe.signed.json`` beside
``probe.json`` and keeps it in the store. With ``signatures`` (import, ``fleet collect``,
``matrix --evidence``) the signature is checked against ``public_key``: an edited report
is refused; whether that key is trusted is the signed policy's question, as for a
certificate's. Its record is the report's run (the same key as ``probe.json``'s), signed
by the key's fingerprint, and wins over the unsigned copy of the same run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from envforge.evidence.kinds.enveloped import dsse, payload_of, signer_of
from envforge.evidence.model import Evidence, EvidenceError, from_report
from envforge.knowledge.table import CompatTable

if TYPE_CHECKING:
    from envforge.publish.signing import SigningKey

SCHEMA = "envforge.signed-probe/1"
PAYLOAD_TYPE = "application/vnd.envforge.probe+json"
#: The file ``probe --report DIR`` writes with a key.
FILE_NAME = "probe.signed.json"


def sign_report(report: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """The signed document of ``report`` (a probe report's JSON object)."""
    payload = json.dumps(report, separators=(",", ":"), sort_keys=True).encode()
    envelope = dsse.sign(payload, key, PAYLOAD_TYPE)
    return {
        "schema": SCHEMA,
        "envelope": envelope.to_dict(),
        "public_key": base64.b64encode(key.public.raw).decode("ascii"),
    }


def recognises(data: Mapping[str, Any]) -> bool:
    return data.get("schema") == SCHEMA


def report_of(data: Mapping[str, Any]) -> Any:
    """The signed report (decoded; no signature checked); :class:`EvidenceError` when the
    document holds none."""
    return payload_of(data, PAYLOAD_TYPE)


def read(
    data: Mapping[str, Any],
    redact: Callable[[str], str],
    *,
    signatures: bool,
    table: CompatTable | None,
) -> Evidence:
    if "public_key" not in data:
        raise EvidenceError("it names no public key: not a signed report")
    signer = signer_of(data, signatures=signatures, what="report")
    report = report_of(data)
    if not isinstance(report, Mapping) or report.get("schema", "envforge.probe/1") != (
        "envforge.probe/1"
    ):
        raise EvidenceError("its signed payload is not a probe report (envforge.probe/1)")
    return from_report(report, kind="signed-probe", redact=redact, signer=signer, table=table)
