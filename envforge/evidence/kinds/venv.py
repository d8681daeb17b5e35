"""A virtualenv's certification marker from before certificate format 3
(``VENV/.envforge/certified.json`` with no schema: the report that passed, the recipe and
its hash): read, never made now (a venv's certificate is a format-3 certificate)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from envforge.evidence.model import Evidence, from_report
from envforge.knowledge.table import CompatTable
from envforge.publish.certificate import legacy_venv


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def recognises(data: Mapping[str, Any]) -> bool:
    return legacy_venv(data)


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
