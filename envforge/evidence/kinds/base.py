"""What every kind of evidence implements: recognising its documents and reading one.

A kind is a *module* implementing :class:`EvidenceKind` with module-level functions (as a
backend is, :mod:`envforge.backends`); :data:`envforge.evidence.kinds.KINDS` names them,
in the order a run read twice keeps its copies (the first kind wins), and
:func:`envforge.evidence.records.parse_document` reaches a kind only through it. An
exported record (``envforge.evidence/1``) names its kind: one not registered is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from envforge.evidence.model import Evidence
    from envforge.knowledge.table import CompatTable


class EvidenceKind(Protocol):
    """A kind module. As per PEP 544, ``self`` is ignored when a module implements it."""

    # whether the decoded document is of this kind (by its content, not its file name)
    def recognises(self, data: Mapping[str, Any]) -> bool: ...

    # the document as one record; EvidenceError when it is not readable evidence
    # (signatures: check a signed document's signature; table: the compatibility table)
    def read(
        self,
        data: Mapping[str, Any],
        redact: Callable[[str], str],
        *,
        signatures: bool,
        table: CompatTable | None,
    ) -> Evidence: ...
