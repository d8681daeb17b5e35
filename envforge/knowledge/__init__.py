"""Compatibility knowledge: the shipped table (data) and the rules applied to recipes.

``check(recipe)`` lists every :class:`Violation` (rule id, message, evidence, fix);
``enforce(recipe)`` raises the first refusal as a ConstraintViolation (exit 2) and warns
about what the table has no row for (``unknown`` verdicts, refused under ``--strict``);
``explain(recipe)`` says why each pin is there. The table is
``envforge/data/compat.yaml`` merged with the overlays (``ENVFORGE_KNOWLEDGE_PATH``,
``$XDG_CONFIG_HOME/envforge/knowledge/``), loaded by :func:`load_table` (compiled once,
:mod:`envforge.knowledge.compiled`).

The names below are loaded from their modules when first used (PEP 562), so importing
one module of this package (``envforge.knowledge.table``) loads no sibling: a command
imports the rules, the parser or the lookups only when it uses them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envforge.errors import TableError
    from envforge.knowledge.arch import (
        NVIDIA_COMPUTE_CAPABILITIES,
        gfx_from_isa,
        isa_from_gfx,
        sm_covered,
    )
    from envforge.knowledge.compiled import load_table, overlay_files
    from envforge.knowledge.lookups import (
        cuda_archs,
        min_driver,
        override_target,
        recipe_arch_for,
        variant_of,
    )
    from envforge.knowledge.rules import (
        Reason,
        Violation,
        check,
        effective_confidence,
        enforce,
        explain,
        split,
        strict_from_env,
        unknowns,
    )
    from envforge.knowledge.table import CompatTable, Override, Release, Variant

#: Each exported name -> the module that defines it.
_EXPORTS = {
    "TableError": "envforge.errors",
    **dict.fromkeys(
        ("NVIDIA_COMPUTE_CAPABILITIES", "gfx_from_isa", "isa_from_gfx", "sm_covered"),
        "envforge.knowledge.arch",
    ),
    **dict.fromkeys(("load_table", "overlay_files"), "envforge.knowledge.compiled"),
    **dict.fromkeys(
        ("cuda_archs", "min_driver", "override_target", "recipe_arch_for", "variant_of"),
        "envforge.knowledge.lookups",
    ),
    **dict.fromkeys(
        (
            "Reason",
            "Violation",
            "check",
            "effective_confidence",
            "enforce",
            "explain",
            "split",
            "strict_from_env",
            "unknowns",
        ),
        "envforge.knowledge.rules",
    ),
    **dict.fromkeys(("CompatTable", "Override", "Release", "Variant"), "envforge.knowledge.table"),
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


__all__ = [
    "NVIDIA_COMPUTE_CAPABILITIES",
    "CompatTable",
    "Override",
    "Reason",
    "Release",
    "TableError",
    "Variant",
    "Violation",
    "check",
    "cuda_archs",
    "effective_confidence",
    "enforce",
    "explain",
    "gfx_from_isa",
    "isa_from_gfx",
    "load_table",
    "min_driver",
    "overlay_files",
    "override_target",
    "recipe_arch_for",
    "sm_covered",
    "split",
    "strict_from_env",
    "unknowns",
    "variant_of",
]
