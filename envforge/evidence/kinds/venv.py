"""A virtualenv's certification marker (``VENV/.envforge/certified.json``): the report
that passed, with the recipe and its hash (no schema of its own)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from envforge.evidence.records import Evidence, from_report
from envforge.knowledge.table import CompatTable


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def recognises(data: Mapping[str, Any]) -> bool:
    return (
        data.get("schema") is None
        and isinstance(data.get("report"), dict)
        and "fingerprint" in data
    )


def read(
    data: Mapping[str, Any],
    redact: Callable[[str], str],
    *,
    signatures: bool,
    table: CompatTable | None,
) -> Evidence:
    return from_report(
        data["report"],
        kind="venv",
        redact=redact,
        recipe=_text(data.get("recipe")),
        recipe_hash=_text(data.get("recipe_hash")),
        table=table,
    )
