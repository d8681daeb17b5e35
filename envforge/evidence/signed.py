"""Signed evidence: which records count when signed evidence is required.

A record is *signed* when its certificate carries a signature that verified against the
key it names (:attr:`Evidence.signer`, a fingerprint), and *trusted* when that key is in
the trust files (``--trust``, ``ENVFORGE_TRUSTED_KEYS``): a signature by a key nobody
trusts proves only that someone holds it. ``--require-signed`` (or
``ENVFORGE_REQUIRE_SIGNED=1``) keeps only trusted-signed records in what a command counts
("certified on", the matrix, an import, a fleet's collected reports); without it every
record counts and each unsigned one is labelled ``unsigned`` wherever it is shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envforge.errors import InvalidInput

if TYPE_CHECKING:
    from envforge.evidence.model import Evidence

#: ``1`` (or ``true``, ``yes``): ``--require-signed`` by default.
REQUIRE_ENV = "ENVFORGE_REQUIRE_SIGNED"


def required_by(flag: bool, environ: Mapping[str, str]) -> bool:
    """``--require-signed`` given, or :data:`REQUIRE_ENV` set to a yes."""
    return flag or environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class SignedPolicy:
    """Whether signed evidence is required, and the trusted keys (fingerprint -> name)."""

    required: bool = False
    trusted: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, required: bool, trusted: Mapping[str, str], *, setting: str) -> SignedPolicy:
        """The policy; :class:`InvalidInput` (exit 2) when signed evidence is required
        and no key is trusted (``setting`` names how it was required)."""
        if required and not trusted:
            raise InvalidInput(
                f"{setting}: signed evidence is required, and no key is trusted to sign it",
                hint="add --trust site.pub (or set ENVFORGE_TRUSTED_KEYS)",
            )
        return cls(required, dict(trusted))

    def trusted_signer(self, signer: str) -> bool:
        return bool(signer) and signer in self.trusted

    def counts(self, signer: str) -> bool:
        """Does a record signed by ``signer`` ("" unsigned) count?"""
        return not self.required or self.trusted_signer(signer)

    def label(self, signer: str) -> str:
        """``signed by NAME (sha256:…)``, ``unsigned``, or ``signed by sha256:… (not a
        trusted key)``."""
        if not signer:
            return "unsigned"
        if signer in self.trusted:
            name = self.trusted[signer]
            return f"signed by {name} ({signer[:19]})" if name else f"signed by {signer[:19]}"
        return f"signed by {signer[:19]} (not a trusted key)"

    def refusal(self, signer: str) -> str:
        """Why a record does not count (a line for the skipped list)."""
        return f"{self.label(signer)}: not counted (signed evidence is required)"

    def refused(self, record: Evidence) -> str | None:
        """Why ``record`` is not kept (:meth:`refusal`), None when it counts."""
        return None if self.counts(record.signer) else self.refusal(record.signer)

    def split(self, signers: Iterable[str]) -> tuple[int, int]:
        """How many of ``signers`` count, and how many do not."""
        values = list(signers)
        counted = sum(1 for s in values if self.counts(s))
        return counted, len(values) - counted
