"""Lookups of the compatibility table a recipe or an arch needs (the table loaded when
none is given): the wheel variant, ``HSA_OVERRIDE_GFX_VERSION``, CUDA archs, driver floors."""

from __future__ import annotations

from envforge.knowledge.arch import NVIDIA_COMPUTE_CAPABILITIES
from envforge.knowledge.compiled import load_table
from envforge.knowledge.table import CompatTable, Variant
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
