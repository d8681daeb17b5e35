"""Which published wheels run an arch, and how (SASS, same-major SASS, PTX, an
``HSA_OVERRIDE_GFX_VERSION``), with the doubts each way carries: the candidate half of
:mod:`envforge.solve.solver` (pure; no I/O)."""

from __future__ import annotations

from envforge.core.patterns import Confidence
from envforge.knowledge.arch import (
    ordinal,
    parse_sm,
    sort_key,
    vendor_of,
)
from envforge.knowledge.arch_checks import table_archs
from envforge.knowledge.table import ArchInfo, CompatTable, Override, Variant
from envforge.solve.solution import HSA_OVERRIDE, Candidate, Via

CONF_RANK: dict[str, int] = {"verified": 0, "community": 1, "uncertain": 2}


def known_archs(table: CompatTable) -> tuple[str, ...]:
    """Every arch the table names plus the shipped NVIDIA compute capabilities, in arch
    order (:func:`envforge.knowledge.arch_checks.table_archs`)."""
    return table_archs(table)


def nearest_archs(arch: str, table: CompatTable, limit: int = 3) -> list[str]:
    """Known archs of the same vendor closest to ``arch`` (shared prefix, then distance)."""
    vendor = vendor_of(arch) or ("amd" if arch.lower().startswith("gfx") else "nvidia")
    number = ordinal(arch) or 0

    def prefix(a: str) -> int:
        n = 0
        for x, y in zip(arch.lower(), a):
            if x != y:
                break
            n += 1
        return n

    same = [a for a in known_archs(table) if vendor_of(a) == vendor]
    same.sort(key=lambda a: (-prefix(a), abs((ordinal(a) or 0) - number), sort_key(a)))
    return same[:limit]


def coverage(
    arch: str, variant: Variant, table: CompatTable
) -> tuple[Via, str, Override | None] | None:
    """How ``variant`` runs ``arch`` (via, the arch whose code runs, the override), or None."""
    if variant.kind == "cuda":
        if arch in variant.archs:
            return "sass", arch, None
        gpu = parse_sm(arch)
        if gpu is None:
            return None
        lower = [
            a
            for a in variant.archs
            if (s := parse_sm(a)) is not None
            and not s.suffix
            and s.major == gpu.major
            and s.minor < gpu.minor
        ]
        if lower:
            return "same-major", max(lower, key=sort_key), None
        if variant.ptx is not None and variant.covers(arch):
            return "ptx", variant.ptx, None
        return None
    if variant.kind != "rocm":
        return None
    if arch in variant.archs:
        return None if variant.broken_arch(arch) else ("arch-list", arch, None)
    o = table.override_for(arch)
    if o is None or o.status != "works":
        return None
    if o.target in variant.archs and variant.broken_arch(o.target) is None:
        return "override", o.target, o
    return None


def candidates(arch: str, table: CompatTable, platform: str) -> list[Candidate]:
    out: list[Candidate] = []
    for release in table.releases:
        for published in release.variants:
            variant = published.for_platform(platform)
            if variant is None:
                continue
            found = coverage(arch, variant, table)
            if found is None:
                continue
            via, runs, override = found
            for version in release.versions:
                out.append(Candidate(release, version, variant, via, runs, override))
    return out


def doubts(
    c: Candidate, arch: str, info: ArchInfo | None = None
) -> tuple[Confidence, tuple[str, ...]]:
    doubts: list[str] = []
    worst = "verified"
    if info is not None and info.confidence != "verified":
        doubts.append(f"{arch} ({info.family}) on these wheels: {info.official}")
        worst = info.confidence
    if c.variant.confidence != "verified":
        doubts.append(f"the {c.variant.name} variant of torch {c.release.series} is unconfirmed")
        worst = c.variant.confidence
    if c.runs in c.variant.archs_uncertain:
        doubts.append(f"{c.runs} in the {c.variant.name} wheel is inferred, not confirmed")
        worst = "uncertain"
    if c.via == "ptx":
        doubts.append(
            f"PTX of {c.runs} in the {c.variant.name} wheel is per the release notes only; "
            "cuobjdump finds none in PyPI's 2.13.0 and 2.15.0 cu13x wheels"
        )
        worst = "uncertain"
    if c.override is not None:
        if CONF_RANK[c.override.confidence] > CONF_RANK[worst]:
            worst = c.override.confidence
        if c.override.confidence == "uncertain":
            doubts.append(f"the {HSA_OVERRIDE} override for {arch} is unconfirmed")
    confidence: Confidence = "uncertain"
    if worst == "verified":
        confidence = "verified"
    elif worst == "community":
        confidence = "community"
    return confidence, tuple(doubts)
