"""``explain(recipe)``: why each pin of a recipe is there, with its source (``envforge show``)."""

from __future__ import annotations

from envforge.knowledge.arch import gfx_from_isa
from envforge.knowledge.compiled import load_table
from envforge.knowledge.table import CompatTable, Variant, base_version
from envforge.knowledge.verdicts import HSA_OVERRIDE, Reason, cite
from envforge.recipe.model import Recipe


def explain(recipe: Recipe, table: CompatTable | None = None) -> list[Reason]:
    """Why each pin is in the recipe, with its source (best effort on invalid recipes)."""
    t = load_table() if table is None else table
    out: list[Reason] = []
    release = t.release(recipe.torch.version)
    variant = None if release is None else release.variant(recipe.accelerator)
    version = base_version(recipe.torch.version)
    if release is not None and variant is not None:
        low, high = variant.python_range(recipe.torch.version)
        out.append(
            Reason(
                f"python {recipe.python}",
                f"torch {version}+{variant.name} wheels exist for CPython {low}-{high}",
                cite(t, variant.python_source, variant.origin),
            )
        )
        install = (
            f"pip install torch=={version}{variant.local} --extra-index-url {variant.index}"
            if variant.form == "extra-index-url"
            else f"pip install torch=={version} --index-url {variant.index}"
        )
        note = f" ({variant.note})" if variant.note else ""
        out.append(
            Reason(
                f"torch {recipe.torch.version}",
                f"a published {variant.name} build of torch {release.series}"
                f" [{variant.confidence}]; installed as: {install}{note}",
                cite(t, variant.source, variant.origin),
            )
        )
        if release.numpy_breaks is not None:
            why = (
                f"torch {version} wheels are built against the NumPy 1.x ABI; NumPy "
                f"{release.numpy_breaks} fails at import (_ARRAY_API not found)"
            )
        else:
            why = f"torch {release.series} supports NumPy 2 on Linux (NumPy 1.x also works)"
        numpy_cite = cite(t, release.numpy_source or "NP2", release.origin)
        out.append(Reason(f"numpy {recipe.numpy}", why, numpy_cite))
        out.extend(_accelerator_reasons(recipe, variant, t))
    entry = t.base_image(recipe.base_image)
    if entry is not None:
        out.append(
            Reason(
                f"base_image {recipe.base_image}",
                f"{entry.distro}: its python3 is {entry.python}",
                cite(t, entry.source, entry.origin),
            )
        )
    for e in recipe.env:
        out.append(
            Reason(
                f"env {e.name}={e.value}",
                f"{e.why} [{e.confidence}]",
                ", ".join(e.evidence) or "(no evidence given)",
            )
        )
    return out


def _accelerator_reasons(recipe: Recipe, variant: Variant, t: CompatTable) -> list[Reason]:
    out: list[Reason] = []
    arch = recipe.gpu.arch
    if variant.kind == "cuda" and recipe.cuda:
        floor = t.driver_floor(recipe.cuda)
        if floor is not None:
            out.append(
                Reason(
                    f"cuda {recipe.cuda}",
                    f"the {variant.name} wheel; needs an NVIDIA driver >= {floor.min} "
                    f"(CUDA {floor.cuda_major}.x) [{floor.confidence}]",
                    cite(t, floor.source, floor.origin),
                )
            )
        if arch is not None and variant.covers(arch):
            exact = arch in variant.archs
            how = (
                "SASS compiled in"
                if exact
                else ("runs the same-major SASS/PTX of the wheel (CUDA binary compatibility)")
            )
            out.append(
                Reason(
                    f"gpu.arch {arch}",
                    f"{how}; wheel SASS: {', '.join(variant.archs)}"
                    + (f" + PTX {variant.ptx}" if variant.ptx else ""),
                    cite(t, variant.arch_source(variant.archs[0]), variant.origin),
                )
            )
    if variant.kind == "rocm" and recipe.rocm and arch is not None:
        out.append(
            Reason(
                f"rocm {recipe.rocm}",
                f"the {variant.name} wheel (bundles its ROCm user-space libraries; the host "
                "needs only the amdgpu/KFD driver); archs: " + ", ".join(variant.archs),
                cite(t, variant.source, variant.origin),
            )
        )
        override = recipe.env_map.get(HSA_OVERRIDE)
        known = t.override_for(arch)
        if arch in variant.archs:
            unc = " [uncertain]" if arch in variant.archs_uncertain else ""
            out.append(
                Reason(
                    f"gpu.arch {arch}",
                    f"compiled into the {variant.name} wheel{unc}",
                    cite(t, variant.arch_source(arch), variant.arch_origin(arch)),
                )
            )
        elif override is not None:
            target = gfx_from_isa(override)
            detail = (
                f" [{known.confidence}, {known.status}]: {known.note}" if known is not None else ""
            )
            out.append(
                Reason(
                    f"gpu.arch {arch}",
                    f"not in the wheel; {HSA_OVERRIDE}={override} runs {target} code{detail}",
                    known.source if known is not None else "(no table entry)",
                )
            )
    return out
