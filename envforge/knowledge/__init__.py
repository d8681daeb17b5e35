"""Compatibility knowledge: the shipped table (data) and the rules applied to recipes.

``check(recipe)`` lists every :class:`Violation` (rule id, message, evidence, fix);
``enforce(recipe)`` raises the first refusal as a ConstraintViolation (exit 2) and warns
about what the table has no row for (``unknown`` verdicts, refused under ``--strict``);
``explain(recipe)`` says why each pin is there. The table is
``envforge/data/compat.yaml`` merged with the overlays (``ENVFORGE_KNOWLEDGE_PATH``,
``$XDG_CONFIG_HOME/envforge/knowledge/``), parsed by :func:`load_table`.
"""

from __future__ import annotations

from envforge.errors import TableError
from envforge.host.arch import NVIDIA_COMPUTE_CAPABILITIES, gfx_from_isa, isa_from_gfx, sm_covered
from envforge.knowledge.parse import load_table, overlay_files
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
from envforge.recipe.model import Recipe


def variant_of(recipe: Recipe, table: CompatTable | None = None) -> Variant | None:
    """The wheel variant a recipe asks for (torch version x rocm/cuda/cpu), if published."""
    t = load_table() if table is None else table
    return t.variant(recipe.torch.version, recipe.accelerator)


def override_target(arch: str, table: CompatTable | None = None) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION`` value for ``arch`` (``gfx1031`` → ``"10.3.0"``).

    None when the table knows none, or knows it to be broken (gfx1103, gfx1033).
    RDNA1 (gfx1010/1011/1012) gives ``"10.3.0"``; ``load_table().override_for(arch)``
    says it is ``unreliable`` (community evidence).
    """
    t = load_table() if table is None else table
    return t.override_target(arch)


def cuda_archs(recipe: Recipe, table: CompatTable | None = None) -> tuple[str, ...]:
    """NVIDIA archs the recipe's CUDA wheel can run on: compiled SASS, same-major newer
    minors (binary compatibility: sm_60 SASS runs on sm_61) and PTX-JIT targets.
    Empty for non-CUDA or unknown variants."""
    variant = variant_of(recipe, table)
    if variant is None or variant.kind != "cuda":
        return ()
    return tuple(a for a in NVIDIA_COMPUTE_CAPABILITIES if variant.covers(a))


def min_driver(recipe_or_cuda: Recipe | str, table: CompatTable | None = None) -> str | None:
    """NVIDIA driver floor for a recipe's CUDA wheel or a CUDA version ("12.6" → "525").

    None for ROCm/CPU recipes or a CUDA major the table does not know.
    """
    t = load_table() if table is None else table
    cuda = recipe_or_cuda if isinstance(recipe_or_cuda, str) else recipe_or_cuda.cuda
    if not cuda:
        return None
    floor = t.driver_floor(cuda)
    return None if floor is None else floor.min


def recipe_arch_for(arch: str, table: CompatTable | None = None) -> list[str]:
    """Archs whose recipes can serve a detected ``arch``, best first (see
    :meth:`CompatTable.recipe_arch_for`)."""
    t = load_table() if table is None else table
    return t.recipe_arch_for(arch)

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
