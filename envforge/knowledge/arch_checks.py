"""The arch rules of :func:`envforge.knowledge.rules.check`: ``arch-in-wheel``,
``arch-broken``, ``hsa-override``, ``override-known-bad`` (AMD), ``cuda-arch`` and
``tegra`` (NVIDIA), and ``platform`` (a variant's wheels for the platform)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from envforge.knowledge.arch import (
    NVIDIA_COMPUTE_CAPABILITIES,
    gfx_from_isa,
    is_device_arch,
    sort_key,
)
from envforge.knowledge.table import (
    PLATFORMS,
    ArchInfo,
    CompatTable,
    JetPack,
    Release,
    Variant,
    base_version,
)
from envforge.knowledge.verdicts import HSA_OVERRIDE, Violation, cite
from envforge.recipe.model import Recipe


def _on_platform(r: Release, kind: str, platform: str) -> Iterator[Variant]:
    """``r``'s variants of ``kind`` as their wheels for ``platform`` are (none: no row)."""
    for v in r.variants:
        built = v.for_platform(platform) if v.kind == kind else None
        if built is not None:
            yield built


def _covering(arch: str, kind: str, t: CompatTable, platform: str) -> list[tuple[Release, Variant]]:
    return [
        (r, v)
        for r in t.releases
        for v in _on_platform(r, kind, platform)
        if v.covers(arch) and v.broken_arch(arch) is None
    ]


def _stack_hint(
    arch: str, kind: str, t: CompatTable, variant: Variant, platform: str = PLATFORMS[0]
) -> str:
    covering = _covering(arch, kind, t, platform)
    if not covering:
        return ""
    first, last = covering[0], covering[-1]
    key = "rocm" if kind == "rocm" else "cuda"
    r0, v0 = first
    text = f'torch {r0.versions[-1]} with {key}: "{v0.version}" is the first stack with {arch}'
    if (last[0].series, last[1].name) != (r0.series, v0.name):
        r1, v1 = last
        text += f'; torch {r1.versions[-1]} with {key}: "{v1.version}" the latest'
    return text


def table_archs(table: CompatTable) -> tuple[str, ...]:
    """Every arch the table names (arch info, wheel lists, overrides) plus the shipped
    NVIDIA compute capabilities, in arch order."""
    names: set[str] = {a.arch for a in (*table.amd_archs, *table.nvidia_archs)}
    names.update(o.arch for o in table.overrides)
    names.update(NVIDIA_COMPUTE_CAPABILITIES)
    listed: set[str] = set()  # each name checked once: the wheels list the same archs again
    for r in table.releases:
        for v in r.variants:
            listed.update(v.archs)
    names.update(a for a in listed if is_device_arch(a))
    return tuple(sorted(names, key=sort_key))


def no_row(recipe: Recipe, t: CompatTable) -> Iterator[Violation]:
    """A recipe for an arch the table has no row for: whether its wheel runs the arch is
    only predicted from the ISA family (``envforge solve ARCH`` says how): unknown."""
    arch = recipe.gpu.arch
    if arch is None or not is_device_arch(arch) or arch in table_archs(t):
        return
    yield Violation(
        "gpu-arch",
        f"the compatibility table has no row for {arch}: that this stack runs it is "
        "predicted, not verified, from its ISA family",
        "envforge/data/families.yaml (CUDA binary/PTX compatibility; LLVM AMDGPUUsage generic "
        "processors)",
        f"envforge solve {arch} shows the family rule; add a row for {arch} in an overlay "
        "(envforge knowledge refresh -o FILE)",
        kind="unknown",
    )


def amd_arch(recipe: Recipe, variant: Variant, t: CompatTable) -> Iterator[Violation]:
    arch = recipe.gpu.arch
    if arch is None:
        return
    stack = f"torch {base_version(recipe.torch.version)}+{variant.name}"
    override = recipe.env_map.get(HSA_OVERRIDE)
    known = t.override_for(arch)
    if override is None:
        target = arch
    else:
        target_or_none = gfx_from_isa(override)
        if target_or_none is None:
            yield Violation(
                "hsa-override",
                f"{HSA_OVERRIDE}={override!r} is not an ISA version like 10.3.0",
                "ROCm HSA runtime (major.minor.stepping)",
                f"set env.{HSA_OVERRIDE}=" + (known.value if known else "<major.minor.stepping>"),
            )
            return
        target = target_or_none
        if arch in variant.archs and target != arch:
            yield Violation(
                "hsa-override",
                f"{arch} is in the {stack} wheel; {HSA_OVERRIDE}={override} would make it "
                f"run {target} code",
                cite(t, variant.arch_source(arch), variant.arch_origin(arch)),
                f"remove env.{HSA_OVERRIDE}",
            )
            return
        if known is not None and known.value != override:
            yield Violation(
                "hsa-override",
                f"{HSA_OVERRIDE}={override} makes {arch} run {target} code; the known "
                f"override for {arch} is {known.value} ({known.target})",
                f"{known.source} [{known.origin}]",
                f"set env.{HSA_OVERRIDE}={known.value}",
            )
            return
        if known is not None and known.status == "broken":
            yield Violation(
                "override-known-bad",
                f"{HSA_OVERRIDE}={override} on {arch} is known to fail: {known.note}",
                f"{known.source} [{known.origin}]",
                "use a stack whose wheel has the arch natively, or the CPU recipe",
            )
            return
    if variant.covers(target):
        broken = variant.broken_arch(target)
        if broken is not None:
            covering = _covering(target, "rocm", t, PLATFORMS[0])
            hint = (
                f'use torch {covering[-1][0].versions[-1]} with rocm: "{covering[-1][1].version}" '
                f"(last stack whose libraries still run {target})"
                if covering
                else "use an older ROCm variant"
            )
            yield Violation(
                "arch-broken",
                f"{target} is listed in the {stack} wheel but cannot run: {broken.reason}",
                f"{broken.source} [{broken.origin}]",
                hint,
            )
        return
    via = f" ({HSA_OVERRIDE}={override} makes {arch} run {target} code)" if override else ""
    if override is None and known is not None and known.status != "broken":
        ok_target = variant.covers(known.target) and variant.broken_arch(known.target) is None
        hint = (
            f"set env.{HSA_OVERRIDE}={known.value} ({known.confidence}, {known.status}: "
            f"runs {known.target} code)"
            if ok_target
            else _stack_hint(known.target, "rocm", t, variant)
        )
    else:
        hint = _stack_hint(target, "rocm", t, variant) or "no official wheel has this arch"
    yield Violation(
        "arch-in-wheel",
        f"{stack} has no kernels for {target}{via} (wheel archs: {', '.join(variant.archs)})",
        cite(
            t,
            "; ".join(dict.fromkeys(s for _, s in variant.arch_sources)),
            ", ".join(dict.fromkeys(variant.arch_origin(a) for a in variant.archs))
            or variant.origin,
        ),
        hint,
    )


def cuda_arch(
    recipe: Recipe, variant: Variant, t: CompatTable, platform: str = PLATFORMS[0]
) -> Iterator[Violation]:
    """``variant`` (as built for ``platform``) has no code for the recipe's arch; the fix
    names a stack whose ``platform`` wheels have it, else the platform whose wheels do."""
    arch = recipe.gpu.arch
    if arch is None or variant.covers(arch):
        return
    release = t.release(recipe.torch.version)
    hint = ""
    if release is not None:
        same = [v for v in _on_platform(release, "cuda", platform) if v.covers(arch)]
        if same:
            v = same[-1]
            hint = f'set cuda: "{v.version}" and torch.index: {v.index}'
    if not hint:
        hint = _stack_hint(arch, "cuda", t, variant, platform)
    if not hint:
        elsewhere = [p for p in PLATFORMS if p != platform and _covering(arch, "cuda", t, p)]
        hint = (
            f"no {platform} wheel has code for {arch}; the {elsewhere[0]} wheels have: "
            f"--platform {elsewhere[0]}"
            if elsewhere
            else "no official wheel has this arch"
        )
    ptx = f" + PTX {variant.ptx}" if variant.ptx else ""
    yield Violation(
        "cuda-arch",
        f"torch {base_version(recipe.torch.version)}+{variant.name} has no code for {arch} "
        f"(SASS {', '.join(variant.archs)}{ptx})",
        cite(
            t,
            variant.arch_source(variant.archs[0]) if variant.archs else variant.source,
            variant.origin,
        ),
        hint,
    )


# --------------------------------------------------------------------------- explain


def tegra_arch(
    recipe: Recipe, variant: Variant, t: CompatTable, platform: str = ""
) -> Iterator[Violation]:
    """A Jetson (Tegra) arch on the package index's wheels: refused unless the variant
    has a sourced Jetson (``platforms: tegra``) row, or a JetPack line runs ``platform``'s
    wheels on it (JetPack 7.2: Orin on the linux/arm64 wheels)."""
    arch = recipe.gpu.arch
    if recipe.gpu.vendor != "nvidia" or arch is None or t.arch_platform(arch) != "tegra":
        return
    if variant.for_platform("tegra") is not None:
        return
    route = t.tegra
    if route is not None and platform and route.running(arch, platform) is not None:
        return
    yield Violation(
        "tegra",
        f"{arch} is a Jetson (Tegra) GPU: torch {base_version(recipe.torch.version)}+"
        f"{variant.name} from the package index is built for x86_64 and server arm64 "
        f"(SBSA) CUDA and does not run on {tegra_scope(t, arch)}",
        cite(t, tegra_sources(t, arch), route.origin) if route else "",
        f"use {tegra_route(t, arch)}",
    )


def jetpack_rows(t: CompatTable, arch: str) -> tuple[JetPack, ...]:
    return t.tegra.for_arch(arch) if t.tegra is not None else ()


def tegra_scope(t: CompatTable, arch: str) -> str:
    """Where the package index's wheels do not run on the Jetson ``arch``: every L4T,
    or (where a JetPack line runs them: 7.2 on Orin) the newest line that needs
    NVIDIA's Jetson wheels and those before it, from the ``tegra.jetpacks`` rows."""
    rows = jetpack_rows(t, arch)
    if not any(j.wheels != "tegra" for j in rows):
        return "L4T/JetPack"
    older = [j for j in rows if j.wheels == "tegra"]
    if not older:
        return "the JetPacks before the lines named in the fix"
    return f"{older[-1].label} and older"


def tegra_sources(t: CompatTable, arch: str) -> str:
    """The tegra route's source, then each JetPack line's serving ``arch``."""
    route = t.tegra
    if route is None:
        return ""
    return "; ".join([route.source, *(j.source for j in route.for_arch(arch))])


def tegra_route(t: CompatTable, arch: str) -> str:
    """NVIDIA's route for ``arch``, per JetPack line where the table has them."""
    route = t.tegra
    if route is None:
        return "NVIDIA's JetPack wheels on an L4T base image"
    rows = route.for_arch(arch)
    if not rows:
        return route.route
    return "; ".join(f"on {j.label}: {j.route} ({j.confidence})" for j in rows)


def jetpack_runs(t: CompatTable, arch: str, platform: str | None) -> bool:
    """A JetPack line runs ``platform``'s wheels on the Jetson ``arch`` (7.2: Orin)."""
    return (
        bool(platform)
        and t.tegra is not None
        and (t.tegra.running(arch, platform or "") is not None)
    )


def jetson_info(arch: str, t: CompatTable) -> ArchInfo | None:
    """The arch's row; for a Jetson arch on a JetPack line whose CUDA is SBSA (7.2:
    Orin), with that line's confidence and words: the arm64 wheels run there only."""
    info = t.arch_info(arch)
    route = t.tegra
    jetpack = route.running(arch, PLATFORMS[1]) if route is not None else None
    if info is None or info.platform != "tegra" or jetpack is None:
        return info
    return replace(info, confidence=jetpack.confidence, official=f"only on {jetpack.label}")


def jetpack_note(arch: str, t: CompatTable, platform: str) -> str | None:
    """For a Jetson arch solved on ``platform``'s wheels: on which JetPack they run."""
    route = t.tegra
    jetpack = route.running(arch, platform) if route is not None else None
    if jetpack is None or t.arch_platform(arch) != "tegra":
        return None
    return (
        f"{arch} runs these {platform} wheels only on {jetpack.label} or later "
        f"({jetpack.confidence}: {t.cite(jetpack.source)}); on an older JetPack use "
        f"{tegra_route(t, arch)}"
    )


def platform_missing(recipe: Recipe, variant: Variant, platform: str, t: CompatTable) -> Violation:
    """The table has no row for the variant's wheels on ``platform``: ROCm wheels are
    linux/amd64 only (impossible); other variants are unknown (certification decides)."""
    stack = f"torch {base_version(recipe.torch.version)}+{variant.name}"
    if variant.kind == "rocm":
        return Violation(
            "platform",
            f"{stack} has no {platform} wheels: ROCm wheels are built for linux/amd64 only",
            cite(t, "TI (no aarch64 ROCm builds)", variant.origin),
            "build for --platform linux/amd64",
        )
    return Violation(
        "platform",
        f"the compatibility table has no row saying {stack} publishes {platform} wheels",
        cite(t, variant.source, variant.origin),
        f"use a release with {platform} wheels (envforge solve ARCH --platform {platform}), "
        "or add a sourced platforms row in a knowledge overlay",
        kind="unknown",
    )
