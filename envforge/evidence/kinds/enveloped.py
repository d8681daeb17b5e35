"""What the enveloped kinds share (:mod:`.attestation`, :mod:`.signed_probe`): a DSSE
envelope (:mod:`envforge.publish.dsse`) kept with the public key that verified it, as
``{"envelope": {...}, "public_key": "<base64 of the 32 raw bytes>"}``."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from envforge.core.jsonlimits import loads
from envforge.core.lazy import LazyModule
from envforge.evidence.model import EvidenceError

#: :mod:`envforge.publish.dsse`, imported when an envelope is read or made (it loads
#: cryptography; ``show`` loads the evidence kinds and must stay light).
dsse = LazyModule("envforge.publish.dsse")


def payload_of(data: Mapping[str, Any], payload_type: str) -> Any:
    """The envelope's payload, decoded JSON (no signature checked); :class:`EvidenceError`
    when the document holds no envelope of ``payload_type``."""
    try:
        envelope = dsse.Envelope.from_dict(data.get("envelope"))
    except ValueError as exc:
        raise EvidenceError(f"its envelope: {exc}") from None
    if envelope.payload_type != payload_type:
        raise EvidenceError(f"its envelope's payloadType is not {payload_type}")
    try:
        return loads(envelope.payload)
    except ValueError:
        raise EvidenceError("its envelope's payload is not JSON") from None


def signer_of(data: Mapping[str, Any], *, signatures: bool, what: str) -> str:
    """The fingerprint of the document's ``public_key`` ("" without one); with
    ``signatures``, :class:`EvidenceError` unless the envelope's signature verifies with
    it (``what``: the document, as the error names it)."""
    if "public_key" not in data:
        return ""
    try:
        raw = base64.b64decode(str(data.get("public_key")), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise EvidenceError("its public_key is not 32 bytes of base64")
    key = dsse.PublicKey(raw)
    if signatures:
        try:
            envelope = dsse.Envelope.from_dict(data.get("envelope"))
        except ValueError as exc:
            raise EvidenceError(f"its envelope: {exc}") from None
        if not dsse.verified_keys(envelope, [key]):
            raise EvidenceError(f"{what} signature does not verify with its key")
    fingerprint: str = key.fingerprint
    return fingerprint
