"""The rules :func:`check` applies to a recipe, each with a stable id and its source.

Rule ids (stable; tests and users match on them):

==================  ==========================================================
vendor-variant      gpu.vendor and rocm/cuda disagree (amd+cuda, nvidia+rocm, none+either)
torch-release       torch.version is not a release the table knows
variant-published   the release publishes no wheels for the recipe's rocm/cuda/cpu variant
python-range        python is outside the variant's CPython range
local-version       torch.version's +local label names another variant than rocm/cuda
                    (a missing label is fine: the renderer adds the variant's label)
index-url           torch.index does not serve the variant (cpu: cpu index or none)
numpy-abi           numpy admits a NumPy the wheel breaks with (torch < 2.3 and NumPy 2)
numpy-python        numpy admits no NumPy release with a wheel for the recipe's python
arch-in-wheel       gpu.arch has no kernels in the wheel and no HSA_OVERRIDE_GFX_VERSION
                    maps it to an arch that has
arch-broken         the arch is compiled in but the bundled libraries cannot run it
                    (gfx906/gfx900 on ROCm >= 6.4)
hsa-override        HSA_OVERRIDE_GFX_VERSION is malformed, contradicts the table's mapping
                    for the arch, or points a natively supported arch elsewhere
override-known-bad  the override for this arch is known to fault or corrupt results
cuda-arch           the CUDA wheel has neither SASS nor PTX for the nvidia arch
tegra               the nvidia arch is a Jetson (Tegra) GPU: the package index's wheels do
                    not run on L4T/JetPack (NVIDIA's JetPack wheels do)
platform            the table has no row saying the variant publishes wheels for the
                    platform (--platform); ROCm wheels are linux/amd64 only
base-python         a base image the table knows ships another python3 than the recipe's
env-name            an env var name is not a POSIX shell name
==================  ==========================================================

Each verdict has a kind. ``impossible``: the table knows the combination cannot work (a
Python outside a known range, an arch known absent from the wheel, a NumPy the wheel
breaks with, a variant known unpublished, an index of the table's own root that serves
another variant); refused with exit 2. ``unknown``: the table has no row to decide by (a
torch release newer than or outside its rows, a variant newer than every one it knows, an
index outside the table's root such as a mirror or AMD's per-arch index); accepted with a
one-line warning and the recipe's effective confidence ``uncertain`` (certification
decides), refused like ``impossible`` under ``--strict`` / ``ENVFORGE_STRICT=1``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge.core.patterns import ENV_NAME_RE, STRICT_ENV, strict_from_env
from envforge.knowledge.arch_checks import (
    amd_arch,
    cuda_arch,
    no_row,
    platform_missing,
    tegra_arch,
)
from envforge.knowledge.compiled import load_table
from envforge.knowledge.pin_reasons import explain
from envforge.knowledge.table import (
    PLATFORMS,
    CompatTable,
    Release,
    Variant,
    base_version,
    local_label,
    py_tuple,
    series_of,
)
from envforge.knowledge.verdicts import HSA_OVERRIDE, Reason, VerdictKind, Violation, cite
from envforge.recipe.model import Recipe

__all__ = [
    "HSA_OVERRIDE",
    "STRICT_ENV",
    "Reason",
    "VerdictKind",
    "Violation",
    "check",
    "effective_confidence",
    "enforce",
    "explain",
    "split",
    "strict_from_env",
    "unknowns",
]


@functools.lru_cache(maxsize=1)
def _numpy_probes() -> tuple[Version, ...]:
    """NumPy versions probed to decide whether a specifier admits a breaking release: made
    on first use (1,920 versions cost more than the rest of this module's import, and only
    a release with a ``numpy_breaks`` bound needs them)."""
    return tuple(
        Version(f"{major}.{minor}.{micro}")
        for major in (1, 2, 3, 4)
        for minor in range(40)
        for micro in range(12)
    )


# --------------------------------------------------------------------------- check


def check(
    recipe: Recipe, table: CompatTable | None = None, *, platform: str | None = None
) -> list[Violation]:
    """Every rule the recipe breaks, most fundamental first; [] when it is consistent.

    ``platform`` (``linux/amd64`` when None) is where the wheels will run: its row of the
    variant decides the CPython range and the CUDA archs. Verdicts of kind ``unknown``
    are included (see :func:`split`)."""
    t = load_table() if table is None else table
    return list(_violations(recipe, t, platform or PLATFORMS[0]))


def split(
    found: Sequence[Violation], *, strict: bool = False
) -> tuple[list[Violation], list[Violation]]:
    """(refusals, warnings): unknown verdicts are warnings unless ``strict``."""
    refused = [v for v in found if strict or not v.unknown]
    warned = [v for v in found if not strict and v.unknown]
    return refused, warned


def unknowns(
    recipe: Recipe, table: CompatTable | None = None, *, platform: str | None = None
) -> list[Violation]:
    """What the table has no row for; non-empty means the recipe is ``uncertain``."""
    return [v for v in check(recipe, table, platform=platform) if v.unknown]


def effective_confidence(recipe: Recipe, table: CompatTable | None = None) -> str:
    """``uncertain`` when the table cannot decide the stack, else ``known``."""
    return "uncertain" if unknowns(recipe, table) else "known"


def enforce(
    recipe: Recipe,
    table: CompatTable | None = None,
    *,
    strict: bool | None = None,
    warn: Callable[[str], None] | None = None,
    platform: str | None = None,
) -> list[Violation]:
    """Raise the first refusal as a ConstraintViolation (exit 2); warn about each unknown
    verdict accepted (one line each, on stderr unless ``warn`` is given) and return them.
    ``strict`` None: from ``ENVFORGE_STRICT``; strict turns unknown into refusal."""
    strict = strict_from_env() if strict is None else strict
    refused, warned = split(check(recipe, table, platform=platform), strict=strict)
    if refused:
        first = refused[0]
        if len(refused) > 1:
            first = replace(first, message=f"{first.message} (and {len(refused) - 1} more)")
        raise first.error(recipe.origin)
    say = _stderr if warn is None else warn
    for v in warned:
        say(v.warning(recipe.origin))
    return warned


def _stderr(line: str) -> None:
    sys.stderr.write(f"envforge: warning: {line}\n")
    sys.stderr.flush()


def _violations(recipe: Recipe, t: CompatTable, platform: str) -> Iterator[Violation]:
    vendor = list(_vendor_variant(recipe))
    yield from vendor
    release = t.release(recipe.torch.version)
    published = None if release is None else release.variant(recipe.accelerator)
    if release is None:
        yield _unknown_release(recipe, t)
    elif published is None:
        yield _unpublished(recipe, release, t)
    else:
        tegra = list(tegra_arch(recipe, published, t, platform))
        yield from tegra
        variant = published.for_platform(platform)
        if variant is None:
            yield platform_missing(recipe, published, platform, t)
        elif not tegra:
            yield from _python_range(recipe, variant, t)
            if not vendor and recipe.gpu.vendor == "amd" and variant.kind == "rocm":
                yield from amd_arch(recipe, variant, t)
            elif not vendor and recipe.gpu.vendor == "nvidia" and variant.kind == "cuda":
                yield from cuda_arch(recipe, variant, t, platform)
        yield from _numpy(recipe, release, t)
        yield from _local_version(recipe, published)
        yield from _index_url(recipe, published, t)
    yield from _numpy_python(recipe, t)
    yield from _base_python(recipe, t)
    yield from _env_names(recipe)
    yield from no_row(recipe, t)


def _env_names(recipe: Recipe) -> Iterator[Violation]:
    for e in recipe.env:
        if not ENV_NAME_RE.match(e.name):
            yield Violation(
                "env-name",
                f"env var name {e.name!r} is not a valid shell name",
                "POSIX.1-2017 XBD 8.1 / 3.235 (names: letters, digits, '_', no leading digit)",
                "rename it with letters, digits and '_', not starting with a digit",
            )


def _base_python(recipe: Recipe, t: CompatTable) -> Iterator[Violation]:
    entry = t.base_image(recipe.base_image)
    if entry is None or entry.python == recipe.python:
        return
    alt = next((b for b in t.base_images if b.python == recipe.python), None)
    hint = f'set python: "{entry.python}"'
    if alt is not None:
        example = alt.match[0].rstrip("*")
        hint += f" or base_image: {example} ({alt.distro} ships {recipe.python})"
    yield Violation(
        "base-python",
        f"base image {recipe.base_image} ({entry.distro}) ships Python {entry.python}, "
        f"not {recipe.python}",
        cite(t, entry.source, entry.origin),
        hint,
    )


def _vendor_variant(recipe: Recipe) -> Iterator[Violation]:
    vendor = recipe.gpu.vendor
    evidence = "envforge recipe format: amd needs rocm, nvidia needs cuda, none neither"
    if vendor == "amd" and (recipe.cuda or not recipe.rocm):
        what = f"CUDA {recipe.cuda} wheels" if recipe.cuda else "no ROCm variant (CPU wheels)"
        yield Violation(
            "vendor-variant",
            f"an amd recipe ({recipe.gpu.arch}) asks for {what}",
            evidence,
            'remove cuda and set rocm, e.g. rocm: "6.2"',
        )
    elif vendor == "nvidia" and (recipe.rocm or not recipe.cuda):
        what = f"ROCm {recipe.rocm} wheels" if recipe.rocm else "no CUDA variant (CPU wheels)"
        yield Violation(
            "vendor-variant",
            f"an nvidia recipe ({recipe.gpu.arch}) asks for {what}",
            evidence,
            'remove rocm and set cuda, e.g. cuda: "12.6"',
        )
    elif vendor == "none" and (recipe.rocm or recipe.cuda):
        which = f"rocm {recipe.rocm}" if recipe.rocm else f"cuda {recipe.cuda}"
        yield Violation(
            "vendor-variant",
            f"a recipe with gpu.vendor none asks for {which}",
            evidence,
            "remove rocm/cuda for a CPU recipe, or set gpu.vendor and gpu.arch",
        )


def _newest_series(t: CompatTable) -> str | None:
    return max((r.series for r in t.releases), key=Version, default=None)


def _unknown_release(recipe: Recipe, t: CompatTable) -> Violation:
    version = recipe.torch.version
    series = t.series(series_of(version))
    newest = _newest_series(t)
    if series is not None and series.series != newest:
        # Patch releases are made for the newest series only: a version the row of an
        # older series does not list was never published.
        return Violation(
            "torch-release",
            f"torch {version} is not a release the compatibility table knows",
            cite(t, "TI; PV; PYPI", series.origin),
            f"torch {series.series} releases: {', '.join(series.versions)}",
        )
    known = t.known_versions
    if series is not None:
        what = f"a torch {series.series} release the table does not list yet"
        hint = f"torch {series.series} releases it lists: {', '.join(series.versions)}"
    else:
        what = "a torch release the compatibility table has no row for"
        hint = (
            f"add its row in an overlay (envforge knowledge refresh -o FILE), or use a "
            f"known release ({known[0]} ... {known[-1]})"
        )
    return Violation(
        "torch-release",
        f"torch {version} is {what}",
        cite(t, "TI; PV; PYPI", t.layers[0]),
        hint,
        kind="unknown",
    )


def _variant_version(name: str) -> Version | None:
    digits = name[len("rocm") :] if name.startswith("rocm") else name[len("cu") :]
    if name.startswith("cu") and len(digits) >= 2:
        digits = f"{digits[:-1]}.{digits[-1]}"
    try:
        return Version(digits)
    except InvalidVersion:
        return None


def _variant_unknown(recipe: Recipe, release: Release, t: CompatTable) -> bool:
    """The table has no row to decide whether ``release`` publishes the variant: every
    variant of the release is uncertain, or its variants of the same kind (ROCm, CUDA)
    include an uncertain one (the list is not confirmed), or the variant is newer than
    every one of its kind the table knows and the release is the newest series."""
    name = recipe.accelerator
    if all(v.confidence == "uncertain" for v in release.variants):
        return True
    if name == "cpu":
        return False
    kind = "rocm" if name.startswith("rocm") else "cu"
    if any(v.confidence == "uncertain" for v in release.variants if v.name.startswith(kind)):
        return True  # the release's list of this kind is not confirmed
    if release.series != _newest_series(t):
        return False
    mine = _variant_version(name)
    known = [
        _variant_version(v.name) for r in t.releases for v in r.variants if v.name.startswith(kind)
    ]
    return mine is not None and all(v is not None and v < mine for v in known)


def _variant_hint(recipe: Recipe, release: Release, t: CompatTable) -> str:
    kind = "rocm" if recipe.rocm else "cuda" if recipe.cuda else "cpu"
    same_kind = [v for v in release.variants if v.kind == kind]
    parts = []
    if same_kind and kind != "cpu":
        sure = [v for v in same_kind if v.confidence != "uncertain"] or same_kind
        latest = sure[-1]
        parts.append(
            f'set {kind}: "{latest.version}" (torch {release.series} publishes '
            f"{', '.join(v.name for v in same_kind)})"
        )
    others = t.releases_with(recipe.accelerator)
    if others:
        series = ", ".join(r.series for r in others)
        parts.append(f"or a torch release that publishes {recipe.accelerator}: {series}")
    return " ".join(parts) or f"published variants: {', '.join(release.variant_names)}"


def _unpublished(recipe: Recipe, release: Release, t: CompatTable) -> Violation:
    version = base_version(recipe.torch.version)
    if _variant_unknown(recipe, release, t):
        return Violation(
            "variant-published",
            f"the table has no row for {recipe.accelerator} wheels of torch {version} "
            f"(its rows: {', '.join(release.variant_names)})",
            cite(t, release.source, release.origin),
            _variant_hint(recipe, release, t),
            kind="unknown",
        )
    return Violation(
        "variant-published",
        f"torch {version} publishes no {recipe.accelerator} wheels "
        f"(published: {', '.join(release.variant_names)})",
        cite(t, release.source, release.origin),
        _variant_hint(recipe, release, t),
    )


def _python_range(recipe: Recipe, variant: Variant, t: CompatTable) -> Iterator[Violation]:
    version = recipe.torch.version
    if variant.admits_python(recipe.python, version):
        return
    low, high = variant.python_range(version)
    nearest = high if py_tuple(recipe.python) > py_tuple(high) else low
    yield Violation(
        "python-range",
        f"torch {base_version(version)}+{variant.name} publishes wheels for CPython "
        f"{low}-{high}, not {recipe.python}",
        cite(t, variant.python_source, variant.origin),
        f'set python: "{nearest}"',
    )


def _local_version(recipe: Recipe, variant: Variant) -> Iterator[Violation]:
    version = recipe.torch.version
    label = local_label(version)
    base = base_version(version)
    if label is not None and label != variant.name:
        yield Violation(
            "local-version",
            f"torch.version {version} names the {label} build but the recipe asks for "
            f"{variant.name}",
            "PEP 440 local version labels; download.pytorch.org wheel names",
            f'write torch.version: "{base}{variant.local}"',
        )


def _known_index(url: str, t: CompatTable) -> bool:
    """An index of the table's own root (``index_root`` or a variant's ``index``)."""
    root = t.index_root.rstrip("/")
    if url == root or url.startswith(root + "/"):
        return True
    return any(v.index == url for r in t.releases for v in r.variants)


def _index_url(recipe: Recipe, variant: Variant, t: CompatTable) -> Iterator[Violation]:
    index = recipe.torch.index
    evidence = cite(t, f"PV; {variant.source}", variant.origin)
    if index is None:
        if variant.kind == "cpu":
            return
        if variant.pypi_default and local_label(recipe.torch.version) is None:
            return
        yield Violation(
            "index-url",
            f"torch.index is not set, but the {variant.name} wheels of torch "
            f"{base_version(recipe.torch.version)} are only on {variant.index}",
            evidence,
            f"set torch.index: {variant.index}",
        )
        return
    wanted = index.rstrip("/")
    if wanted != variant.index and not _known_index(wanted, t):
        yield Violation(
            "index-url",
            f"torch.index {index} is an index the table has no row for (the table's "
            f"{variant.name} wheels of torch {base_version(recipe.torch.version)} are on "
            f"{variant.index})",
            evidence,
            f"set torch.index: {variant.index}, or keep it if it mirrors that index "
            "(ENVFORGE_INDEX_MIRROR rewrites the original at render time instead)",
            kind="unknown",
        )
        return
    if wanted != variant.index:
        yield Violation(
            "index-url",
            f"torch.index {index} does not serve the {variant.name} wheels of torch "
            f"{base_version(recipe.torch.version)} (they are on {variant.index})",
            evidence,
            f"set torch.index: {variant.index}",
        )


def _numpy(recipe: Recipe, release: Release, t: CompatTable) -> Iterator[Violation]:
    if release.numpy_breaks is None:
        return
    breaks = SpecifierSet(release.numpy_breaks)
    wanted = SpecifierSet(recipe.numpy)
    bad = next((v for v in _numpy_probes() if v in breaks and wanted.contains(v)), None)
    if bad is None:
        return
    spec = recipe.numpy.strip()
    fix = '"<2"' if not spec else f'"{spec},<2"'
    yield Violation(
        "numpy-abi",
        f"numpy {spec or '(any)'!s} admits NumPy {bad}, but torch "
        f"{base_version(recipe.torch.version)} wheels are built against the NumPy 1.x ABI "
        f"and fail with NumPy {release.numpy_breaks.lstrip('<>=!~ ')}+ (_ARRAY_API not found)",
        cite(t, release.numpy_source, release.origin),
        f"set numpy: {fix}",
    )


def _numpy_python(recipe: Recipe, t: CompatTable) -> Iterator[Violation]:
    if not t.numpy_releases:
        return
    wanted = SpecifierSet(recipe.numpy)
    available = t.numpy_installable(recipe.python)
    if any(wanted.contains(v) for v in available):
        return
    series = [n.series for n in t.numpy_releases if n.installable(recipe.python)]
    if series:
        hint = f"NumPy {series[0]}-{series[-1]} have wheels for Python {recipe.python}"
        release = t.release(recipe.torch.version)
        if release is not None and release.numpy_breaks is not None:
            hint += " (this torch needs numpy<2)"
    else:
        hint = f"no NumPy release the table knows has wheels for Python {recipe.python}"
    yield Violation(
        "numpy-python",
        f"numpy {recipe.numpy} admits no NumPy release with a wheel for CPython {recipe.python}",
        f"{t.numpy_source} [{_numpy_origin(t, recipe.python)}]",
        hint,
    )


def _numpy_origin(t: CompatTable, python: str) -> str:
    files = dict.fromkeys(n.origin for n in t.numpy_releases if n.installable(python))
    return ", ".join(files) or t.layers[0]
