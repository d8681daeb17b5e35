"""Read and validate the compatibility table (``envforge/data/compat.yaml``).

The file is read by the one YAML reader (:mod:`envforge.yamlcheck`: size, depth,
duplicate keys, line numbers); this module checks its schema and builds the frozen
values of :mod:`envforge.knowledge.table`. Every refusal is a
:class:`~envforge.errors.TableError` naming the file and key path
(``releases[3].variants[0].confidence``).
"""

from __future__ import annotations

import datetime
import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge import yamlcheck
from envforge.arch import gfx_from_isa
from envforge.errors import DataFileError, TableError
from envforge.knowledge.table import (
    INDEX_FORMS,
    OVERRIDE_STATUSES,
    ArchInfo,
    BaseImage,
    BrokenArch,
    CompatTable,
    DriverFloor,
    IndexForm,
    Kind,
    NumpyRelease,
    Override,
    PciProduct,
    PythonException,
    Release,
    Variant,
    py_tuple,
    series_of,
)
from envforge.patterns import CONFIDENCES, GFX_RE, PYTHON_RE, SM_RE, Confidence
from envforge.resources import data_file

_VARIANT_RE = re.compile(r"^(rocm[0-9]+(\.[0-9]+)+|cu[0-9]{3}|cpu)\Z", re.ASCII)
_RELEASE_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+\Z", re.ASCII)


class _Check(yamlcheck.Reader):
    """The table flavour of the one YAML reader: strict strings, non-empty lists."""

    def __init__(self, where: str, text: str | None = None) -> None:
        super().__init__(where, TableError, top="(top)")
        self._text = text

    def fail(self, path: str, message: str, hint: str | None = None) -> DataFileError:
        line = None if self._text is None else yamlcheck.line_of(self._text, path)
        where = path if line is None else f"{path} (line {line})"
        return super().fail(where, message, hint)

    def texts(self, value: object, path: str, *, non_empty: bool = True) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a non-empty list, got {yamlcheck.kind(value)}")
        return super().texts(value, path, non_empty=non_empty)

    def opt_str(self, value: object, path: str) -> str:
        return "" if value is None else self.text(value, path)

    def python(self, value: object, path: str) -> tuple[str, str]:
        pair = self.texts(value, path)
        if len(pair) != 2 or not all(PYTHON_RE.match(p) for p in pair):
            raise self.fail(path, f"expected [\"3.X\", \"3.Y\"], got {value!r}")
        if py_tuple(pair[0]) > py_tuple(pair[1]):
            raise self.fail(path, "minimum above maximum")
        return pair[0], pair[1]

    def confidence(self, value: object, path: str) -> Confidence:
        return self.choice(value, path, CONFIDENCES)

    def gfx(self, value: str, path: str) -> str:
        if not GFX_RE.match(value):
            raise self.fail(path, f"{value!r} is not a gfx arch")
        return value

    def version(self, value: object, path: str) -> Version:
        try:
            return Version(self.text(value, path))
        except InvalidVersion:
            raise self.fail(path, f"{value!r} is not a version") from None


_RELEASE_KEYS = (
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
_RELEASE_REQUIRED = ("series", "versions", "python", "python_source", "source", "variants")
_VARIANT_KEYS = (
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
)
_TOP_KEYS = (
    "schema",
    "sources",
    "index_root",
    "sm_lists",
    "releases",
    "rocm_archs",
    "rocm_broken",
    "hsa_overrides",
    "amd_archs",
    "nvidia_archs",
    "nvidia_driver_floor",
    "base_images",
    "numpy_releases",
    "rocm_python_caveat",
    "amd_pci_ids",
    "nvidia_model_names",
)


@dataclass(frozen=True)
class _ArchRule:
    archs: tuple[str, ...]
    rocm_min: Version
    torch_min: Version | None
    confidence: Confidence
    source: str
    rocm_below: Version | None = None
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class _BrokenRule:
    archs: tuple[str, ...]
    rocm_min: Version
    reason: str
    confidence: Confidence
    source: str
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class _Row:
    """One row of one layer: its reader (names the file), key path and raw value."""

    c: _Check
    path: str
    raw: Any


def parse_table(data: object, where: str = "compat.yaml") -> CompatTable:
    """Validate raw YAML data into a :class:`CompatTable` (raises :class:`TableError`)."""
    return parse_layers([(where, data)])


def parse_layers(
    layers: Sequence[tuple[str, object]], texts: Sequence[str | None] = ()
) -> CompatTable:
    """Merge table layers (the shipped table first, then overlays) into one table.

    Row identity (an overlay row with the same identity replaces the earlier row, any
    other row is added): ``sources`` by key; ``releases`` by ``series`` (the overlay's
    release-level keys replace the earlier row's, its ``variants`` merge by ``name``);
    ``rocm_archs`` / ``rocm_broken`` by (``archs``, ``rocm_min``); ``hsa_overrides`` by
    arch; ``nvidia_driver_floor`` by ``cuda_major``; ``base_images`` by ``distro``;
    ``numpy_releases.series`` by ``series``; ``amd_archs`` / ``nvidia_archs``,
    ``amd_pci_ids`` and ``nvidia_model_names`` by arch; ``index_root``,
    ``rocm_python_caveat`` and ``numpy_releases.source``: the last layer that sets them.
    ``texts`` (optional, per layer) lets a refusal name the line of the key.
    """
    tops: list[tuple[_Check, dict[str, Any]]] = []
    for n, (where, data) in enumerate(layers):
        c = _Check(where, texts[n] if n < len(texts) else None)
        required = ("schema", "sources", "index_root", "releases") if n == 0 else ("schema",)
        top = c.mapping(data, "(top)", _TOP_KEYS, required)
        if top["schema"] != 1:
            raise c.fail("schema", "only schema 1 is understood")
        tops.append((c, top))

    sources: dict[str, str] = {}
    index_root = ""
    rocm_caveat = ""
    for c, top in tops:
        if top.get("sources") is not None:
            raw_sources = c.mapping(top["sources"], "sources", list(top["sources"] or {}))
            for k, v in raw_sources.items():
                sources[str(k)] = c.text(v, f"sources.{k}")
        if top.get("index_root") is not None:
            index_root = c.text(top["index_root"], "index_root").rstrip("/")
        if top.get("rocm_python_caveat") is not None:
            rocm_caveat = c.opt_str(top.get("rocm_python_caveat"), "rocm_python_caveat")

    arch_rules_by: dict[tuple[tuple[str, ...], Version], _ArchRule] = {}
    broken_by: dict[tuple[tuple[str, ...], Version], _BrokenRule] = {}
    for c, top in tops:
        for i, item in _items(c, top, "rocm_archs"):
            rule = _arch_rule(c, item, i)
            arch_rules_by[(tuple(sorted(rule.archs)), rule.rocm_min)] = rule
        for i, item in _items(c, top, "rocm_broken"):
            brule = _broken_rule(c, item, i)
            broken_by[(tuple(sorted(brule.archs)), brule.rocm_min)] = brule
    arch_rules = tuple(arch_rules_by.values())
    broken_rules = tuple(broken_by.values())

    # releases by series; within a release, variants by name
    rel_rows: dict[str, tuple[_Row, dict[str, Any]]] = {}
    var_rows: dict[str, dict[str, _Row]] = {}
    for n, (c, top) in enumerate(tops):
        seen_here: set[str] = set()
        for i, raw in _items(c, top, "releases"):
            path = f"releases[{i}]"
            c.mapping(raw, path, _RELEASE_KEYS)
            series = c.text(raw.get("series"), f"{path}.series")
            known = series in rel_rows
            if series in seen_here:
                raise c.fail(f"{path}.series", f"series {series} listed twice")
            seen_here.add(series)
            rel_required: tuple[str, ...] = () if known and n else _RELEASE_REQUIRED
            body = c.mapping(raw, path, _RELEASE_KEYS, rel_required)
            variants_raw = body.get("variants")
            merged = {**rel_rows[series][1], **body} if known and n else dict(body)
            release_keys_here = set(body) - {"series", "variants"}
            keep = known and n and not release_keys_here
            rel_rows[series] = (rel_rows[series][0] if keep else _Row(c, path, raw), merged)
            table_vars = var_rows.setdefault(series, {}) if known and n else {}
            var_rows[series] = table_vars
            if variants_raw is None and known and n:
                continue
            if not isinstance(variants_raw, list) or not variants_raw:
                raise c.fail(f"{path}.variants", "expected a non-empty list")
            names_here: set[str] = set()
            for j, vraw in enumerate(variants_raw):
                vpath = f"{path}.variants[{j}]"
                v = c.mapping(vraw, vpath, _VARIANT_KEYS, ("name", "source"))
                name = c.text(v["name"], f"{vpath}.name")
                if name in names_here:
                    raise c.fail(f"{vpath}.name", f"{name} listed twice")
                names_here.add(name)
                table_vars[name] = _Row(c, vpath, v)

    releases: list[Release] = []
    seen_versions: set[str] = set()
    for series, (row, body) in rel_rows.items():
        release = _release(
            row.c,
            body,
            row.path,
            variants=list(var_rows[series].values()),
            index_root=index_root,
            rocm_caveat=rocm_caveat,
            arch_rules=arch_rules,
            broken_rules=broken_rules,
        )
        dup = seen_versions.intersection(release.versions)
        if dup:
            raise row.c.fail(f"{row.path}.versions", f"listed twice: {sorted(dup)}")
        seen_versions.update(release.versions)
        releases.append(release)
    releases.sort(key=lambda r: Version(r.series))

    overrides_by: dict[str, Override] = {}
    for c, top in tops:
        here: set[str] = set()
        for i, raw in _items(c, top, "hsa_overrides"):
            for o in _overrides(c, raw, f"hsa_overrides[{i}]"):
                if o.arch in here:
                    raise c.fail(f"hsa_overrides[{i}].archs", f"{o.arch} listed twice")
                here.add(o.arch)
                overrides_by[o.arch] = o

    floors: dict[int, DriverFloor] = {}
    images: dict[str, BaseImage] = {}
    numpy_by: dict[str, NumpyRelease] = {}
    numpy_source = ""
    amd_by: dict[str, ArchInfo] = {}
    nvidia_by: dict[str, ArchInfo] = {}
    for c, top in tops:
        for i, raw in _items(c, top, "nvidia_driver_floor"):
            floor = _floor(c, raw, f"nvidia_driver_floor[{i}]")
            floors[floor.cuda_major] = floor
        for i, raw in _items(c, top, "base_images"):
            image = _image(c, raw, f"base_images[{i}]")
            images[image.distro] = image
        found, src = _numpy_releases(c, top.get("numpy_releases"))
        numpy_source = src or numpy_source
        for nr in found:
            numpy_by[nr.series] = nr
        for a in _arch_infos(c, top.get("amd_archs"), "amd_archs", amd=True):
            amd_by[a.arch] = a
        for a in _arch_infos(c, top.get("nvidia_archs"), "nvidia_archs", amd=False):
            nvidia_by[a.arch] = a

    pci_by: dict[str, tuple[_Check, tuple[PciProduct, ...]]] = {}
    names_by: dict[str, tuple[_Check, tuple[tuple[str, str], ...]]] = {}
    for c, top in tops:
        for arch, items in _pci_ids(c, top.get("amd_pci_ids"), set(amd_by)).items():
            pci_by[arch] = (c, items)
        for arch, pairs in _model_names(c, top.get("nvidia_model_names"), set(nvidia_by)).items():
            names_by[arch] = (c, pairs)
    pci: list[PciProduct] = []
    for c, items in pci_by.values():
        for p in items:
            if any(q.device_id == p.device_id for q in pci):
                raise c.fail(f"amd_pci_ids.{p.arch}.0x{p.device_id:04x}", "listed twice")
            pci.append(p)
    model_pairs: list[tuple[str, str]] = []
    for c, pairs in names_by.values():
        for fragment, arch in pairs:
            if any(f.lower() == fragment.lower() for f, _ in model_pairs):
                raise c.fail(f"nvidia_model_names.{arch}", f"{fragment!r} listed twice")
            model_pairs.append((fragment, arch))

    return CompatTable(
        amd_pci_ids=tuple(pci),
        nvidia_model_names=tuple(sorted(model_pairs, key=lambda p: -len(p[0]))),
        numpy_releases=tuple(sorted(numpy_by.values(), key=lambda r: Version(r.series))),
        numpy_source=numpy_source,
        releases=tuple(releases),
        overrides=tuple(overrides_by.values()),
        driver_floors=tuple(floors.values()),
        base_images=tuple(images.values()),
        amd_archs=tuple(amd_by.values()),
        nvidia_archs=tuple(nvidia_by.values()),
        sources=tuple(sources.items()),
        index_root=index_root,
        layers=tuple(where for where, _ in layers),
    )


def _overrides(c: _Check, raw: object, path: str) -> list[Override]:
    body = c.mapping(
        raw,
        path,
        ("archs", "value", "status", "confidence", "note", "source"),
        ("archs", "value", "status", "confidence", "source"),
    )
    value = c.text(body["value"], f"{path}.value")
    target = gfx_from_isa(value)
    if target is None:
        raise c.fail(f"{path}.value", f"{value!r} is not an ISA version like 10.3.0")
    status = body["status"]
    if status not in OVERRIDE_STATUSES:
        raise c.fail(f"{path}.status", f"{status!r} is not one of {OVERRIDE_STATUSES}")
    out: list[Override] = []
    for arch in c.texts(body["archs"], f"{path}.archs"):
        if any(o.arch == arch for o in out):
            raise c.fail(f"{path}.archs", f"{arch} listed twice")
        out.append(
            Override(
                arch=c.gfx(arch, f"{path}.archs"),
                value=value,
                target=target,
                status=status,
                confidence=c.confidence(body["confidence"], f"{path}.confidence"),
                note=c.opt_str(body.get("note"), f"{path}.note"),
                source=c.text(body["source"], f"{path}.source"),
                origin=c.source,
            )
        )
    return out


def _floor(c: _Check, raw: object, path: str) -> DriverFloor:
    body = c.mapping(raw, path, ("cuda_major", "min", "confidence", "source"), ("min", "source"))
    major = body.get("cuda_major")
    if not isinstance(major, int) or isinstance(major, bool):
        raise c.fail(f"{path}.cuda_major", "expected an integer")
    return DriverFloor(
        cuda_major=int(major),
        min=c.text(body["min"], f"{path}.min"),
        confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
        source=c.text(body["source"], f"{path}.source"),
        origin=c.source,
    )


def _image(c: _Check, raw: object, path: str) -> BaseImage:
    body = c.mapping(
        raw,
        path,
        ("distro", "python", "match", "source", "note"),
        ("distro", "python", "match", "source"),
    )
    py = c.text(body["python"], f"{path}.python")
    if not PYTHON_RE.match(py):
        raise c.fail(f"{path}.python", f"{py!r} is not like 3.10")
    return BaseImage(
        distro=c.text(body["distro"], f"{path}.distro"),
        python=py,
        match=c.texts(body["match"], f"{path}.match"),
        source=c.text(body["source"], f"{path}.source"),
        origin=c.source,
    )


_PCI_ID_RE = re.compile(r"^0x[0-9a-f]{4}\Z", re.ASCII)


def _pci_ids(c: _Check, raw: object, known: set[str]) -> dict[str, tuple[PciProduct, ...]]:
    if raw is None:
        return {}
    body = c.mapping(raw, "amd_pci_ids", sorted(known))
    out: dict[str, tuple[PciProduct, ...]] = {}
    seen: set[int] = set()
    for arch, ids in body.items():
        path = f"amd_pci_ids.{arch}"
        entries = c.mapping(ids, path, list(ids) if isinstance(ids, dict) else [])
        items: list[PciProduct] = []
        for key, product in entries.items():
            if not _PCI_ID_RE.match(key):
                raise c.fail(f"{path}.{key}", "not a PCI device id like \"0x73df\"")
            device_id = int(key, 16)
            if device_id in seen:
                raise c.fail(f"{path}.{key}", "listed twice")
            seen.add(device_id)
            items.append(PciProduct(device_id, c.text(product, f"{path}.{key}"), arch))
        out[str(arch)] = tuple(items)
    return out


def _model_names(
    c: _Check, raw: object, known: set[str]
) -> dict[str, tuple[tuple[str, str], ...]]:
    if raw is None:
        return {}
    body = c.mapping(raw, "nvidia_model_names", sorted(known))
    return {
        str(arch): tuple(
            (fragment, str(arch))
            for fragment in c.texts(fragments, f"nvidia_model_names.{arch}")
        )
        for arch, fragments in body.items()
    }


def _numpy_releases(c: _Check, raw: object) -> tuple[tuple[NumpyRelease, ...], str]:
    if raw is None:
        return (), ""
    body = c.mapping(raw, "numpy_releases", ("source", "series"), ("source", "series"))
    source = c.text(body["source"], "numpy_releases.source")
    if not isinstance(body["series"], list):
        raise c.fail("numpy_releases.series", "expected a list")
    out: list[NumpyRelease] = []
    for i, item in enumerate(body["series"]):
        path = f"numpy_releases.series[{i}]"
        row = c.mapping(
            item,
            path,
            ("series", "versions", "python", "python_from", "yanked"),
            ("series", "versions", "python"),
        )
        low, high = c.python(row["python"], f"{path}.python")
        versions = c.texts(row["versions"], f"{path}.versions")
        for ver in versions:
            c.version(ver, f"{path}.versions")
        frm_raw = row.get("python_from") or {}
        frm = c.mapping(
            frm_raw, f"{path}.python_from", list(frm_raw) if isinstance(frm_raw, dict) else []
        )
        python_from = tuple(
            (str(k), c.text(v, f"{path}.python_from.{k}")) for k, v in frm.items()
        )
        for py, ver in python_from:
            if ver not in versions or not PYTHON_RE.match(py):
                raise c.fail(f"{path}.python_from", f"{py}: {ver} is not a version of the series")
        y_raw = row.get("yanked") or {}
        y_map = c.mapping(y_raw, f"{path}.yanked", list(y_raw) if isinstance(y_raw, dict) else [])
        yanked = tuple((str(k), c.text(v, f"{path}.yanked.{k}")) for k, v in y_map.items())
        for ver, _ in yanked:
            if ver not in versions:
                raise c.fail(f"{path}.yanked", f"{ver} is not a version of the series")
        out.append(
            NumpyRelease(
                series=c.text(row["series"], f"{path}.series"),
                versions=versions,
                python_min=low,
                python_max=high,
                python_from=python_from,
                yanked=yanked,
                origin=c.source,
            )
        )
    return tuple(out), source


def _items(c: _Check, top: Mapping[str, Any], key: str) -> list[tuple[int, Any]]:
    value = top.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise c.fail(key, "expected a list")
    return list(enumerate(value))


def _arch_rule(c: _Check, raw: object, i: int) -> _ArchRule:
    path = f"rocm_archs[{i}]"
    body = c.mapping(
        raw,
        path,
        ("archs", "rocm_min", "rocm_below", "torch_min", "confidence", "source"),
        ("archs", "rocm_min", "source"),
    )
    torch_min = body.get("torch_min")
    below = body.get("rocm_below")
    return _ArchRule(
        archs=tuple(c.gfx(a, f"{path}.archs") for a in c.texts(body["archs"], f"{path}.archs")),
        rocm_min=c.version(body["rocm_min"], f"{path}.rocm_min"),
        torch_min=None if torch_min is None else c.version(torch_min, f"{path}.torch_min"),
        rocm_below=None if below is None else c.version(below, f"{path}.rocm_below"),
        confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
        source=c.text(body["source"], f"{path}.source"),
        origin=c.source,
    )


def _broken_rule(c: _Check, raw: object, i: int) -> _BrokenRule:
    path = f"rocm_broken[{i}]"
    body = c.mapping(
        raw,
        path,
        ("archs", "rocm_min", "reason", "confidence", "source"),
        ("archs", "rocm_min", "reason", "source"),
    )
    return _BrokenRule(
        archs=tuple(c.gfx(a, f"{path}.archs") for a in c.texts(body["archs"], f"{path}.archs")),
        rocm_min=c.version(body["rocm_min"], f"{path}.rocm_min"),
        reason=c.text(body["reason"], f"{path}.reason"),
        confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
        source=c.text(body["source"], f"{path}.source"),
        origin=c.source,
    )


def _release(
    c: _Check,
    raw: object,
    path: str,
    *,
    variants: Sequence[_Row],
    index_root: str,
    rocm_caveat: str,
    arch_rules: Sequence[_ArchRule],
    broken_rules: Sequence[_BrokenRule],
) -> Release:
    body = c.mapping(raw, path, _RELEASE_KEYS, _RELEASE_REQUIRED)
    series = c.text(body["series"], f"{path}.series")
    versions = c.texts(body["versions"], f"{path}.versions")
    for ver in versions:
        if series_of(ver) != series or not _RELEASE_VERSION_RE.match(ver):
            raise c.fail(f"{path}.versions", f"{ver!r} is not a {series}.N version")
    py_min, py_max = c.python(body["python"], f"{path}.python")
    py_source = c.text(body["python_source"], f"{path}.python_source")
    breaks = body.get("numpy_breaks")
    if breaks is not None:
        try:
            SpecifierSet(c.text(breaks, f"{path}.numpy_breaks"))
        except InvalidSpecifier:
            raise c.fail(f"{path}.numpy_breaks", f"{breaks!r} is not a specifier") from None
    numpy_source = c.opt_str(body.get("numpy_source"), f"{path}.numpy_source")
    if breaks is not None and not numpy_source:
        raise c.fail(f"{path}.numpy_source", "missing (numpy_breaks needs a source)")
    release_source = c.text(body["source"], f"{path}.source")
    checked = _checked(c, body.get("checked"), f"{path}.checked")
    torch_v = Version(series)
    form_default: IndexForm = "extra-index-url" if torch_v < Version("2.0") else "index-url"

    release_origin = c.source
    release_note = c.opt_str(body.get("note"), f"{path}.note")
    if not variants:
        raise c.fail(f"{path}.variants", "expected a non-empty list")
    out_variants: list[Variant] = []
    for vrow in variants:
        c, vpath, v = vrow.c, vrow.path, vrow.raw
        name = c.text(v["name"], f"{vpath}.name")
        if not _VARIANT_RE.match(name):
            raise c.fail(f"{vpath}.name", f"{name!r} is not rocmX.Y[.Z], cuXYZ or cpu")
        kind: Kind = (
            "rocm" if name.startswith("rocm") else "cuda" if name.startswith("cu") else "cpu"
        )
        form = v.get("form", form_default)
        if form not in INDEX_FORMS:
            raise c.fail(f"{vpath}.form", f"{form!r} is not one of {INDEX_FORMS}")
        if form != form_default:
            raise c.fail(f"{vpath}.form", f"torch {series} wheels use --{form_default}")
        if v.get("python") is not None:
            vmin, vmax = c.python(v["python"], f"{vpath}.python")
            vsource = c.text(v.get("python_source"), f"{vpath}.python_source")
        else:
            vmin, vmax, vsource = py_min, py_max, py_source
            if v.get("python_source") is not None:
                vsource = c.text(v["python_source"], f"{vpath}.python_source") + "; " + py_source
            elif kind == "rocm" and rocm_caveat:
                vsource = f"{py_source}; {rocm_caveat}"
        exceptions = _python_exceptions(c, v.get("python_exceptions"), f"{vpath}.python_exceptions")
        index = c.text(v.get("index", f"{index_root}/{name}"), f"{vpath}.index").rstrip("/")
        source = c.text(v["source"], f"{vpath}.source")
        confidence = c.confidence(v.get("confidence", "verified"), f"{vpath}.confidence")

        archs: tuple[str, ...] = ()
        uncertain: tuple[str, ...] = ()
        arch_sources: tuple[tuple[str, str], ...] = ()
        arch_origins: tuple[tuple[str, str], ...] = ()
        broken: tuple[BrokenArch, ...] = ()
        ptx: str | None = None
        if kind == "rocm":
            if v.get("sm") is not None or v.get("ptx") is not None:
                raise c.fail(f"{vpath}.sm", "ROCm variants take their archs from rocm_archs")
            rocm_v = Version(name[len("rocm") :])
            a_list: list[str] = []
            a_unc: list[str] = []
            a_src: list[tuple[str, str]] = []
            a_origin: list[tuple[str, str]] = []
            for rule in arch_rules:
                torch_ok = rule.torch_min is None or torch_v >= rule.torch_min
                below_ok = rule.rocm_below is None or rocm_v < rule.rocm_below
                if rocm_v >= rule.rocm_min and torch_ok and below_ok:
                    for arch in rule.archs:
                        a_list.append(arch)
                        a_src.append((arch, rule.source))
                        a_origin.append((arch, rule.origin))
                        if rule.confidence == "uncertain":
                            a_unc.append(arch)
            if not a_list:
                raise c.fail(vpath, f"no rocm_archs row covers {name}")
            archs, uncertain, arch_sources = tuple(a_list), tuple(a_unc), tuple(a_src)
            arch_origins = tuple(a_origin)
            broken = tuple(
                BrokenArch(
                    arch=a,
                    reason=b.reason,
                    source=b.source,
                    confidence=b.confidence,
                    origin=b.origin,
                )
                for b in broken_rules
                if rocm_v >= b.rocm_min
                for a in b.archs
                if a in archs
            )
        elif kind == "cuda":
            sm = c.texts(v.get("sm"), f"{vpath}.sm")
            for s in sm:
                if not SM_RE.match(s):
                    raise c.fail(f"{vpath}.sm", f"{s!r} is not like sm_86")
            sm_source = c.text(v.get("sm_source"), f"{vpath}.sm_source")
            sm_conf = c.confidence(v.get("sm_confidence", "verified"), f"{vpath}.sm_confidence")
            archs = sm
            uncertain = sm if sm_conf == "uncertain" else ()
            arch_sources = tuple((s, sm_source) for s in sm)
            if v.get("ptx") is not None:
                ptx = c.text(v["ptx"], f"{vpath}.ptx")
                if not SM_RE.match(ptx):
                    raise c.fail(f"{vpath}.ptx", f"{ptx!r} is not like sm_120")
        elif v.get("sm") is not None:
            raise c.fail(f"{vpath}.sm", "a cpu variant has no GPU archs")
        pypi_default = v.get("pypi_default", False)
        if not isinstance(pypi_default, bool):
            raise c.fail(f"{vpath}.pypi_default", "expected true or false")
        out_variants.append(
            Variant(
                name=name,
                kind=kind,
                series=series,
                python_min=vmin,
                python_max=vmax,
                python_source=vsource,
                index=index,
                form=form,
                archs=archs,
                archs_uncertain=uncertain,
                arch_sources=arch_sources,
                broken=broken,
                ptx=ptx,
                pypi_default=pypi_default,
                confidence=confidence,
                source=source,
                note=c.opt_str(v.get("note"), f"{vpath}.note"),
                python_exceptions=exceptions,
                origin=c.source,
                arch_origins=arch_origins,
            )
        )
    return Release(
        series=series,
        versions=versions,
        python_min=py_min,
        python_max=py_max,
        numpy_breaks=breaks,
        numpy_source=numpy_source,
        source=release_source,
        variants=tuple(out_variants),
        note=release_note,
        checked=checked,
        origin=release_origin,
    )


def _checked(c: _Check, raw: object, path: str) -> str:
    """A ``checked:`` date (``2026-11-23``, quoted or not) as ISO text; "" when absent."""
    if raw is None:
        return ""
    if isinstance(raw, datetime.date) and not isinstance(raw, datetime.datetime):
        return raw.isoformat()
    text = c.text(raw, path)
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise c.fail(path, f"{text!r} is not a date like 2026-11-23") from None


def _python_exceptions(c: _Check, raw: object, path: str) -> tuple[PythonException, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise c.fail(path, "expected a list")
    out = []
    for i, item in enumerate(raw):
        keys = ("versions", "python", "source")
        body = c.mapping(item, f"{path}[{i}]", keys, keys)
        low, high = c.python(body["python"], f"{path}[{i}].python")
        out.append(
            PythonException(
                versions=c.texts(body["versions"], f"{path}[{i}].versions"),
                python_min=low,
                python_max=high,
                source=c.text(body["source"], f"{path}[{i}].source"),
            )
        )
    return tuple(out)


def _arch_infos(c: _Check, raw: object, path: str, *, amd: bool) -> tuple[ArchInfo, ...]:
    if raw is None:
        return ()
    body = c.mapping(raw, path, list(raw) if isinstance(raw, dict) else [])
    out = []
    for arch, info in body.items():
        if amd:
            c.gfx(arch, f"{path}.{arch}")
        elif not SM_RE.match(arch):
            raise c.fail(f"{path}.{arch}", "not like sm_86")
        entry = c.mapping(
            info,
            f"{path}.{arch}",
            ("family", "products", "official", "integrated"),
            ("family", "products"),
        )
        integrated = entry.get("integrated", False)
        if not isinstance(integrated, bool):
            raise c.fail(f"{path}.{arch}.integrated", "expected true or false")
        out.append(
            ArchInfo(
                arch=arch,
                family=c.text(entry["family"], f"{path}.{arch}.family"),
                products=c.texts(entry["products"], f"{path}.{arch}.products"),
                official=c.opt_str(entry.get("official"), f"{path}.{arch}.official"),
                integrated=integrated,
                origin=c.source,
            )
        )
    return tuple(out)


def load_table_file(path: Path) -> CompatTable:
    """Read and validate a table file (tests use this with broken copies)."""
    text = yamlcheck.read_text(path, path.name, error=TableError)
    data = yamlcheck.parse(text, path.name, error=TableError)
    return parse_layers([(path.name, data)], [text])


#: Overlay files: ``os.pathsep``-separated files or folders of ``*.yaml``.
KNOWLEDGE_PATH_ENV = "ENVFORGE_KNOWLEDGE_PATH"

#: (path as given, st_mtime_ns, st_size): a file's identity for the table cache.
OverlayKey = tuple[tuple[str, int, int], ...]


def overlay_files(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The overlay files, in the order they are applied (a later one wins).

    ``$XDG_CONFIG_HOME/envforge/knowledge/*.yaml`` (default ``~/.config``) first, then
    the entries of ``ENVFORGE_KNOWLEDGE_PATH`` from last to first, so its first entry
    wins (like ``PATH``). A folder gives its ``*.yaml`` files in name order; an entry that
    does not exist is a :class:`TableError` (exit 2).
    """
    env = os.environ if environ is None else environ
    out: list[Path] = []
    config = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    user_dir = Path(config) / "envforge" / "knowledge"
    try:
        has_user_dir = user_dir.is_dir()
    except OSError:  # e.g. HOME is another user's (sudo, setpriv): not this user's folder
        has_user_dir = False
    if has_user_dir:
        out += _yaml_files(user_dir)
    entries = [e for e in env.get(KNOWLEDGE_PATH_ENV, "").split(os.pathsep) if e]
    for entry in reversed(entries):
        path = Path(entry)
        if path.is_dir():
            out += _yaml_files(path)
        elif path.exists():
            out.append(path)
        else:
            raise TableError(
                str(path), "", f"no such file or folder (from {KNOWLEDGE_PATH_ENV})",
                hint=f"fix or remove the entry in {KNOWLEDGE_PATH_ENV}",
            )
    return tuple(out)


def _yaml_files(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".yaml")
    except OSError as exc:
        raise TableError(str(folder), "", f"cannot be listed: {exc.strerror or exc}") from None


def overlay_key(files: Sequence[Path]) -> OverlayKey:
    """The cache key of an overlay set: each file with its modification time and size."""
    out: list[tuple[str, int, int]] = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(f), -1, -1))
    return tuple(out)


def load_table(environ: Mapping[str, str] | None = None) -> CompatTable:
    """The shipped table merged with the overlays (:func:`overlay_files`).

    Parsed once per overlay set per process (an ``lru_cache`` of immutable values keyed
    on the files, their modification times and sizes).
    """
    return _load_layers(overlay_key(overlay_files(environ)))


@functools.lru_cache(maxsize=8)
def _load_layers(key: OverlayKey) -> CompatTable:
    shipped = data_file("compat.yaml")
    text = yamlcheck.read_text(shipped, shipped.name, error=TableError)
    layers: list[tuple[str, object]] = [
        (shipped.name, yamlcheck.parse(text, shipped.name, error=TableError))
    ]
    texts: list[str | None] = [text]
    for name, _, _ in key:
        otext = yamlcheck.read_text(Path(name), name, error=TableError)
        layers.append((name, yamlcheck.parse(otext, name, error=TableError)))
        texts.append(otext)
    return parse_layers(layers, texts)
