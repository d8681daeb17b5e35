"""DSSE envelopes (Dead Simple Signing Envelope v1.0.0, secure-systems-lab/dsse) signed
with the site's ed25519 key (:mod:`envforge.publish.signing`).

The spec is small enough to follow here exactly rather than through a library (see
docs/attestations.md, "Formats"): a signature is made over
``PAE(payloadType, payload)``::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

(``LEN``: the byte length as ASCII decimal without leading zeros, ``SP``: one space), and
the envelope is the JSON object ``{"payloadType", "payload" (base64), "signatures": [{"keyid",
"sig" (base64)}]}``. ``keyid`` is the key's envforge fingerprint (``sha256:<hex>`` of the
raw public key); it only picks the key, it is not trusted: a signature counts when a key
of the trust list verifies it. Verifiers accept standard and URL-safe base64, as the spec
requires. Tests check the spec's own test vector and cross-check envelopes with
securesystemslib's independent implementation.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envforge.publish.signing import PublicKey, SigningKey

#: The payload type of an in-toto Statement (in-toto attestation framework, envelope layer).
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: Signatures one envelope may carry (each is tried against the trust list).
MAX_SIGNATURES = 64


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding of ``payload_type`` and ``payload``."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def b64decode(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not (the spec: verifiers accept either);
    :class:`ValueError` when it is neither."""
    cleaned = text.strip()
    padded = cleaned + "=" * (-len(cleaned) % 4)
    alphabet = b"-_" if ("-" in cleaned or "_" in cleaned) else b"+/"
    try:
        return base64.b64decode(padded, altchars=alphabet, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope: the payload's type and bytes, and its signatures."""

    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "payloadType": self.payload_type,
            "payload": b64encode(self.payload),
            "signatures": [{"keyid": s.keyid, "sig": b64encode(s.sig)} for s in self.signatures],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Envelope:
        """Parse the JSON envelope; :class:`ValueError` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("not a JSON object")
        kind, body, sigs = data.get("payloadType"), data.get("payload"), data.get("signatures")
        if not isinstance(kind, str) or not isinstance(body, str):
            raise ValueError("payloadType and payload must be strings")
        if not isinstance(sigs, list) or not sigs:
            raise ValueError("no signatures")
        if len(sigs) > MAX_SIGNATURES:
            raise ValueError(f"{len(sigs)} signatures; at most {MAX_SIGNATURES} are read")
        parsed: list[Signature] = []
        for item in sigs:
            if not isinstance(item, Mapping) or not isinstance(item.get("sig"), str):
                raise ValueError("a signature lacks its sig string")
            parsed.append(Signature(str(item.get("keyid") or ""), b64decode(item["sig"])))
        return cls(kind, b64decode(body), tuple(parsed))


def sign(payload: bytes, key: SigningKey, payload_type: str = INTOTO_PAYLOAD_TYPE) -> Envelope:
    """An envelope of ``payload`` with one signature by ``key``."""
    sig = key.sign(pae(payload_type, payload))
    return Envelope(payload_type, payload, (Signature(key.public.fingerprint, sig),))


def add_signature(envelope: Envelope, key: SigningKey) -> Envelope:
    """``envelope`` with one more signature (several sites signing the same statement)."""
    sig = Signature(key.public.fingerprint, key.sign(pae(envelope.payload_type, envelope.payload)))
    return Envelope(envelope.payload_type, envelope.payload, (*envelope.signatures, sig))


def verified_keys(envelope: Envelope, keys: Iterable[PublicKey]) -> tuple[PublicKey, ...]:
    """The keys of ``keys`` whose signature on ``envelope`` verifies (each key once; a
    signature's keyid only narrows which key is tried first, it grants nothing)."""
    message = pae(envelope.payload_type, envelope.payload)
    by_fp = {k.fingerprint: k for k in keys}
    accepted: dict[str, PublicKey] = {}
    for signature in envelope.signatures:
        candidates: Sequence[PublicKey] = (
            [by_fp[signature.keyid]] if signature.keyid in by_fp else list(by_fp.values())
        )
        for key in candidates:
            if key.fingerprint not in accepted and key.verify(signature.sig, message):
                accepted[key.fingerprint] = key
                break
    return tuple(accepted.values())
