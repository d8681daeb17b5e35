"""A probe report, ``probe.json`` (``envforge.probe/1``), as ``envforge probe --report
DIR`` and ``build``/``certify --report DIR`` write it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from envforge.evidence.model import Evidence, from_report
from envforge.knowledge.table import CompatTable
from envforge.probe.report import SCHEMA


def recognises(data: Mapping[str, Any]) -> bool:
    return data.get("schema") == SCHEMA


def read(
    data: Mapping[str, Any],
    redact: Callable[[str], str],
    *,
    signatures: bool,
    table: CompatTable | None,
) -> Evidence:
    return from_report(data, kind="probe", redact=redact, table=table)
