"""A torch release series of the compatibility table and its wheel variants, as frozen
values: :class:`Release` (the series, its versions and CPython range) holds one
:class:`Variant` per accelerator build (``rocm5.2``, ``cu126``, ``cpu``): its index URL,
CPython range, local version label, the AMD or CUDA SM archs its wheels carry (and those
listed but broken), its wheels for other platforms and, for Jetson, the JetPack lines.

:mod:`envforge.knowledge.table` holds the table around them (overrides, driver floors,
base images, arch facts, PCI ids) and re-exports these names;
:mod:`envforge.knowledge.release` reads them from the YAML.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Literal

from envforge.core.patterns import Confidence
from envforge.knowledge.arch import sm_covered
from envforge.knowledge.platforms import PLATFORMS as _PLATFORMS

IndexForm = Literal["index-url", "extra-index-url"]
Kind = Literal["rocm", "cuda", "cpu"]

INDEX_FORMS: tuple[IndexForm, ...] = ("index-url", "extra-index-url")
#: Wheel platforms (docker's names): the table's top-level ``sm``/``python`` facts are
#: linux/amd64's; a variant's ``platforms:`` gives the others.
PLATFORMS = _PLATFORMS


# --------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=256)
def py_tuple(version: str) -> tuple[int, ...]:
    """``"3.10"`` → ``(3, 10)`` for ordering CPython versions (a solve compares thousands)."""
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


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class BrokenArch:
    """An arch compiled into a wheel whose kernels still cannot run."""

    arch: str
    reason: str
    source: str
    confidence: Confidence
    #: The table file the fact came from (``compat.yaml`` or an overlay's path).
    origin: str = "compat.yaml"


@dataclass(frozen=True)
class PythonException:
    """A torch version of the series whose variant has another CPython range."""

    versions: tuple[str, ...]
    python_min: str
    python_max: str
    source: str


@dataclass(frozen=True)
class PlatformBuild:
    """A variant's wheels for another platform than linux/amd64 (``platforms:`` rows):
    their SASS/PTX (CUDA) and CPython range, each with its source."""

    platform: str
    archs: tuple[str, ...]
    ptx: str | None
    arch_source: str
    arch_uncertain: bool
    python_min: str
    python_max: str
    python_source: str


@dataclass(frozen=True)
class JetPack:
    """One JetPack line for Jetson boards (``tegra.jetpacks`` rows): its L4T release and
    CUDA, the Jetson archs it serves, which wheels run there and NVIDIA's route."""

    jetpack: str
    l4t: str
    cuda: str
    archs: tuple[str, ...]
    #: ``tegra``: only NVIDIA's Jetson wheels run; ``linux/arm64``: the package index's
    #: server arm64 (SBSA) wheels run too (JetPack 7.2 on Orin).
    wheels: str
    route: str
    source: str
    confidence: Confidence = "community"

    @property
    def label(self) -> str:
        return f"JetPack {self.jetpack} (L4T {self.l4t}, CUDA {self.cuda})"


@dataclass(frozen=True)
class TegraRoute:
    """Where Jetson (Tegra, L4T) users get torch: not the package index's wheels, except
    on the JetPack lines whose ``wheels`` say otherwise."""

    route: str
    source: str
    origin: str = "compat.yaml"
    jetpacks: tuple[JetPack, ...] = ()

    def for_arch(self, arch: str) -> tuple[JetPack, ...]:
        """The JetPack lines that serve ``arch``, oldest first."""
        return tuple(j for j in self.jetpacks if arch in j.archs)

    def running(self, arch: str, platform: str) -> JetPack | None:
        """The newest JetPack line on which ``platform``'s wheels run ``arch``."""
        return next((j for j in reversed(self.for_arch(arch)) if j.wheels == platform), None)


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
    #: The table file the row came from (``compat.yaml`` or an overlay's path).
    origin: str = "compat.yaml"
    #: (arch, table file) for archs that come from another file than the row (ROCm
    #: variants take their archs from the ``rocm_archs`` rows).
    arch_origins: tuple[tuple[str, str], ...] = ()

    def arch_origin(self, arch: str) -> str:
        """The table file that says ``arch`` is (or is not) in this wheel."""
        return dict(self.arch_origins).get(arch, self.origin)

    #: Wheels for other platforms than linux/amd64 (whose facts are the fields above).
    platforms: tuple[PlatformBuild, ...] = ()
    #: (torch version, CPythons) whose linux/amd64 wheel file of this variant has been
    #: seen (``python_files``), where the range itself is only assumed ([?]); its source.
    python_files: tuple[tuple[str, tuple[str, ...]], ...] = ()
    python_files_source: str = ""

    def python_seen(self, torch_version: str, python: str) -> bool:
        """A wheel file of this variant for ``torch_version`` and ``python`` was seen."""
        return python in dict(self.python_files).get(base_version(torch_version), ())

    def for_platform(self, platform: str) -> Variant | None:
        """This variant as its wheels for ``platform`` are (SASS/PTX, CPython range), or
        None when the table has no row saying it publishes wheels for that platform."""
        if platform == PLATFORMS[0]:
            return self
        for b in self.platforms:
            if b.platform == platform:
                return replace(
                    self,
                    archs=b.archs,
                    archs_uncertain=b.archs if b.arch_uncertain else (),
                    arch_sources=tuple((a, b.arch_source) for a in b.archs),
                    ptx=b.ptx,
                    python_min=b.python_min,
                    python_max=b.python_max,
                    python_source=b.python_source,
                    python_exceptions=(),
                    platforms=(),
                    python_files=(),
                    python_files_source="",
                )
        return None


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
    #: The table file the release-level facts came from (variants carry their own).
    origin: str = "compat.yaml"

    def variant(self, name: str) -> Variant | None:
        for v in self.variants:
            if v.name == name:
                return v
        return None

    @property
    def variant_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)
