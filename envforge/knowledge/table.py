"""The compatibility table (``envforge/data/compat.yaml``) as frozen, validated values.

:func:`load_table` parses the YAML once; a malformed table raises :class:`TableError`
(a bug in the shipped data, caught by the unit tests). The lookups other modules use:

- :meth:`CompatTable.variant` — (torch version, ``rocm5.2``/``cu126``/``cpu``) → the
  wheel variant: CPython range, index URL and form, local version label, AMD archs or
  CUDA SM archs, archs listed but broken.
- :meth:`CompatTable.override_target` / :meth:`CompatTable.override_for` — the
  ``HSA_OVERRIDE_GFX_VERSION`` value that lets an arch run another arch's code.
- :meth:`CompatTable.min_driver` — the NVIDIA driver floor of a CUDA version.
- :meth:`CompatTable.distro_python` — the python3 of a known base image.
- :meth:`CompatTable.recipe_arch_for` — which recipe archs can serve a detected arch.
- :func:`gfx_from_isa` / :func:`isa_from_gfx` — ``10.3.0`` ↔ ``gfx1030``.
"""

from __future__ import annotations

import datetime
import fnmatch
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge.resources import data_file

Confidence = Literal["verified", "community", "uncertain"]
IndexForm = Literal["index-url", "extra-index-url"]
Kind = Literal["rocm", "cuda", "cpu"]
OverrideStatus = Literal["works", "unreliable", "broken"]

CONFIDENCES: tuple[Confidence, ...] = ("verified", "community", "uncertain")
INDEX_FORMS: tuple[IndexForm, ...] = ("index-url", "extra-index-url")
OVERRIDE_STATUSES: tuple[OverrideStatus, ...] = ("works", "unreliable", "broken")

_GFX_RE = re.compile(r"^gfx(\d{1,2})([0-9a-f])([0-9a-f])$")
_ISA_RE = re.compile(r"^(\d{1,2})\.(\d)\.(\d{1,2})$")
_SM_RE = re.compile(r"^sm_(\d{2,3})(a?)$")
#: Compute capabilities of shipped NVIDIA GPUs (CUDA GPUs list, developer.nvidia.com).
NVIDIA_COMPUTE_CAPABILITIES = (
    "sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72",
    "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_101", "sm_103",
    "sm_110", "sm_120", "sm_121",
)
_PY_RE = re.compile(r"^3\.\d{1,2}$")
_VARIANT_RE = re.compile(r"^(rocm\d+(\.\d+)+|cu\d{3}|cpu)$")


class TableError(ValueError):
    """The shipped compatibility table is malformed (a bug in envforge's data)."""


# --------------------------------------------------------------------------- helpers


def py_tuple(version: str) -> tuple[int, ...]:
    """``"3.10"`` → ``(3, 10)`` for ordering CPython versions."""
    return tuple(int(p) for p in version.split("."))


def base_version(torch_version: str) -> str:
    """``"1.13.1+rocm5.2"`` → ``"1.13.1"``."""
    return torch_version.split("+", 1)[0]


def local_label(torch_version: str) -> str | None:
    """``"1.13.1+rocm5.2"`` → ``"rocm5.2"``; None without a local version."""
    _, sep, label = torch_version.partition("+")
    return label if sep else None


def series_of(torch_version: str) -> str:
    """``"2.2.2"`` → ``"2.2"``."""
    return ".".join(base_version(torch_version).split(".")[:2])


def gfx_from_isa(isa: str) -> str | None:
    """``"10.3.0"`` → ``"gfx1030"``, ``"9.0.10"`` → ``"gfx90a"``; None if not an ISA."""
    m = _ISA_RE.match(isa.strip())
    if not m:
        return None
    major, minor, stepping = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if stepping > 15:
        return None
    return f"gfx{major}{minor}{stepping:x}"


def isa_from_gfx(arch: str) -> str | None:
    """``"gfx1030"`` → ``"10.3.0"``, ``"gfx90a"`` → ``"9.0.10"``; None if not a gfx name."""
    m = _GFX_RE.match(arch)
    if not m:
        return None
    return f"{int(m.group(1))}.{int(m.group(2), 16)}.{int(m.group(3), 16)}"


def sm_number(arch: str) -> tuple[int, int, bool] | None:
    """``"sm_86"`` → ``(8, 6, False)``, ``"sm_90a"`` → ``(9, 0, True)``."""
    m = _SM_RE.match(arch)
    if not m:
        return None
    n = int(m.group(1))
    return n // 10, n % 10, bool(m.group(2))


def sm_covered(arch: str, sass: Sequence[str], ptx: str | None = None) -> bool:
    """Can a GPU of ``arch`` run a wheel built for ``sass`` (+ PTX of ``ptx``)?

    CUDA binary compatibility: SASS for sm_XY runs on sm_XZ with Z >= Y (same major);
    ``a`` (arch-specific) builds run only on that exact arch. Embedded PTX is
    JIT-compiled for any newer arch.
    """
    gpu = sm_number(arch)
    if gpu is None:
        return False
    major, minor, _ = gpu
    for item in sass:
        built = sm_number(item)
        if built is None:
            continue
        if built[2]:
            if item == arch:
                return True
            continue
        if built[0] == major and built[1] <= minor:
            return True
    if ptx is not None:
        p = sm_number(ptx)
        if p is not None and (major, minor) >= (p[0], p[1]):
            return True
    return False


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class BrokenArch:
    """An arch compiled into a wheel whose kernels still cannot run."""

    arch: str
    reason: str
    source: str
    confidence: Confidence


@dataclass(frozen=True)
class PythonException:
    """A torch version of the series whose variant has another CPython range."""

    versions: tuple[str, ...]
    python_min: str
    python_max: str
    source: str


@dataclass(frozen=True)
class Variant:
    """One wheel variant of one torch release series (``rocm5.2``, ``cu126``, ``cpu``)."""

    name: str
    kind: Kind
    series: str
    python_min: str
    python_max: str
    python_source: str
    index: str
    form: IndexForm
    #: AMD archs (rocm) or CUDA SASS archs (cuda) compiled in; empty for cpu.
    archs: tuple[str, ...]
    #: Archs in ``archs`` whose presence is not confirmed ([?]).
    archs_uncertain: tuple[str, ...]
    arch_sources: tuple[tuple[str, str], ...]
    broken: tuple[BrokenArch, ...]
    #: CUDA: the arch whose PTX is embedded (JIT for newer GPUs), else None.
    ptx: str | None
    #: Installing ``torch==X`` from the default index gives this variant.
    pypi_default: bool
    confidence: Confidence
    source: str
    note: str = ""

    @property
    def local(self) -> str:
        """The wheel's local version label, e.g. ``+rocm5.2`` / ``+cu126`` / ``+cpu``."""
        return "+" + self.name

    @property
    def version(self) -> str | None:
        """``rocm5.4.2`` → ``5.4.2``, ``cu126`` → ``12.6``; None for cpu."""
        if self.kind == "rocm":
            return self.name[len("rocm") :]
        if self.kind == "cuda":
            digits = self.name[len("cu") :]
            return f"{digits[:-1]}.{digits[-1]}"
        return None

    def python_range(self, torch_version: str | None = None) -> tuple[str, str]:
        """The CPython range, taking per-version exceptions into account."""
        if torch_version is not None:
            base = base_version(torch_version)
            for exc in self.python_exceptions:
                if base in exc.versions:
                    return exc.python_min, exc.python_max
        return self.python_min, self.python_max

    def admits_python(self, python: str, torch_version: str | None = None) -> bool:
        low, high = self.python_range(torch_version)
        return py_tuple(low) <= py_tuple(python) <= py_tuple(high)

    def broken_arch(self, arch: str) -> BrokenArch | None:
        for item in self.broken:
            if item.arch == arch:
                return item
        return None

    def arch_source(self, arch: str) -> str:
        for name, source in self.arch_sources:
            if name == arch:
                return source
        return self.source

    def covers(self, arch: str) -> bool:
        """The wheel has code for ``arch`` (AMD: listed; CUDA: SASS-compatible or PTX)."""
        if self.kind == "rocm":
            return arch in self.archs
        if self.kind == "cuda":
            return sm_covered(arch, self.archs, self.ptx)
        return False

    #: Torch versions of the series with another CPython range.
    python_exceptions: tuple[PythonException, ...] = ()


@dataclass(frozen=True)
class Release:
    series: str
    versions: tuple[str, ...]
    python_min: str
    python_max: str
    #: NumPy versions the wheels break with (PEP 440), or None when none are known.
    numpy_breaks: str | None
    numpy_source: str
    source: str
    variants: tuple[Variant, ...]
    note: str = ""
    #: ISO date the row was last compared with the package index ("" when never).
    checked: str = ""

    def variant(self, name: str) -> Variant | None:
        for v in self.variants:
            if v.name == name:
                return v
        return None

    @property
    def variant_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)


@dataclass(frozen=True)
class Override:
    """An ``HSA_OVERRIDE_GFX_VERSION`` entry: ``arch`` runs the code of ``target``."""

    arch: str
    value: str
    target: str
    status: OverrideStatus
    confidence: Confidence
    note: str
    source: str


@dataclass(frozen=True)
class DriverFloor:
    cuda_major: int
    min: str
    confidence: Confidence
    source: str


@dataclass(frozen=True)
class BaseImage:
    distro: str
    python: str
    match: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class ArchInfo:
    arch: str
    family: str
    products: tuple[str, ...]
    official: str = ""


@dataclass(frozen=True)
class NumpyRelease:
    """A NumPy minor series and the CPython versions it has Linux wheels for."""

    series: str
    versions: tuple[str, ...]
    python_min: str
    python_max: str
    #: (python, first version of the series with a wheel for it)
    python_from: tuple[tuple[str, str], ...]
    #: (version, reason) of the versions the index marks yanked
    yanked: tuple[tuple[str, str], ...] = ()

    def installable(self, python: str) -> tuple[str, ...]:
        """Versions of the series that have a wheel for ``python``."""
        if not py_tuple(self.python_min) <= py_tuple(python) <= py_tuple(self.python_max):
            return ()
        first = dict(self.python_from).get(python)
        if first is None:
            return self.versions
        return tuple(v for v in self.versions if Version(v) >= Version(first))


@dataclass(frozen=True)
class CompatTable:
    releases: tuple[Release, ...]
    overrides: tuple[Override, ...]
    driver_floors: tuple[DriverFloor, ...]
    base_images: tuple[BaseImage, ...]
    amd_archs: tuple[ArchInfo, ...]
    nvidia_archs: tuple[ArchInfo, ...]
    sources: tuple[tuple[str, str], ...]
    index_root: str
    numpy_releases: tuple[NumpyRelease, ...] = ()
    numpy_source: str = ""

    # ------------------------------------------------------------------ releases

    def release(self, torch_version: str) -> Release | None:
        """The release series that lists this exact torch version (local label ignored)."""
        base = base_version(torch_version)
        for r in self.releases:
            if base in r.versions:
                return r
        return None

    def series(self, series: str) -> Release | None:
        for r in self.releases:
            if r.series == series:
                return r
        return None

    @property
    def known_versions(self) -> tuple[str, ...]:
        return tuple(v for r in self.releases for v in r.versions)

    def variant(self, torch_version: str, accelerator: str) -> Variant | None:
        """(``1.13.1``, ``rocm5.2``) → that variant; None if not published/known."""
        release = self.release(torch_version)
        return None if release is None else release.variant(accelerator)

    def releases_with(self, accelerator: str) -> tuple[Release, ...]:
        return tuple(r for r in self.releases if r.variant(accelerator) is not None)

    def source_text(self, key: str) -> str:
        """Expand a short source key (``TI``) to its full reference."""
        for name, text in self.sources:
            if name == key:
                return text
        return key

    def cite(self, text: str) -> str:
        """Expand every short source key in ``text`` ("TI; PV" → the references)."""
        keys = [re.escape(k) for k, _ in self.sources]
        if not keys:
            return text
        pattern = re.compile(r"\b(" + "|".join(keys) + r")\b")
        return pattern.sub(lambda m: self.source_text(m.group(1)), text)

    # ------------------------------------------------------------------ AMD

    def override_for(self, arch: str) -> Override | None:
        for o in self.overrides:
            if o.arch == arch:
                return o
        return None

    def override_target(self, arch: str) -> str | None:
        """``gfx1031`` → ``"10.3.0"`` (runs gfx1030 code); None when none is known.

        Check :meth:`override_for` for ``status`` and ``confidence``: RDNA1 (gfx1010) →
        ``"10.3.0"`` but ``unreliable``. Overrides known to be ``broken`` (gfx1103 →
        11.0.0 hangs, gfx1033 → NaN) give None here.
        """
        o = self.override_for(arch)
        return None if o is None or o.status == "broken" else o.value

    def arch_info(self, arch: str) -> ArchInfo | None:
        for info in (*self.amd_archs, *self.nvidia_archs):
            if info.arch == arch:
                return info
        return None

    def arch_for_product(self, product: str) -> str | None:
        """Marketing name (``"RX 5700 XT"``, ``"Radeon RX 6700 XT"``, ``"H100"``) → arch."""
        want = _norm_product(product).split()
        best: tuple[int, str] | None = None
        for info in (*self.amd_archs, *self.nvidia_archs):
            for name in info.products:
                tokens = _norm_product(name).split()
                n = len(tokens)
                hit = any(want[i : i + n] == tokens for i in range(len(want) - n + 1))
                if hit and (best is None or n > best[0]):
                    best = (n, info.arch)
        return None if best is None else best[1]

    def recipe_arch_for(self, arch: str) -> list[str]:
        """Archs whose recipes can serve a GPU of ``arch``, best first.

        - the arch itself;
        - AMD: archs whose override target is the same (e.g. gfx1032 → the gfx1031
          recipe, which sets ``HSA_OVERRIDE_GFX_VERSION=10.3.0``), then the target arch
          itself (its recipe needs the override added); overrides with status
          ``broken`` are left out;
        - NVIDIA: same-major archs with a lower minor (SASS compatibility), highest first.
        """
        out = [arch]
        o = self.override_for(arch)
        if o is not None and o.status != "broken":
            # Peers: archs of the same override row (same value, status and note).
            for other in self.overrides:
                if (other.value, other.status, other.note) == (o.value, o.status, o.note):
                    out.append(other.arch)
            if o.status == "works":
                out.append(o.target)
        sm = sm_number(arch)
        if sm is not None and not sm[2]:
            lower = [a for a in NVIDIA_COMPUTE_CAPABILITIES if (n := sm_number(a)) is not None
                     and n[0] == sm[0] and n[1] < sm[1]]
            out.extend(sorted(lower, key=lambda a: sm_number(a) or (0, 0, False), reverse=True))
        seen: list[str] = []
        for a in out:
            if a not in seen:
                seen.append(a)
        return seen

    # ------------------------------------------------------------------ NVIDIA

    def min_driver(self, cuda_version: str) -> str:
        """NVIDIA Linux driver floor for a CUDA version (``"12.6"`` → ``"525"``).

        Raises KeyError for a CUDA major the table does not know.
        """
        major = int(cuda_version.split(".", maxsplit=1)[0])
        for floor in self.driver_floors:
            if floor.cuda_major == major:
                return floor.min
        raise KeyError(f"no driver floor known for CUDA {cuda_version}")

    def driver_floor(self, cuda_version: str) -> DriverFloor | None:
        major = int(cuda_version.split(".", maxsplit=1)[0])
        for floor in self.driver_floors:
            if floor.cuda_major == major:
                return floor
        return None

    # ------------------------------------------------------------------ images

    def base_image(self, image: str) -> BaseImage | None:
        """The known distro of an image reference, or None (unknown images)."""
        ref = normalize_image(image)
        for entry in self.base_images:
            if any(fnmatch.fnmatchcase(ref, pattern) for pattern in entry.match):
                return entry
        return None

    def distro_python(self, image: str) -> str | None:
        entry = self.base_image(image)
        return None if entry is None else entry.python

    # ------------------------------------------------------------------ NumPy

    def numpy_installable(self, python: str) -> tuple[str, ...]:
        """Every NumPy version the table knows with a Linux wheel for ``python``."""
        return tuple(v for n in self.numpy_releases for v in n.installable(python))


def normalize_image(image: str) -> str:
    """Drop ``docker.io/``, ``library/`` and an ``@digest`` from an image reference."""
    ref = image.split("@", 1)[0]
    for prefix in ("docker.io/", "index.docker.io/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
    if ref.startswith("library/"):
        ref = ref[len("library/") :]
    return ref


def _norm_product(name: str) -> str:
    text = name.lower().replace("amd ", "").replace("nvidia ", "").replace("geforce ", "")
    text = text.replace("radeon rx", "rx")
    return " ".join(text.split())


# --------------------------------------------------------------------------- loading


class _Check:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, message: str) -> TableError:
        return TableError(f"{self.where}: {path}: {message}")

    def mapping(
        self, value: object, path: str, allowed: Sequence[str], required: Sequence[str] = ()
    ) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, "expected a mapping")
        for key in value:
            if key not in allowed:
                raise self.fail(f"{path}.{key}", "unknown key")
        for key in required:
            if value.get(key) in (None, ""):
                raise self.fail(f"{path}.{key}", "missing")
        return value

    def text(self, value: object, path: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, f"expected a non-empty string, got {value!r}")
        return value

    def opt_text(self, value: object, path: str) -> str:
        return "" if value is None else self.text(value, path)

    def texts(self, value: object, path: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(path, "expected a non-empty list")
        return tuple(self.text(v, f"{path}[{i}]") for i, v in enumerate(value))

    def python(self, value: object, path: str) -> tuple[str, str]:
        pair = self.texts(value, path)
        if len(pair) != 2 or not all(_PY_RE.match(p) for p in pair):
            raise self.fail(path, f"expected [\"3.X\", \"3.Y\"], got {value!r}")
        if py_tuple(pair[0]) > py_tuple(pair[1]):
            raise self.fail(path, "minimum above maximum")
        return pair[0], pair[1]

    def confidence(self, value: object, path: str) -> Confidence:
        for c in CONFIDENCES:
            if value == c:
                return c
        raise self.fail(path, f"{value!r} is not one of {', '.join(CONFIDENCES)}")

    def gfx(self, value: str, path: str) -> str:
        if not _GFX_RE.match(value):
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
)


@dataclass(frozen=True)
class _ArchRule:
    archs: tuple[str, ...]
    rocm_min: Version
    rocm_below: Version | None
    torch_min: Version | None
    confidence: Confidence
    source: str


@dataclass(frozen=True)
class _BrokenRule:
    archs: tuple[str, ...]
    rocm_min: Version
    reason: str
    confidence: Confidence
    source: str


def parse_table(data: object, where: str = "compat.yaml") -> CompatTable:
    """Validate raw YAML data into a :class:`CompatTable` (raises :class:`TableError`)."""
    c = _Check(where)
    top = c.mapping(data, "(top)", _TOP_KEYS, ("schema", "sources", "index_root", "releases"))
    if top["schema"] != 1:
        raise c.fail("schema", "only schema 1 is understood")
    sources_raw = c.mapping(top["sources"], "sources", list(top["sources"] or {}))
    sources = tuple((str(k), c.text(v, f"sources.{k}")) for k, v in sources_raw.items())
    index_root = c.text(top["index_root"], "index_root").rstrip("/")

    arch_rules = tuple(_arch_rule(c, item, i) for i, item in _items(c, top, "rocm_archs"))
    broken_rules = tuple(_broken_rule(c, item, i) for i, item in _items(c, top, "rocm_broken"))

    releases: list[Release] = []
    seen_versions: set[str] = set()
    for i, raw in _items(c, top, "releases"):
        release = _release(
            c,
            raw,
            f"releases[{i}]",
            index_root=index_root,
            rocm_caveat=c.opt_text(top.get("rocm_python_caveat"), "rocm_python_caveat"),
            arch_rules=arch_rules,
            broken_rules=broken_rules,
        )
        dup = seen_versions.intersection(release.versions)
        if dup:
            raise c.fail(f"releases[{i}].versions", f"listed twice: {sorted(dup)}")
        seen_versions.update(release.versions)
        releases.append(release)

    overrides: list[Override] = []
    for i, raw in _items(c, top, "hsa_overrides"):
        path = f"hsa_overrides[{i}]"
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
        for arch in c.texts(body["archs"], f"{path}.archs"):
            if any(o.arch == arch for o in overrides):
                raise c.fail(f"{path}.archs", f"{arch} listed twice")
            overrides.append(
                Override(
                    arch=c.gfx(arch, f"{path}.archs"),
                    value=value,
                    target=target,
                    status=status,
                    confidence=c.confidence(body["confidence"], f"{path}.confidence"),
                    note=c.opt_text(body.get("note"), f"{path}.note"),
                    source=c.text(body["source"], f"{path}.source"),
                )
            )

    floors: list[DriverFloor] = []
    for i, raw in _items(c, top, "nvidia_driver_floor"):
        path = f"nvidia_driver_floor[{i}]"
        body = c.mapping(
            raw, path, ("cuda_major", "min", "confidence", "source"), ("min", "source")
        )
        major = body.get("cuda_major")
        if not isinstance(major, int):
            raise c.fail(f"{path}.cuda_major", "expected an integer")
        floors.append(
            DriverFloor(
                cuda_major=major,
                min=c.text(body["min"], f"{path}.min"),
                confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
                source=c.text(body["source"], f"{path}.source"),
            )
        )

    images: list[BaseImage] = []
    for i, raw in _items(c, top, "base_images"):
        path = f"base_images[{i}]"
        body = c.mapping(
            raw,
            path,
            ("distro", "python", "match", "source", "note"),
            ("distro", "python", "match", "source"),
        )
        py = c.text(body["python"], f"{path}.python")
        if not _PY_RE.match(py):
            raise c.fail(f"{path}.python", f"{py!r} is not like 3.10")
        images.append(
            BaseImage(
                distro=c.text(body["distro"], f"{path}.distro"),
                python=py,
                match=c.texts(body["match"], f"{path}.match"),
                source=c.text(body["source"], f"{path}.source"),
            )
        )

    numpy_releases, numpy_source = _numpy_releases(c, top.get("numpy_releases"))
    return CompatTable(
        numpy_releases=numpy_releases,
        numpy_source=numpy_source,
        releases=tuple(releases),
        overrides=tuple(overrides),
        driver_floors=tuple(floors),
        base_images=tuple(images),
        amd_archs=_arch_infos(c, top.get("amd_archs"), "amd_archs", amd=True),
        nvidia_archs=_arch_infos(c, top.get("nvidia_archs"), "nvidia_archs", amd=False),
        sources=sources,
        index_root=index_root,
    )


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
            if ver not in versions or not _PY_RE.match(py):
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
        rocm_below=None if below is None else c.version(below, f"{path}.rocm_below"),
        torch_min=None if torch_min is None else c.version(torch_min, f"{path}.torch_min"),
        confidence=c.confidence(body.get("confidence"), f"{path}.confidence"),
        source=c.text(body["source"], f"{path}.source"),
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
    )


def _release(
    c: _Check,
    raw: object,
    path: str,
    *,
    index_root: str,
    rocm_caveat: str,
    arch_rules: Sequence[_ArchRule],
    broken_rules: Sequence[_BrokenRule],
) -> Release:
    body = c.mapping(
        raw,
        path,
        _RELEASE_KEYS,
        ("series", "versions", "python", "python_source", "source", "variants"),
    )
    series = c.text(body["series"], f"{path}.series")
    versions = c.texts(body["versions"], f"{path}.versions")
    for ver in versions:
        if series_of(ver) != series or not re.match(r"^\d+\.\d+\.\d+$", ver):
            raise c.fail(f"{path}.versions", f"{ver!r} is not a {series}.N version")
    py_min, py_max = c.python(body["python"], f"{path}.python")
    py_source = c.text(body["python_source"], f"{path}.python_source")
    breaks = body.get("numpy_breaks")
    if breaks is not None:
        try:
            SpecifierSet(c.text(breaks, f"{path}.numpy_breaks"))
        except InvalidSpecifier:
            raise c.fail(f"{path}.numpy_breaks", f"{breaks!r} is not a specifier") from None
    numpy_source = c.opt_text(body.get("numpy_source"), f"{path}.numpy_source")
    if breaks is not None and not numpy_source:
        raise c.fail(f"{path}.numpy_source", "missing (numpy_breaks needs a source)")
    release_source = c.text(body["source"], f"{path}.source")
    checked = _checked(c, body.get("checked"), f"{path}.checked")
    torch_v = Version(series)
    form_default: IndexForm = "extra-index-url" if torch_v < Version("2.0") else "index-url"

    variants: list[Variant] = []
    if not isinstance(body["variants"], list) or not body["variants"]:
        raise c.fail(f"{path}.variants", "expected a non-empty list")
    for j, vraw in enumerate(body["variants"]):
        vpath = f"{path}.variants[{j}]"
        v = c.mapping(vraw, vpath, _VARIANT_KEYS, ("name", "source"))
        name = c.text(v["name"], f"{vpath}.name")
        if not _VARIANT_RE.match(name):
            raise c.fail(f"{vpath}.name", f"{name!r} is not rocmX.Y[.Z], cuXYZ or cpu")
        if any(x.name == name for x in variants):
            raise c.fail(f"{vpath}.name", f"{name} listed twice")
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
        broken: tuple[BrokenArch, ...] = ()
        ptx: str | None = None
        if kind == "rocm":
            if v.get("sm") is not None or v.get("ptx") is not None:
                raise c.fail(f"{vpath}.sm", "ROCm variants take their archs from rocm_archs")
            rocm_v = Version(name[len("rocm") :])
            a_list: list[str] = []
            a_unc: list[str] = []
            a_src: list[tuple[str, str]] = []
            for rule in arch_rules:
                torch_ok = rule.torch_min is None or torch_v >= rule.torch_min
                below_ok = rule.rocm_below is None or rocm_v < rule.rocm_below
                if rocm_v >= rule.rocm_min and torch_ok and below_ok:
                    for arch in rule.archs:
                        a_list.append(arch)
                        a_src.append((arch, rule.source))
                        if rule.confidence == "uncertain":
                            a_unc.append(arch)
            if not a_list:
                raise c.fail(vpath, f"no rocm_archs row covers {name}")
            archs, uncertain, arch_sources = tuple(a_list), tuple(a_unc), tuple(a_src)
            broken = tuple(
                BrokenArch(arch=a, reason=b.reason, source=b.source, confidence=b.confidence)
                for b in broken_rules
                if rocm_v >= b.rocm_min
                for a in b.archs
                if a in archs
            )
        elif kind == "cuda":
            sm = c.texts(v.get("sm"), f"{vpath}.sm")
            for s in sm:
                if not _SM_RE.match(s):
                    raise c.fail(f"{vpath}.sm", f"{s!r} is not like sm_86")
            sm_source = c.text(v.get("sm_source"), f"{vpath}.sm_source")
            sm_conf = c.confidence(v.get("sm_confidence", "verified"), f"{vpath}.sm_confidence")
            archs = sm
            uncertain = sm if sm_conf == "uncertain" else ()
            arch_sources = tuple((s, sm_source) for s in sm)
            if v.get("ptx") is not None:
                ptx = c.text(v["ptx"], f"{vpath}.ptx")
                if not _SM_RE.match(ptx):
                    raise c.fail(f"{vpath}.ptx", f"{ptx!r} is not like sm_120")
        elif v.get("sm") is not None:
            raise c.fail(f"{vpath}.sm", "a cpu variant has no GPU archs")
        pypi_default = v.get("pypi_default", False)
        if not isinstance(pypi_default, bool):
            raise c.fail(f"{vpath}.pypi_default", "expected true or false")
        variants.append(
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
                note=c.opt_text(v.get("note"), f"{vpath}.note"),
                python_exceptions=exceptions,
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
        variants=tuple(variants),
        note=c.opt_text(body.get("note"), f"{path}.note"),
        checked=checked,
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
        elif not _SM_RE.match(arch):
            raise c.fail(f"{path}.{arch}", "not like sm_86")
        entry = c.mapping(
            info, f"{path}.{arch}", ("family", "products", "official"), ("family", "products")
        )
        out.append(
            ArchInfo(
                arch=arch,
                family=c.text(entry["family"], f"{path}.{arch}.family"),
                products=c.texts(entry["products"], f"{path}.{arch}.products"),
                official=c.opt_text(entry.get("official"), f"{path}.{arch}.official"),
            )
        )
    return tuple(out)


def load_table_file(path: Path) -> CompatTable:
    """Parse a table file (tests use this with broken copies of the shipped table)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TableError(f"{path}: cannot be read: {exc}") from None
    return parse_table(data, str(path.name))


@functools.lru_cache(maxsize=1)
def load_table() -> CompatTable:
    """The shipped table, parsed and validated once (immutable, so caching is safe)."""
    return load_table_file(data_file("compat.yaml"))
