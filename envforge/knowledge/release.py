"""Release rows of the compatibility table: a torch series and its wheel variants.

:func:`read_release` validates one merged release row (the release-level keys and the
variant rows, each read by the layer it came from) into a
:class:`~envforge.knowledge.table.Release`. ROCm variants take their arch lists from the
``rocm_archs`` / ``rocm_broken`` rows; CUDA variants list their SASS (``sm``) and PTX.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from envforge.core.patterns import SM_RE
from envforge.knowledge.rows import (
    ArchRule,
    BrokenRule,
    Check,
    Row,
    read_checked,
    read_python_exceptions,
)
from envforge.knowledge.table import (
    INDEX_FORMS,
    PLATFORMS,
    BrokenArch,
    IndexForm,
    Kind,
    PlatformBuild,
    Release,
    Variant,
    py_tuple,
    series_of,
)

_VARIANT_RE = re.compile(r"^(rocm[0-9]+(\.[0-9]+)+|cu[0-9]{3}|cpu)\Z", re.ASCII)
_RELEASE_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+\Z", re.ASCII)

RELEASE_KEYS = (
    "series",
    "versions",
    "python",
    "python_source",
    "numpy_breaks",
    "numpy_source",
    "source",
    "note",
    "variants",
    "checked",
)
RELEASE_REQUIRED = ("series", "versions", "python", "python_source", "source", "variants")
VARIANT_KEYS = (
    "name",
    "form",
    "python",
    "python_source",
    "python_exceptions",
    "index",
    "confidence",
    "source",
    "note",
    "pypi_default",
    "sm",
    "sm_source",
    "sm_confidence",
    "ptx",
    "platforms",
    "python_files",
    "python_files_source",
    "arch_confidence",
)
_PLATFORM_KEYS = ("sm", "ptx", "sm_source", "sm_confidence", "python", "python_source")


@dataclass(frozen=True)
class _Context:
    """What every variant of one release is read against."""

    series: str
    versions: tuple[str, ...]
    torch: Version
    form_default: IndexForm
    python: tuple[str, str, str]
    index_root: str
    rocm_caveat: str
    arch_rules: Sequence[ArchRule]
    broken_rules: Sequence[BrokenRule]


@dataclass(frozen=True)
class _Archs:
    """A variant's arch facts (empty for cpu)."""

    archs: tuple[str, ...] = ()
    uncertain: tuple[str, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()
    origins: tuple[tuple[str, str], ...] = ()
    broken: tuple[BrokenArch, ...] = ()
    ptx: str | None = None


def read_release(
    c: Check,
    raw: object,
    path: str,
    *,
    variants: Sequence[Row],
    index_root: str,
    rocm_caveat: str,
    arch_rules: Sequence[ArchRule],
    broken_rules: Sequence[BrokenRule],
) -> Release:
    body = c.mapping(raw, path, RELEASE_KEYS, RELEASE_REQUIRED)
    series = c.text(body["series"], f"{path}.series")
    versions = c.texts(body["versions"], f"{path}.versions")
    for ver in versions:
        if series_of(ver) != series or not _RELEASE_VERSION_RE.match(ver):
            raise c.fail(f"{path}.versions", f"{ver!r} is not a {series}.N version")
    py_min, py_max = c.python(body["python"], f"{path}.python")
    py_source = c.text(body["python_source"], f"{path}.python_source")
    breaks, numpy_source = _numpy(c, body, path)
    torch_v = Version(series)
    ctx = _Context(
        series=series,
        versions=versions,
        torch=torch_v,
        form_default="extra-index-url" if torch_v < Version("2.0") else "index-url",
        python=(py_min, py_max, py_source),
        index_root=index_root,
        rocm_caveat=rocm_caveat,
        arch_rules=arch_rules,
        broken_rules=broken_rules,
    )
    release_source = c.text(body["source"], f"{path}.source")
    checked = read_checked(c, body.get("checked"), f"{path}.checked")
    release_origin = c.source
    release_note = c.opt_str(body.get("note"), f"{path}.note")
    if not variants:
        raise c.fail(f"{path}.variants", "expected a non-empty list")
    return Release(
        series=series,
        versions=versions,
        python_min=py_min,
        python_max=py_max,
        numpy_breaks=breaks,
        numpy_source=numpy_source,
        source=release_source,
        variants=tuple(_variant(row, ctx) for row in variants),
        note=release_note,
        checked=checked,
        origin=release_origin,
    )


def _numpy(c: Check, body: Mapping[str, Any], path: str) -> tuple[str | None, str]:
    breaks = body.get("numpy_breaks")
    if breaks is not None:
        try:
            SpecifierSet(c.text(breaks, f"{path}.numpy_breaks"))
        except InvalidSpecifier:
            raise c.fail(f"{path}.numpy_breaks", f"{breaks!r} is not a specifier") from None
    numpy_source = c.opt_str(body.get("numpy_source"), f"{path}.numpy_source")
    if breaks is not None and not numpy_source:
        raise c.fail(f"{path}.numpy_source", "missing (numpy_breaks needs a source)")
    return breaks, numpy_source


def _variant(row: Row, ctx: _Context) -> Variant:
    c, vpath, v = row.c, row.path, row.raw
    name = c.text(v["name"], f"{vpath}.name")
    if not _VARIANT_RE.match(name):
        raise c.fail(f"{vpath}.name", f"{name!r} is not rocmX.Y[.Z], cuXYZ or cpu")
    kind: Kind = "rocm" if name.startswith("rocm") else "cuda" if name.startswith("cu") else "cpu"
    form = v.get("form", ctx.form_default)
    if form not in INDEX_FORMS:
        raise c.fail(f"{vpath}.form", f"{form!r} is not one of {INDEX_FORMS}")
    if form != ctx.form_default:
        raise c.fail(f"{vpath}.form", f"torch {ctx.series} wheels use --{ctx.form_default}")
    vmin, vmax, vsource = _variant_python(row, kind, ctx)
    if kind == "rocm":
        a = _rocm_archs(row, name, ctx)
    elif kind == "cuda":
        a = _cuda_archs(row)
    elif v.get("sm") is not None:
        raise c.fail(f"{vpath}.sm", "a cpu variant has no GPU archs")
    else:
        a = _Archs()
    pypi_default = v.get("pypi_default", False)
    if not isinstance(pypi_default, bool):
        raise c.fail(f"{vpath}.pypi_default", "expected true or false")
    return Variant(
        name=name,
        kind=kind,
        series=ctx.series,
        python_min=vmin,
        python_max=vmax,
        python_source=vsource,
        index=c.text(v.get("index", f"{ctx.index_root}/{name}"), f"{vpath}.index").rstrip("/"),
        form=form,
        archs=a.archs,
        archs_uncertain=a.uncertain,
        arch_sources=a.sources,
        broken=a.broken,
        ptx=a.ptx,
        pypi_default=pypi_default,
        confidence=c.confidence(v.get("confidence", "verified"), f"{vpath}.confidence"),
        source=c.text(v["source"], f"{vpath}.source"),
        note=c.opt_str(v.get("note"), f"{vpath}.note"),
        python_exceptions=read_python_exceptions(
            c, v.get("python_exceptions"), f"{vpath}.python_exceptions"
        ),
        origin=c.source,
        arch_origins=a.origins,
        platforms=_platforms(row, kind, (vmin, vmax, vsource)),
        **_python_files(row, ctx, (vmin, vmax)),
    )


def _python_files(row: Row, ctx: _Context, python: tuple[str, str]) -> dict[str, Any]:
    """``python_files: {"2.14.1": ["3.12"]}`` (CPythons whose wheel file of the variant was
    seen, per torch version of the series) and its ``python_files_source``."""
    c, vpath, v = row.c, row.path, row.raw
    raw = v.get("python_files")
    if raw is None:
        if v.get("python_files_source") is not None:
            raise c.fail(f"{vpath}.python_files_source", "given without python_files")
        return {}
    path = f"{vpath}.python_files"
    body = c.mapping(raw, path, list(ctx.versions))
    out: list[tuple[str, tuple[str, ...]]] = []
    for version, pythons in body.items():
        seen = c.texts(pythons, f"{path}.{version}")
        for py in seen:
            if not re.fullmatch(r"3\.\d{1,2}", py):
                raise c.fail(f"{path}.{version}", f"{py!r} is not a CPython like 3.12")
            if not py_tuple(python[0]) <= py_tuple(py) <= py_tuple(python[1]):
                raise c.fail(f"{path}.{version}", f"{py} is outside the variant's CPython range")
        out.append((str(version), seen))
    source = c.text(v.get("python_files_source"), f"{vpath}.python_files_source")
    return {"python_files": tuple(out), "python_files_source": source}


def _variant_python(row: Row, kind: Kind, ctx: _Context) -> tuple[str, str, str]:
    """The variant's CPython range and its source (the release's unless it sets one)."""
    c, vpath, v = row.c, row.path, row.raw
    if v.get("python") is not None:
        vmin, vmax = c.python(v["python"], f"{vpath}.python")
        return vmin, vmax, c.text(v.get("python_source"), f"{vpath}.python_source")
    py_min, py_max, py_source = ctx.python
    if v.get("python_source") is not None:
        own = c.text(v["python_source"], f"{vpath}.python_source")
        return py_min, py_max, own + "; " + py_source
    if kind == "rocm" and ctx.rocm_caveat:
        return py_min, py_max, f"{py_source}; {ctx.rocm_caveat}"
    return py_min, py_max, py_source


def _rocm_archs(row: Row, name: str, ctx: _Context) -> _Archs:
    c, vpath, v = row.c, row.path, row.raw
    if v.get("sm") is not None or v.get("ptx") is not None:
        raise c.fail(f"{vpath}.sm", "ROCm variants take their archs from rocm_archs")
    # arch_confidence: how sure the table is that this variant's wheels carry the archs
    # the rocm_archs rows give it (uncertain: read from another branch than the release's)
    every_uncertain = (
        c.confidence(v.get("arch_confidence", "verified"), f"{vpath}.arch_confidence")
        == "uncertain"
    )
    rocm_v = Version(name[len("rocm") :])
    a_list: list[str] = []
    a_unc: list[str] = []
    a_src: list[tuple[str, str]] = []
    a_origin: list[tuple[str, str]] = []
    for rule in ctx.arch_rules:
        torch_ok = rule.torch_min is None or ctx.torch >= rule.torch_min
        below_ok = rule.rocm_below is None or rocm_v < rule.rocm_below
        if not (rocm_v >= rule.rocm_min and torch_ok and below_ok):
            continue
        for arch in rule.archs:
            a_list.append(arch)
            a_src.append((arch, rule.source))
            a_origin.append((arch, rule.origin))
            if rule.confidence == "uncertain" or every_uncertain:
                a_unc.append(arch)
    if not a_list:
        raise c.fail(vpath, f"no rocm_archs row covers {name}")
    broken = tuple(
        BrokenArch(
            arch=a,
            reason=b.reason,
            source=b.source,
            confidence=b.confidence,
            origin=b.origin,
        )
        for b in ctx.broken_rules
        if rocm_v >= b.rocm_min
        for a in b.archs
        if a in a_list
    )
    return _Archs(tuple(a_list), tuple(a_unc), tuple(a_src), tuple(a_origin), broken)


def _cuda_archs(row: Row) -> _Archs:
    c, vpath, v = row.c, row.path, row.raw
    if v.get("arch_confidence") is not None:
        raise c.fail(f"{vpath}.arch_confidence", "a CUDA variant says sm_confidence")
    sm = c.texts(v.get("sm"), f"{vpath}.sm")
    for s in sm:
        if not SM_RE.match(s):
            raise c.fail(f"{vpath}.sm", f"{s!r} is not like sm_86")
    sm_source = c.text(v.get("sm_source"), f"{vpath}.sm_source")
    sm_conf = c.confidence(v.get("sm_confidence", "verified"), f"{vpath}.sm_confidence")
    ptx: str | None = None
    if v.get("ptx") is not None:
        ptx = c.text(v["ptx"], f"{vpath}.ptx")
        if not SM_RE.match(ptx):
            raise c.fail(f"{vpath}.ptx", f"{ptx!r} is not like sm_120")
    return _Archs(
        archs=sm,
        uncertain=sm if sm_conf == "uncertain" else (),
        sources=tuple((s, sm_source) for s in sm),
        ptx=ptx,
    )


def _platforms(row: Row, kind: Kind, python: tuple[str, str, str]) -> tuple[PlatformBuild, ...]:
    """``platforms: {linux/arm64: {sm, ptx, sm_source, python, python_source}}``: the
    variant's wheels for another platform (the row's own facts are linux/amd64's)."""
    c, vpath, v = row.c, row.path, row.raw
    raw = v.get("platforms")
    if raw is None:
        return ()
    body = c.mapping(raw, f"{vpath}.platforms", [*PLATFORMS[1:], "tegra"])
    out: list[PlatformBuild] = []
    for name, entry_raw in body.items():
        path = f"{vpath}.platforms.{name}"
        entry = c.mapping(entry_raw, path, _PLATFORM_KEYS, ("python_source",))
        if kind == "rocm":
            raise c.fail(path, "ROCm wheels are built for linux/amd64 only")
        archs = _Archs()
        if kind == "cuda":
            archs = _cuda_archs(Row(c, path, entry))
        elif entry.get("sm") is not None:
            raise c.fail(f"{path}.sm", "a cpu variant has no GPU archs")
        own = c.text(entry["python_source"], f"{path}.python_source")
        low, high = python[0], python[1]
        if entry.get("python") is not None:
            low, high = c.python(entry["python"], f"{path}.python")
        out.append(
            PlatformBuild(
                platform=str(name),
                archs=archs.archs,
                ptx=archs.ptx,
                arch_source=archs.sources[0][1] if archs.sources else "",
                arch_uncertain=bool(archs.uncertain),
                python_min=low,
                python_max=high,
                python_source=own,
            )
        )
    return tuple(out)
