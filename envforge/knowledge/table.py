"""The compatibility table (``envforge/data/compat.yaml``) as frozen, validated values.

:func:`envforge.knowledge.parse.load_table` reads and validates the YAML once (a
malformed table raises :class:`~envforge.errors.TableError`); this module holds the
values and the lookups other modules use:

- :meth:`CompatTable.variant` — (torch version, ``rocm5.2``/``cu126``/``cpu``) → the
  wheel variant: CPython range, index URL and form, local version label, AMD archs or
  CUDA SM archs, archs listed but broken.
- :meth:`CompatTable.override_target` / :meth:`CompatTable.override_for` — the
  ``HSA_OVERRIDE_GFX_VERSION`` value that lets an arch run another arch's code.
- :meth:`CompatTable.min_driver` — the NVIDIA driver floor of a CUDA version.
- :meth:`CompatTable.distro_python` — the python3 of a known base image.
- :meth:`CompatTable.recipe_arch_for` — which recipe archs can serve a detected arch.
- :meth:`CompatTable.amd_pci_product` / :meth:`CompatTable.arch_for_model` — the product
  and arch of an AMD PCI device id or an NVIDIA driver model name (for ``detect``).

A release and its wheel variants (:class:`Release`, :class:`Variant`) are
:mod:`envforge.knowledge.variants` (re-exported here). Arch arithmetic (gfx ↔ ISA, SASS
compatibility) is :mod:`envforge.knowledge.arch`.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from envforge.core.patterns import Confidence
from envforge.knowledge.arch import same_major_lower, sm_number
from envforge.knowledge.variants import (
    INDEX_FORMS,
    PLATFORMS,
    BrokenArch,
    IndexForm,
    JetPack,
    Kind,
    PlatformBuild,
    PythonException,
    Release,
    TegraRoute,
    Variant,
    base_version,
    local_label,
    py_tuple,
    series_of,
)

OverrideStatus = Literal["works", "unreliable", "broken"]

OVERRIDE_STATUSES: tuple[OverrideStatus, ...] = ("works", "unreliable", "broken")
#: Where an arch exists (``nvidia_archs.*.platform``): Jetson SoCs on L4T (``tegra``), or
#: one wheel platform only.
ARCH_PLATFORMS: tuple[str, ...] = ("tegra", *PLATFORMS)


# --------------------------------------------------------------------------- values


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
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class DriverFloor:
    cuda_major: int
    min: str
    confidence: Confidence
    source: str
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class CudaToolkit:
    """One CUDA toolkit line on the package index (``cuda_toolkits`` rows): the newest
    release of the ``cuda-toolkit`` metapackage seen, when it was published and the torch
    series whose package-index wheels pin that line (none: no torch uses it yet)."""

    version: str
    released: str
    torch: tuple[str, ...]
    source: str
    checked: str = ""
    origin: str = "compat.yaml"

    @property
    def line(self) -> str:
        """The CUDA line (``13.4`` of 13.4.3): a row's identity across overlays."""
        return ".".join(str(n) for n in Version(self.version).release[:2])


@dataclass(frozen=True)
class BaseImage:
    distro: str
    python: str
    match: tuple[str, ...]
    source: str
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class ArchInfo:
    arch: str
    family: str
    products: tuple[str, ...]
    official: str = ""
    #: APU graphics (an iGPU): a discrete GPU beside it is preferred.
    integrated: bool = False
    origin: str = "compat.yaml"
    #: Where the arch exists: ``tegra`` (Jetson on L4T), ``linux/arm64``; "" = anywhere.
    platform: str = ""
    #: How sure the table is that the package index's wheels run the arch (``official``
    #: says why when not verified).
    confidence: Confidence = "verified"
    #: Where the row's facts (family, products, integrated, platform) come from, and when
    #: they were last compared with it ("" when the row predates per-row sources).
    source: str = ""
    checked: str = ""


@dataclass(frozen=True)
class PciProduct:
    """An AMD PCI device id, its product name and arch (``amd_pci_ids``)."""

    device_id: int
    product: str
    arch: str


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
    origin: str = "compat.yaml"

    def installable(self, python: str) -> tuple[str, ...]:
        """Versions of the series that have a wheel for ``python``."""
        return _installable(
            self.versions, self.python_min, self.python_max, self.python_from, python
        )


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
    amd_pci_ids: tuple[PciProduct, ...] = ()
    #: (fragment of an NVIDIA driver model name, arch), longest fragment first.
    nvidia_model_names: tuple[tuple[str, str], ...] = ()
    #: The files merged into this table, shipped table first, then each overlay in the
    #: order applied (a later file's rows replace an earlier one's).
    layers: tuple[str, ...] = ("compat.yaml",)
    #: Where Jetson (Tegra) users get torch (``tegra:``), None when not stated.
    tegra: TegraRoute | None = None
    #: CUDA toolkit lines on the package index, oldest first (``cuda_toolkits:``).
    cuda_toolkits: tuple[CudaToolkit, ...] = ()

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
        pattern = _source_keys(self.sources)
        if pattern is None:
            return text
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

    def arch_platform(self, arch: str) -> str:
        """Where the arch exists: ``tegra``, ``linux/arm64``; "" when anywhere."""
        info = self.arch_info(arch)
        return "" if info is None else info.platform

    def is_integrated(self, arch: str) -> bool:
        """The arch is APU graphics (``integrated: true`` in ``amd_archs``)."""
        info = self.arch_info(arch)
        return info is not None and info.integrated

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

    def amd_pci_product(self, device_id: int) -> PciProduct | None:
        """An AMD PCI device id (``0x73df``) → its product and arch; None if not listed."""
        for item in self.amd_pci_ids:
            if item.device_id == device_id:
                return item
        return None

    def arch_for_model(self, model: str) -> str | None:
        """An NVIDIA driver model name (``NVIDIA H100 80GB HBM3``) → arch, by the longest
        listed fragment it contains (case-insensitive); None when none is."""
        text = model.lower()
        hits = [(f, arch) for f, arch in self.nvidia_model_names if f.lower() in text]
        if not hits:
            return None
        # the longest fragment wins ("Quadro RTX" over a "RTX 40" that also matches
        # "Quadro RTX 4000"); on a tie, the first listed
        return max(hits, key=lambda hit: len(hit[0]))[1]

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
            out.extend(same_major_lower(arch))
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
            if any(_glob_match(ref, pattern) for pattern in entry.match):
                return entry
        return None

    def distro_python(self, image: str) -> str | None:
        entry = self.base_image(image)
        return None if entry is None else entry.python

    # ------------------------------------------------------------------ NumPy

    def numpy_installable(self, python: str) -> tuple[str, ...]:
        """Every NumPy version the table knows with a Linux wheel for ``python``."""
        return _numpy_installable(self.numpy_releases, python)


@functools.lru_cache(maxsize=1024)
def _installable(
    versions: tuple[str, ...],
    low: str,
    high: str,
    python_from: tuple[tuple[str, str], ...],
    python: str,
) -> tuple[str, ...]:
    """:meth:`NumpyRelease.installable`, once per release and Python (a solve asks often)."""
    if not py_tuple(low) <= py_tuple(python) <= py_tuple(high):
        return ()
    first = dict(python_from).get(python)
    if first is None:
        return versions
    lowest = Version(first)
    return tuple(v for v in versions if Version(v) >= lowest)


@functools.lru_cache(maxsize=64)
def _numpy_installable(releases: tuple[NumpyRelease, ...], python: str) -> tuple[str, ...]:
    return tuple(v for n in releases for v in n.installable(python))


def _glob_match(text: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase`` without compiling a regular expression for the patterns of
    ``base_images`` (``ubuntu:22.04*``, ``nvidia/cuda:*ubuntu22.04``): ``*`` only."""
    if any(c in pattern for c in "?[]"):
        return fnmatch.fnmatchcase(text, pattern)
    first, *middle_last = pattern.split("*")
    if not middle_last:
        return text == pattern
    *middle, last = middle_last
    if len(text) < len(first) + len(last) or not text.startswith(first):
        return False
    if not text.endswith(last):
        return False
    at, end = len(first), len(text) - len(last)
    for part in middle:
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


@functools.lru_cache(maxsize=8)
def _source_keys(sources: tuple[tuple[str, str], ...]) -> re.Pattern[str] | None:
    """The pattern of every short source key (one per table: cite runs for every reason)."""
    keys = [re.escape(k) for k, _ in sources]
    return re.compile(r"\b(" + "|".join(keys) + r")\b") if keys else None


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


__all__ = [
    "ARCH_PLATFORMS",
    "INDEX_FORMS",
    "OVERRIDE_STATUSES",
    "PLATFORMS",
    "ArchInfo",
    "BaseImage",
    "BrokenArch",
    "CompatTable",
    "CudaToolkit",
    "DriverFloor",
    "IndexForm",
    "JetPack",
    "Kind",
    "NumpyRelease",
    "Override",
    "OverrideStatus",
    "PciProduct",
    "PlatformBuild",
    "PythonException",
    "Release",
    "TegraRoute",
    "Variant",
    "base_version",
    "local_label",
    "normalize_image",
    "py_tuple",
    "series_of",
]
