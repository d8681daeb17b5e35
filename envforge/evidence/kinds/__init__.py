"""The kinds of evidence by name: a document is read through the first of :data:`KINDS`
that recognises it, a record's ``kind`` is one of its keys, and a run read twice keeps
the copy of the kind listed first (:func:`ranks`).

A new kind is one module implementing :class:`~envforge.evidence.kinds.base.EvidenceKind`
and one line here.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Final

from envforge.evidence.kinds import attestation, certificate, probe, signed_probe, venv
from envforge.evidence.kinds.base import EvidenceKind

#: The kinds, best first: a certificate over a venv's marker over a signed probe report
#: over a signed attestation (a predicate keeps no step details) over a bare probe report.
KINDS: Final[MutableMapping[str, EvidenceKind]] = {
    "certificate": certificate,
    "venv": venv,
    "signed-probe": signed_probe,
    "attestation": attestation,
    "probe": probe,
}


def ranks() -> dict[str, int]:
    """Kind -> its rank (lower wins when the same run is read more than once)."""
    return {name: rank for rank, name in enumerate(KINDS)}


__all__ = ["KINDS", "EvidenceKind", "ranks"]
