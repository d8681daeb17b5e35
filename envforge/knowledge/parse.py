"""Read and validate the compatibility table (``envforge/data/compat.yaml``).

The file is read by the one YAML reader (:mod:`envforge.core.yamlcheck`: size, depth,
duplicate keys, line numbers); this module merges the layers (the shipped table, then
the overlays) and builds the frozen values of :mod:`envforge.knowledge.table` with the
row readers of :mod:`envforge.knowledge.rows` and :mod:`envforge.knowledge.release`.
Every refusal is a :class:`~envforge.errors.TableError` naming the file and key path
(``releases[3].variants[0].confidence``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from envforge.core import yamlcheck
from envforge.errors import TableError
from envforge.knowledge.release import RELEASE_KEYS, RELEASE_REQUIRED, VARIANT_KEYS, read_release
from envforge.knowledge.rows import (
    ArchRule,
    BrokenRule,
    Check,
    Row,
    read_arch_infos,
    read_arch_rule,
    read_broken_rule,
    read_floor,
    read_image,
    read_items,
    read_jetpacks,
    read_model_names,
    read_numpy_releases,
    read_overrides,
    read_pci_ids,
    read_toolkit,
)
from envforge.knowledge.table import (
    ArchInfo,
    BaseImage,
    CompatTable,
    CudaToolkit,
    DriverFloor,
    NumpyRelease,
    Override,
    PciProduct,
    Release,
    TegraRoute,
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
    "tegra",
    "cuda_toolkits",
)

_Tops = Sequence[tuple[Check, dict[str, Any]]]


@dataclass
class _Scalars:
    sources: dict[str, str] = field(default_factory=dict)
    index_root: str = ""
    rocm_caveat: str = ""


@dataclass
class _Rows:
    """Rows merged by identity over the layers (a later layer's row replaces)."""

    floors: dict[int, DriverFloor] = field(default_factory=dict)
    toolkits: dict[str, CudaToolkit] = field(default_factory=dict)
    images: dict[str, BaseImage] = field(default_factory=dict)
    numpy_by: dict[str, NumpyRelease] = field(default_factory=dict)
    numpy_source: str = ""
    amd_by: dict[str, ArchInfo] = field(default_factory=dict)
    nvidia_by: dict[str, ArchInfo] = field(default_factory=dict)


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
    arch; ``nvidia_driver_floor`` by ``cuda_major``; ``cuda_toolkits`` by CUDA line (13.4);
    ``base_images`` by ``distro``;
    ``numpy_releases.series`` by ``series``; ``amd_archs`` / ``nvidia_archs``,
    ``amd_pci_ids`` and ``nvidia_model_names`` by arch; ``index_root``,
    ``rocm_python_caveat`` and ``numpy_releases.source``: the last layer that sets them.
    ``texts`` (optional, per layer) lets a refusal name the line of the key.
    """
    tops = _tops(layers, texts)
    scalars = _scalars(tops)
    releases = _releases(tops, scalars)
    rows = _rows(tops)
    return CompatTable(
        amd_pci_ids=_pci(tops, rows),
        nvidia_model_names=_model_pairs(tops, rows),
        numpy_releases=tuple(sorted(rows.numpy_by.values(), key=lambda r: Version(r.series))),
        numpy_source=rows.numpy_source,
        releases=releases,
        overrides=_overrides(tops),
        driver_floors=tuple(rows.floors.values()),
        base_images=tuple(rows.images.values()),
        amd_archs=tuple(rows.amd_by.values()),
        nvidia_archs=tuple(rows.nvidia_by.values()),
        sources=tuple(scalars.sources.items()),
        index_root=scalars.index_root,
        layers=tuple(where for where, _ in layers),
        tegra=_tegra(tops),
        cuda_toolkits=tuple(sorted(rows.toolkits.values(), key=lambda k: Version(k.version))),
    )


def _tops(
    layers: Sequence[tuple[str, object]], texts: Sequence[str | None]
) -> list[tuple[Check, dict[str, Any]]]:
    tops: list[tuple[Check, dict[str, Any]]] = []
    for n, (where, data) in enumerate(layers):
        c = Check(where, texts[n] if n < len(texts) else None)
        required = ("schema", "sources", "index_root", "releases") if n == 0 else ("schema",)
        top = c.mapping(data, "(top)", _TOP_KEYS, required)
        if top["schema"] != 1:
            raise c.fail("schema", "only schema 1 is understood")
        tops.append((c, top))
    return tops


def _scalars(tops: _Tops) -> _Scalars:
    out = _Scalars()
    for c, top in tops:
        if top.get("sources") is not None:
            raw_sources = c.mapping(top["sources"], "sources", list(top["sources"] or {}))
            for k, v in raw_sources.items():
                out.sources[str(k)] = c.text(v, f"sources.{k}")
        if top.get("index_root") is not None:
            out.index_root = c.text(top["index_root"], "index_root").rstrip("/")
        if top.get("rocm_python_caveat") is not None:
            out.rocm_caveat = c.opt_str(top.get("rocm_python_caveat"), "rocm_python_caveat")
    return out


def _tegra(tops: _Tops) -> TegraRoute | None:
    """``tegra: {route, source}``: where Jetson users get torch (the last layer's)."""
    found: TegraRoute | None = None
    for c, top in tops:
        if top.get("tegra") is None:
            continue
        body = c.mapping(
            top["tegra"], "tegra", ("route", "source", "jetpacks"), ("route", "source")
        )
        found = TegraRoute(
            route=c.text(body["route"], "tegra.route"),
            source=c.text(body["source"], "tegra.source"),
            origin=c.source,
            jetpacks=read_jetpacks(c, body.get("jetpacks")),
        )
    return found


def _rocm_rules(tops: _Tops) -> tuple[tuple[ArchRule, ...], tuple[BrokenRule, ...]]:
    arch_rules_by: dict[tuple[tuple[str, ...], Version], ArchRule] = {}
    broken_by: dict[tuple[tuple[str, ...], Version], BrokenRule] = {}
    for c, top in tops:
        for i, item in read_items(c, top, "rocm_archs"):
            rule = read_arch_rule(c, item, i)
            arch_rules_by[(tuple(sorted(rule.archs)), rule.rocm_min)] = rule
        for i, item in read_items(c, top, "rocm_broken"):
            brule = read_broken_rule(c, item, i)
            broken_by[(tuple(sorted(brule.archs)), brule.rocm_min)] = brule
    return tuple(arch_rules_by.values()), tuple(broken_by.values())


def _release_rows(
    tops: _Tops,
) -> tuple[dict[str, tuple[Row, dict[str, Any]]], dict[str, dict[str, Row]]]:
    """Releases by series (release-level keys merged); within a release, variants by name."""
    rel_rows: dict[str, tuple[Row, dict[str, Any]]] = {}
    var_rows: dict[str, dict[str, Row]] = {}
    for n, (c, top) in enumerate(tops):
        seen_here: set[str] = set()
        for i, raw in read_items(c, top, "releases"):
            path = f"releases[{i}]"
            c.mapping(raw, path, RELEASE_KEYS)
            series = c.text(raw.get("series"), f"{path}.series")
            if series in seen_here:
                raise c.fail(f"{path}.series", f"series {series} listed twice")
            seen_here.add(series)
            overlay = bool(n) and series in rel_rows
            rel_required: tuple[str, ...] = () if overlay else RELEASE_REQUIRED
            body = c.mapping(raw, path, RELEASE_KEYS, rel_required)
            merged = {**rel_rows[series][1], **body} if overlay else dict(body)
            keep = overlay and not set(body) - {"series", "variants"}
            rel_rows[series] = (rel_rows[series][0] if keep else Row(c, path, raw), merged)
            table_vars = var_rows.setdefault(series, {}) if overlay else {}
            var_rows[series] = table_vars
            variants_raw = body.get("variants")
            if variants_raw is None and overlay:
                continue
            _variant_rows(c, path, variants_raw, table_vars)
    return rel_rows, var_rows


def _variant_rows(c: Check, path: str, variants_raw: object, into: dict[str, Row]) -> None:
    if not isinstance(variants_raw, list) or not variants_raw:
        raise c.fail(f"{path}.variants", "expected a non-empty list")
    names_here: set[str] = set()
    for j, vraw in enumerate(variants_raw):
        vpath = f"{path}.variants[{j}]"
        v = c.mapping(vraw, vpath, VARIANT_KEYS, ("name", "source"))
        name = c.text(v["name"], f"{vpath}.name")
        if name in names_here:
            raise c.fail(f"{vpath}.name", f"{name} listed twice")
        names_here.add(name)
        into[name] = Row(c, vpath, v)


def _releases(tops: _Tops, scalars: _Scalars) -> tuple[Release, ...]:
    arch_rules, broken_rules = _rocm_rules(tops)
    rel_rows, var_rows = _release_rows(tops)
    releases: list[Release] = []
    seen_versions: set[str] = set()
    for series, (row, body) in rel_rows.items():
        release = read_release(
            row.c,
            body,
            row.path,
            variants=list(var_rows[series].values()),
            index_root=scalars.index_root,
            rocm_caveat=scalars.rocm_caveat,
            arch_rules=arch_rules,
            broken_rules=broken_rules,
        )
        dup = seen_versions.intersection(release.versions)
        if dup:
            raise row.c.fail(f"{row.path}.versions", f"listed twice: {sorted(dup)}")
        seen_versions.update(release.versions)
        releases.append(release)
    releases.sort(key=lambda r: Version(r.series))
    return tuple(releases)


def _overrides(tops: _Tops) -> tuple[Override, ...]:
    overrides_by: dict[str, Override] = {}
    for c, top in tops:
        here: set[str] = set()
        for i, raw in read_items(c, top, "hsa_overrides"):
            for o in read_overrides(c, raw, f"hsa_overrides[{i}]"):
                if o.arch in here:
                    raise c.fail(f"hsa_overrides[{i}].archs", f"{o.arch} listed twice")
                here.add(o.arch)
                overrides_by[o.arch] = o
    return tuple(overrides_by.values())


def _rows(tops: _Tops) -> _Rows:
    out = _Rows()
    for c, top in tops:
        for i, raw in read_items(c, top, "nvidia_driver_floor"):
            floor = read_floor(c, raw, f"nvidia_driver_floor[{i}]")
            out.floors[floor.cuda_major] = floor
        for i, raw in read_items(c, top, "cuda_toolkits"):
            kit = read_toolkit(c, raw, f"cuda_toolkits[{i}]")
            out.toolkits[kit.line] = kit
        for i, raw in read_items(c, top, "base_images"):
            image = read_image(c, raw, f"base_images[{i}]")
            out.images[image.distro] = image
        found, src = read_numpy_releases(c, top.get("numpy_releases"))
        out.numpy_source = src or out.numpy_source
        for nr in found:
            out.numpy_by[nr.series] = nr
        for a in read_arch_infos(c, top.get("amd_archs"), "amd_archs", amd=True):
            out.amd_by[a.arch] = a
        for a in read_arch_infos(c, top.get("nvidia_archs"), "nvidia_archs", amd=False):
            out.nvidia_by[a.arch] = a
    return out


def _pci(tops: _Tops, rows: _Rows) -> tuple[PciProduct, ...]:
    pci_by: dict[str, tuple[Check, tuple[PciProduct, ...]]] = {}
    for c, top in tops:
        for arch, items in read_pci_ids(c, top.get("amd_pci_ids"), set(rows.amd_by)).items():
            pci_by[arch] = (c, items)
    pci: list[PciProduct] = []
    for c, items in pci_by.values():
        for p in items:
            if any(q.device_id == p.device_id for q in pci):
                raise c.fail(f"amd_pci_ids.{p.arch}.0x{p.device_id:04x}", "listed twice")
            pci.append(p)
    return tuple(pci)


def _model_pairs(tops: _Tops, rows: _Rows) -> tuple[tuple[str, str], ...]:
    names_by: dict[str, tuple[Check, tuple[tuple[str, str], ...]]] = {}
    for c, top in tops:
        found = read_model_names(c, top.get("nvidia_model_names"), set(rows.nvidia_by))
        for arch, pairs in found.items():
            names_by[arch] = (c, pairs)
    model_pairs: list[tuple[str, str]] = []
    for c, pairs in names_by.values():
        for fragment, arch in pairs:
            if any(f.lower() == fragment.lower() for f, _ in model_pairs):
                raise c.fail(f"nvidia_model_names.{arch}", f"{fragment!r} listed twice")
            model_pairs.append((fragment, arch))
    return tuple(sorted(model_pairs, key=lambda p: -len(p[0])))


def load_table_file(path: Path) -> CompatTable:
    """Read and validate a table file (tests use this with broken copies)."""
    text = yamlcheck.read_text(path, path.name, error=TableError)
    data = yamlcheck.parse(text, path.name, error=TableError)
    return parse_layers([(path.name, data)], [text])


def load_layer_files(files: Sequence[Path]) -> CompatTable:
    """Read, check and merge table files: the shipped table first, then the overlays
    (:func:`envforge.knowledge.compiled.load_table` calls this when its cache is stale)."""
    layers: list[tuple[str, object]] = []
    texts: list[str | None] = []
    for n, path in enumerate(files):
        name = path.name if n == 0 else str(path)
        text = yamlcheck.read_text(path, name, error=TableError)
        layers.append((name, yamlcheck.parse(text, name, error=TableError)))
        texts.append(text)
    return parse_layers(layers, texts)
