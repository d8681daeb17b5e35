"""Row readers of the compatibility table: one function per kind of row.

:mod:`envforge.knowledge.parse` merges the layers (the shipped table, then overlays) and
calls these to validate each row into the frozen values of
:mod:`envforge.knowledge.table`; release rows are :mod:`envforge.knowledge.release`.
Every refusal is a :class:`~envforge.errors.TableError` naming the file and key path.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from envforge.core import yamlcheck
from envforge.core.patterns import CONFIDENCES, GFX_RE, PYTHON_RE, SM_RE, Confidence
from envforge.errors import DataFileError, TableError
from envforge.knowledge.arch import gfx_from_isa
from envforge.knowledge.table import (
    ARCH_PLATFORMS,
    OVERRIDE_STATUSES,
    ArchInfo,
    BaseImage,
    CudaToolkit,
    DriverFloor,
    JetPack,
    NumpyRelease,
    Override,
    PciProduct,
    PythonException,
    py_tuple,
)


class Check(yamlcheck.Reader):
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
            raise self.fail(path, f'expected ["3.X", "3.Y"], got {value!r}')
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


@dataclass(frozen=True)
class ArchRule:
    archs: tuple[str, ...]
    rocm_min: Version
    torch_min: Version | None
    confidence: Confidence
    source: str
    rocm_below: Version | None = None
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class BrokenRule:
    archs: tuple[str, ...]
    rocm_min: Version
    reason: str
    confidence: Confidence
    source: str
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class Row:
    """One row of one layer: its reader (names the file), key path and raw value."""

    c: Check
    path: str
    raw: Any


def read_overrides(c: Check, raw: object, path: str) -> list[Override]:
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


def read_floor(c: Check, raw: object, path: str) -> DriverFloor:
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


def read_toolkit(c: Check, raw: object, path: str) -> CudaToolkit:
    """A ``cuda_toolkits`` row: version, released (YYYY-MM-DD), torch (series), source."""
    keys = ("version", "released", "torch", "source", "checked")
    body = c.mapping(raw, path, keys, ("version", "released", "torch", "source"))
    torch = body["torch"]
    return CudaToolkit(
        version=str(c.version(body["version"], f"{path}.version")),
        released=read_checked(c, body["released"], f"{path}.released"),
        torch=() if torch == [] else c.texts(torch, f"{path}.torch"),
        source=c.text(body["source"], f"{path}.source"),
        checked=read_checked(c, body.get("checked"), f"{path}.checked"),
        origin=c.source,
    )


def read_image(c: Check, raw: object, path: str) -> BaseImage:
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


def read_pci_ids(c: Check, raw: object, known: set[str]) -> dict[str, tuple[PciProduct, ...]]:
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
                raise c.fail(f"{path}.{key}", 'not a PCI device id like "0x73df"')
            device_id = int(key, 16)
            if device_id in seen:
                raise c.fail(f"{path}.{key}", "listed twice")
            seen.add(device_id)
            items.append(PciProduct(device_id, c.text(product, f"{path}.{key}"), arch))
        out[str(arch)] = tuple(items)
    return out


def read_model_names(
    c: Check, raw: object, known: set[str]
) -> dict[str, tuple[tuple[str, str], ...]]:
    if raw is None:
        return {}
    body = c.mapping(raw, "nvidia_model_names", sorted(known))
    return {
        str(arch): tuple(
            (fragment, str(arch)) for fragment in c.texts(fragments, f"nvidia_model_names.{arch}")
        )
        for arch, fragments in body.items()
    }


def read_numpy_releases(c: Check, raw: object) -> tuple[tuple[NumpyRelease, ...], str]:
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
        python_from = tuple((str(k), c.text(v, f"{path}.python_from.{k}")) for k, v in frm.items())
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


def read_items(c: Check, top: Mapping[str, Any], key: str) -> list[tuple[int, Any]]:
    value = top.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise c.fail(key, "expected a list")
    return list(enumerate(value))


def read_arch_rule(c: Check, raw: object, i: int) -> ArchRule:
    path = f"rocm_archs[{i}]"
    body = c.mapping(
        raw,
        path,
        ("archs", "rocm_min", "rocm_below", "torch_min", "confidence", "source"),
        ("archs", "rocm_min", "source"),
    )
    torch_min = body.get("torch_min")
    below = body.get("rocm_below")
    return ArchRule(
        archs=tuple(c.gfx(a, f"{path}.archs") for a in c.texts(body["archs"], f"{path}.archs")),
        rocm_min=c.version(body["rocm_min"], f"{path}.rocm_min"),
        torch_min=None if torch_min is None else c.version(torch_min, f"{path}.torch_min"),
        rocm_below=None if below is None else c.version(below, f"{path}.rocm_below"),
        confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
        source=c.text(body["source"], f"{path}.source"),
        origin=c.source,
    )


def read_broken_rule(c: Check, raw: object, i: int) -> BrokenRule:
    path = f"rocm_broken[{i}]"
    body = c.mapping(
        raw,
        path,
        ("archs", "rocm_min", "reason", "confidence", "source"),
        ("archs", "rocm_min", "reason", "source"),
    )
    return BrokenRule(
        archs=tuple(c.gfx(a, f"{path}.archs") for a in c.texts(body["archs"], f"{path}.archs")),
        rocm_min=c.version(body["rocm_min"], f"{path}.rocm_min"),
        reason=c.text(body["reason"], f"{path}.reason"),
        confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
        source=c.text(body["source"], f"{path}.source"),
        origin=c.source,
    )


def read_checked(c: Check, raw: object, path: str) -> str:
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


def read_python_exceptions(c: Check, raw: object, path: str) -> tuple[PythonException, ...]:
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


def read_arch_infos(c: Check, raw: object, path: str, *, amd: bool) -> tuple[ArchInfo, ...]:
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
            (
                "family",
                "products",
                "official",
                "integrated",
                "platform",
                "confidence",
                "source",
                "checked",
            ),
            ("family", "products"),
        )
        integrated = entry.get("integrated", False)
        if not isinstance(integrated, bool):
            raise c.fail(f"{path}.{arch}.integrated", "expected true or false")
        platform = c.opt_str(entry.get("platform"), f"{path}.{arch}.platform")
        if platform and platform not in ARCH_PLATFORMS:
            raise c.fail(f"{path}.{arch}.platform", f"{platform!r} is not one of {ARCH_PLATFORMS}")
        out.append(
            ArchInfo(
                arch=arch,
                family=c.text(entry["family"], f"{path}.{arch}.family"),
                products=c.texts(entry["products"], f"{path}.{arch}.products"),
                official=c.opt_str(entry.get("official"), f"{path}.{arch}.official"),
                integrated=integrated,
                platform=platform,
                confidence=c.confidence(
                    entry.get("confidence", "verified"), f"{path}.{arch}.confidence"
                ),
                origin=c.source,
                source=c.opt_str(entry.get("source"), f"{path}.{arch}.source"),
                checked=read_checked(c, entry.get("checked"), f"{path}.{arch}.checked"),
            )
        )
    return tuple(out)


_JETPACK_KEYS = ("jetpack", "l4t", "cuda", "archs", "wheels", "route", "source", "confidence")
#: Which wheels run on a JetPack line: NVIDIA's Jetson wheels only, or also the package
#: index's server arm64 (SBSA) ones.
JETPACK_WHEELS = ("tegra", "linux/arm64")


def read_jetpacks(c: Check, value: object) -> tuple[JetPack, ...]:
    """``tegra.jetpacks``: one row per JetPack line (see :class:`JetPack`)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise c.fail("tegra.jetpacks", f"expected a list, got {yamlcheck.kind(value)}")
    out: list[JetPack] = []
    for i, item in enumerate(value):
        path = f"tegra.jetpacks[{i}]"
        m = c.mapping(item, path, _JETPACK_KEYS, _JETPACK_KEYS[:-1])
        archs = c.texts(m["archs"], f"{path}.archs")
        for arch in archs:
            if not SM_RE.match(arch):
                raise c.fail(f"{path}.archs", f"{arch!r} is not an sm arch")
        out.append(
            JetPack(
                jetpack=c.text(m["jetpack"], f"{path}.jetpack"),
                l4t=c.text(m["l4t"], f"{path}.l4t"),
                cuda=c.text(m["cuda"], f"{path}.cuda"),
                archs=archs,
                wheels=c.choice(m["wheels"], f"{path}.wheels", JETPACK_WHEELS),
                route=c.text(m["route"], f"{path}.route"),
                source=c.text(m["source"], f"{path}.source"),
                confidence=c.confidence(m.get("confidence", "community"), f"{path}.confidence"),
            )
        )
    return tuple(out)
