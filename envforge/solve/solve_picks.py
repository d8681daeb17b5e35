"""The explained choices of a solved stack (:func:`picks`) and the refusal texts of
``envforge solve`` (:func:`no_wheel_message`, :func:`no_wheel_hint`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from packaging.specifiers import SpecifierSet

from envforge.core.patterns import Confidence
from envforge.knowledge.arch_checks import tegra_route, tegra_scope, tegra_sources
from envforge.knowledge.table import PLATFORMS, CompatTable, Release
from envforge.solve.solution import HSA_OVERRIDE, Candidate, Pick, SolveRequest, Stack


@functools.lru_cache(maxsize=256)
def admits_any(spec: str, versions: tuple[str, ...]) -> bool:
    """Some of ``versions`` satisfies the specifier ``spec`` (once per pair: a solve asks
    for every candidate stack, in both modes)."""
    specifier = SpecifierSet(spec)
    return any(specifier.contains(v) for v in versions)


def numpy_spec(release: Release, python: str, table: CompatTable) -> tuple[str, str]:
    """(specifier, reason) for NumPy on this release and Python."""
    available = table.numpy_installable(python)
    if release.numpy_breaks is not None:
        m = re.fullmatch(r"\s*>=\s*([0-9.]+)\s*", release.numpy_breaks)
        bound = f"<{m.group(1)}" if m else "<2"
        return bound, f"torch {release.series} wheels break with NumPy {release.numpy_breaks}"
    spec = ">=1.26,<3"
    if not admits_any(spec, available):
        spec = "<3"
    return spec, (
        f"no NumPy break known for torch {release.series} on Linux; NumPy 3 is not released "
        "(bounded below 3)"
    )


# --------------------------------------------------------------------------- solve


def picks(
    arch: str, s: Stack, c: Candidate, request: SolveRequest, table: CompatTable
) -> tuple[Pick, ...]:
    v = c.variant
    how = {
        "sass": f"has {arch} SASS",
        "arch-list": f"is built for {arch} (PYTORCH_ROCM_ARCH)",
        "same-major": f"has {s.runs} SASS, which runs on {arch} (same major, lower minor)",
        "ptx": f"has {s.runs} PTX, JIT-compiled for {arch}",
        "override": f"is built for {s.runs}, which {arch} runs with {HSA_OVERRIDE}",
    }[s.via]
    if request.torch is not None:
        why_torch = f"asked for (--torch); its {v.name} wheel {how}"
    elif request.conservative:
        why_torch = (
            f"the stack with the most evidence ({s.confidence}"
            + (", the package-index default build" if s.pypi_default else "")
            + ("" if s.newest_release else ", not from the table's newest release")
            + f"); its {v.name} wheel {how}"
        )
    else:
        why_torch = f"the newest release whose {v.name} wheel {how}"
        if v.broken:
            why_torch += " and runs it"
    arch_source = (
        v.arch_source(s.runs)
        if v.kind == "rocm"
        else (v.arch_source(v.archs[0]) if v.archs else v.source)
    )
    conf_variant: Confidence = "uncertain" if s.doubts else "verified"
    picks = [
        Pick(
            "torch",
            s.torch,
            why_torch,
            table.cite(f"{c.release.source}; {arch_source}"),
            conf_variant,
        ),
        Pick(
            "variant",
            f"{v.name} ({s.index}, {s.form})",
            f"{'ROCm' if v.kind == 'rocm' else 'CUDA'} {s.accelerator_version} wheels of torch "
            f"{s.torch} for {s.platform}"
            + (" (the package-index default)" if v.pypi_default else "")
            + (f"; note: {table.cite(v.note)}" if v.note else ""),
            table.cite(v.source),
            v.confidence,
        ),
    ]
    if s.driver_floor is not None:
        df = table.driver_floor(s.accelerator_version)
        met = (
            f"; the driver {request.driver} meets it"
            if request.driver
            else "; the host driver is unknown (give --driver to check)"
        )
        picks.append(
            Pick(
                "driver",
                f">= {s.driver_floor}",
                f"CUDA {s.accelerator_version.split('.')[0]} wheels need a Linux driver >= "
                f"{s.driver_floor}{met}",
                table.cite(df.source) if df else "",
                df.confidence if df else "uncertain",
            )
        )
    low, high = v.python_range(s.torch)
    entry = table.base_image(s.base_image)
    if request.python is not None:
        why_py = f"asked for (--python); the wheels cover {low}-{high}"
    elif request.base_image is not None:
        why_py = f"the Python {request.base_image} ships; the wheels cover {low}-{high}"
    else:
        why_py = f"the newest CPython in the wheels' {low}-{high} that a known base image ships"
    py_conf: Confidence = "uncertain" if "[?]" in v.python_source else "verified"
    py_source = v.python_source
    if py_conf == "uncertain" and v.python_seen(s.torch, s.python):
        py_conf = "verified"
        why_py += f"; a cp{s.python.replace('.', '')} wheel file of it has been seen"
        py_source = v.python_files_source
    picks.append(Pick("python", s.python, why_py, table.cite(py_source), py_conf))
    picks.append(
        Pick(
            "base_image",
            s.base_image,
            f"ships Python {s.python} ({s.distro})"
            if entry is not None
            else "asked for (--base-image); not a base image the table knows",
            table.cite(entry.source) if entry else "--base-image",
            "verified" if entry is not None else "uncertain",
        )
    )
    numpy, why_np = numpy_spec(c.release, s.python, table)
    picks.append(
        Pick("numpy", numpy, why_np, table.cite(c.release.numpy_source or "NP2"), "verified")
    )
    if s.override is not None:
        o = s.override
        picks.append(
            Pick(
                f"env.{HSA_OVERRIDE}",
                o.value,
                f"{arch} is not in the wheel; {o.value} runs {o.target} code ({o.status}). "
                + o.note,
                o.source,
                o.confidence,
            )
        )
    return tuple(picks)


def last_runnable(
    candidates: Sequence[Candidate], confidence: Callable[[Candidate], Confidence]
) -> str:
    """``torch X+variant`` of the newest candidate whose every fact is verified (the
    variant and the arch in it: ``confidence``), for an error saying which release could
    run the arch (an unconfirmed one only when no other is, and then marked so)."""
    rated = [(c, confidence(c)) for c in candidates]
    last, conf = next(((c, k) for c, k in reversed(rated) if k == "verified"), rated[-1])
    doubt = "" if conf == "verified" else f" ({conf})"
    return f"torch {last.version}+{last.variant.name}{doubt}"


def no_wheel_message(arch: str, table: CompatTable, platform: str = PLATFORMS[0]) -> str:
    info = table.arch_info(arch)
    what = f"{arch} ({info.family})" if info else arch
    if platform == "tegra":
        route = table.tegra
        text = (
            f"{what} is a Jetson (Tegra) GPU: the package index's torch wheels are built for "
            f"x86_64 and server arm64 (SBSA) CUDA and do not run on {tegra_scope(table, arch)}"
        )
        if route is not None:
            text += (
                f"; use {tegra_route(table, arch)} (source: "
                f"{table.cite(tegra_sources(table, arch))})"
            )
        return text
    text = f"no published torch wheel in the compatibility table runs {what}"
    if platform != PLATFORMS[0]:
        text += f" on {platform}"
    o = table.override_for(arch)
    if o is not None:
        text += f"; the {HSA_OVERRIDE}={o.value} override is {o.status} ({o.confidence}: {o.note})"
    elif platform != PLATFORMS[0] and any(
        v.covers(arch) for r in table.releases for v in r.variants
    ):
        text += f"; the {PLATFORMS[0]} wheels have code for it"
    else:
        text += "; no release the table knows ever had code for it (none could)"
    if info is not None and info.official:
        text += f"; official support: {info.official}"
    return text


def no_wheel_hint(arch: str, table: CompatTable, platform: str = PLATFORMS[0]) -> str:
    if platform == "tegra":
        route = table.tegra
        sbsa = route.running(arch, PLATFORMS[1]) if route is not None else None
        if sbsa is not None:
            return (
                f"on {sbsa.label}: envforge solve {arch} --platform {PLATFORMS[1]}; on an "
                "older JetPack install NVIDIA's Jetson wheels on an L4T base image"
            )
        return (
            "install NVIDIA's JetPack torch wheel on an L4T base image, or add a sourced "
            "Jetson row (platforms: tegra) in a knowledge overlay"
        )
    o = table.override_for(arch)
    if o is not None and o.status == "unreliable":
        return (
            f"a curated recipe may use the {o.status} override (envforge list), or use the cpu "
            "recipe"
        )
    return "use the cpu recipe, or build torch from source for this arch"


def last_covering(arch: str, table: CompatTable) -> str | None:
    found: str | None = None
    for r in table.releases:
        for v in r.variants:
            if v.covers(arch) and v.broken_arch(arch) is None:
                found = f"{r.versions[-1]}+{v.name}"
    return found
