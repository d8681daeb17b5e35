"""The values the table's rules give: a :class:`Violation` (refusal or unknown) and a
:class:`Reason` (why a pin is in a recipe), shared by :mod:`envforge.knowledge.rules`,
:mod:`envforge.knowledge.arch_checks` and :mod:`envforge.knowledge.pin_reasons`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envforge.errors import ConstraintViolation
from envforge.knowledge.table import CompatTable

HSA_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"

VerdictKind = Literal["impossible", "unknown"]


@dataclass(frozen=True)
class Violation:
    """One refusal: a stable rule id, what conflicts, where the rule comes from, the fix."""

    rule: str
    message: str
    evidence: str
    hint: str
    #: ``impossible`` (refused) or ``unknown`` (accepted as uncertain unless strict).
    kind: VerdictKind = "impossible"

    @property
    def unknown(self) -> bool:
        return self.kind == "unknown"

    def warning(self, origin: str) -> str:
        """``ORIGIN: [rule] message; accepted as uncertain ...`` on one line."""
        return (
            f"{origin}: [{self.rule}] {self.message}; accepted as uncertain "
            "(certification decides; --strict refuses)"
        )

    def error(self, origin: str) -> ConstraintViolation:
        return ConstraintViolation(
            origin, self.rule, self.message, evidence=self.evidence, hint=self.hint
        )

    def one_line(self, origin: str) -> str:
        """``ORIGIN: [rule] message (source: ...) (fix: ...)`` on one line."""
        return self.error(origin).one_line()


@dataclass(frozen=True)
class Reason:
    """Why a pin is in a recipe (for ``envforge show``)."""

    pin: str
    why: str
    source: str


def cite(t: CompatTable, text: str, origin: str) -> str:
    """The expanded sources of a fact, and the table file it came from."""
    return f"{t.cite(text)} [{origin}]"
