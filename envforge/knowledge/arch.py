"""GPU archs as values: AMD gfx targets and NVIDIA SM archs (pure; no I/O, no table).

Every spelling envforge meets is converted here, and only here:

==========================  =====================  ==========================================
spelling                    example                functions
==========================  =====================  ==========================================
LLVM gfx target             ``gfx1030``, ``gfx90a``  :func:`parse_gfx`, :attr:`Gfx.name`
HSA ISA version /           ``10.3.0``, ``9.0.10``   :func:`gfx_from_isa`, :func:`isa_from_gfx`
``HSA_OVERRIDE_GFX_VERSION``
HSA ISA name                ``amdgcn-amd-amdhsa--gfx90a:xnack-``  :func:`gfx_from_hsa_isa`
KFD ``gfx_target_version``  ``100300``, ``90010``  :func:`gfx_from_target_version`,
                                                   :func:`target_version`
target with features        ``gfx942:sramecc+:xnack-``  :func:`strip_features`
NVIDIA SASS arch            ``sm_86``, ``sm_90a``    :func:`parse_sm`, :attr:`Sm.name`
compute capability          ``8.6``, ``12.0``        :func:`sm_from_compute_cap`,
                                                   :func:`compute_cap`
==========================  =====================  ==========================================

A gfx name writes the major in decimal and the minor and stepping as one hex digit each
(``gfx90a`` is 9.0.10); KFD writes major*10000 + minor*100 + stepping, each field
decimal. Minor and stepping above 15 have no gfx name, so they give None.

Ordering (:func:`sort_key`) is numeric (gfx906 < gfx90a < gfx1010 < gfx1100), families
(:func:`family`) group archs by major and minor (``gfx103x``, ``gfx110x``, ``sm_8x``),
and :func:`sm_covered` is CUDA's binary compatibility rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from envforge.core.patterns import GFX_RE, ISA_RE, SM_RE

Vendor = Literal["amd", "nvidia"]

#: Compute capabilities of shipped NVIDIA GPUs (CUDA GPUs list, developer.nvidia.com).
NVIDIA_COMPUTE_CAPABILITIES = (
    "sm_35",
    "sm_37",
    "sm_50",
    "sm_52",
    "sm_53",
    "sm_60",
    "sm_61",
    "sm_62",
    "sm_70",
    "sm_72",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_89",
    "sm_90",
    "sm_100",
    "sm_101",
    "sm_103",
    "sm_110",
    "sm_120",
    "sm_121",
)

#: The HSA ISA name prefix (``rocminfo``'s ISA ``Name:``, code-object targets).
HSA_ISA_PREFIX = "amdgcn-amd-amdhsa--"
_MAX_FIELD = 15  # minor and stepping are one hex digit in a gfx name
_MAX_MAJOR = 99  # two decimal digits in a gfx name


# --------------------------------------------------------------------------- AMD


@dataclass(frozen=True, order=True)
class Gfx:
    """An AMD gfx target: ``Gfx(10, 3, 0)`` is ``gfx1030``; ordered numerically."""

    major: int
    minor: int
    stepping: int

    def __post_init__(self) -> None:
        if not (
            0 < self.major <= _MAX_MAJOR
            and 0 <= self.minor <= _MAX_FIELD
            and 0 <= self.stepping <= _MAX_FIELD
        ):
            raise ValueError(f"no gfx name for {self.major}.{self.minor}.{self.stepping}")

    @property
    def name(self) -> str:
        return f"gfx{self.major}{self.minor:x}{self.stepping:x}"

    @property
    def isa(self) -> str:
        """The ISA version, as ``HSA_OVERRIDE_GFX_VERSION`` takes it: ``10.3.0``."""
        return f"{self.major}.{self.minor}.{self.stepping}"

    @property
    def target_version(self) -> int:
        """KFD's ``gfx_target_version``: ``100300``."""
        return self.major * 10000 + self.minor * 100 + self.stepping

    @property
    def hsa_isa(self) -> str:
        """The HSA ISA name: ``amdgcn-amd-amdhsa--gfx1030``."""
        return HSA_ISA_PREFIX + self.name

    @property
    def family(self) -> str:
        """``gfx1031`` → ``gfx103x`` (same major and minor)."""
        return f"gfx{self.major}{self.minor:x}x"

    def __str__(self) -> str:
        return self.name


def _gfx(major: int, minor: int, stepping: int) -> Gfx | None:
    try:
        return Gfx(major, minor, stepping)
    except ValueError:
        return None


def parse_gfx(name: str) -> Gfx | None:
    """``gfx1030`` / ``gfx90a`` / ``gfx1151`` → :class:`Gfx`; None if not a gfx name."""
    m = GFX_RE.match(name)
    if not m:
        return None
    return _gfx(int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16))


def strip_features(target: str) -> str:
    """``gfx942:sramecc+:xnack-`` → ``gfx942`` (target features are not part of the arch)."""
    return target.split(":", 1)[0].strip()


def gfx_from_isa(isa: str) -> str | None:
    """``"10.3.0"`` → ``"gfx1030"``, ``"9.0.10"`` → ``"gfx90a"``; None if not an ISA version."""
    m = ISA_RE.match(isa.strip())
    if not m:
        return None
    gfx = _gfx(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return None if gfx is None else gfx.name


def isa_from_gfx(arch: str) -> str | None:
    """``"gfx1030"`` → ``"10.3.0"``, ``"gfx90a"`` → ``"9.0.10"``; None if not a gfx name."""
    gfx = parse_gfx(arch)
    return None if gfx is None else gfx.isa


def gfx_from_hsa_isa(name: str) -> str | None:
    """``amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`` → ``gfx90a``; None otherwise."""
    text = name.strip()
    if not text.startswith(HSA_ISA_PREFIX):
        return None
    gfx = parse_gfx(strip_features(text[len(HSA_ISA_PREFIX) :]))
    return None if gfx is None else gfx.name


def gfx_from_target_version(value: int) -> str | None:
    """KFD ``gfx_target_version`` → gfx name: 100100 → gfx1010, 90010 → gfx90a,
    90402 → gfx942. 0 (a CPU node), negatives and fields above 15 → None."""
    if value <= 0 or value >= (_MAX_MAJOR + 1) * 10000:
        return None
    major, rest = divmod(value, 10000)
    minor, stepping = divmod(rest, 100)
    gfx = _gfx(major, minor, stepping)
    return None if gfx is None else gfx.name


def target_version(arch: str) -> int | None:
    """``gfx1030`` → 100300 (KFD's ``gfx_target_version``); None if not a gfx name."""
    gfx = parse_gfx(arch)
    return None if gfx is None else gfx.target_version


# --------------------------------------------------------------------------- NVIDIA


@dataclass(frozen=True, order=True)
class Sm:
    """An NVIDIA SASS arch: ``Sm(9, 0)`` is ``sm_90``; ``suffix`` ``a`` (arch-specific,
    runs only on that arch) or ``f`` (family-specific, same major)."""

    major: int
    minor: int
    suffix: str = ""

    def __post_init__(self) -> None:
        if not (1 <= self.major <= 99 and 0 <= self.minor <= 9 and self.suffix in ("", "a", "f")):
            raise ValueError(f"no SM name for {self.major}.{self.minor}{self.suffix}")

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def compute_cap(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def family(self) -> str:
        """``sm_86`` → ``sm_8x`` (same major: SASS-compatible)."""
        return f"sm_{self.major}x"

    def __str__(self) -> str:
        return self.name


def parse_sm(name: str) -> Sm | None:
    """``sm_86`` / ``sm_90a`` / ``sm_120`` → :class:`Sm`; None if not an SM name."""
    m = SM_RE.match(name)
    if not m:
        return None
    number = int(m.group(1))
    try:
        return Sm(number // 10, number % 10, m.group(2))
    except ValueError:
        return None


def sm_from_compute_cap(cap: str) -> str | None:
    """``9.0`` → ``sm_90``; ``12.0`` → ``sm_120``; anything else → None."""
    major, sep, minor = cap.strip().partition(".")
    if (
        not sep
        or not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit())
        or len(major) > 2
        or len(minor) > 1
    ):
        return None
    try:
        return Sm(int(major), int(minor)).name
    except ValueError:
        return None


def compute_cap(arch: str) -> str | None:
    """``sm_90`` → ``9.0``; None if not an SM name."""
    sm = parse_sm(arch)
    return None if sm is None else sm.compute_cap


def sm_number(arch: str) -> tuple[int, int, bool] | None:
    """``"sm_86"`` → ``(8, 6, False)``, ``"sm_90a"`` → ``(9, 0, True)`` (arch-specific)."""
    sm = parse_sm(arch)
    return None if sm is None else (sm.major, sm.minor, sm.suffix == "a")


def sass_runs_on(built: str, gpu: str) -> bool:
    """Does SASS built for ``built`` run on a GPU of ``gpu``?

    CUDA binary compatibility: sm_XY runs on sm_XZ with Z >= Y (same major); ``f``
    (family) builds likewise; ``a`` (arch-specific) builds only where the GPU is named
    by that exact arch (``sm_90a`` code is not counted for a plain ``sm_90``).
    """
    b, g = parse_sm(built), parse_sm(gpu)
    if b is None or g is None:
        return False
    if b.suffix == "a":
        return b == g
    return b.major == g.major and b.minor <= g.minor


def sm_covered(arch: str, sass: Sequence[str], ptx: str | None = None) -> bool:
    """Can a GPU of ``arch`` run a wheel built for ``sass`` (+ PTX of ``ptx``)?

    SASS by :func:`sass_runs_on`; embedded PTX is JIT-compiled for any newer arch.
    """
    gpu = parse_sm(arch)
    if gpu is None:
        return False
    if any(sass_runs_on(item, arch) for item in sass):
        return True
    if ptx is not None:
        p = parse_sm(ptx)
        if p is not None and (gpu.major, gpu.minor) >= (p.major, p.minor):
            return True
    return False


def same_major_lower(arch: str) -> list[str]:
    """Known SMs whose SASS runs on ``arch`` (same major, lower minor), highest first."""
    gpu = parse_sm(arch)
    if gpu is None or gpu.suffix:
        return []
    lower = [
        s
        for a in NVIDIA_COMPUTE_CAPABILITIES
        if (s := parse_sm(a)) is not None and s.major == gpu.major and s.minor < gpu.minor
    ]
    return [s.name for s in sorted(lower, reverse=True)]


# --------------------------------------------------------------------------- both


def vendor_of(arch: str) -> Vendor | None:
    """``gfx…`` → amd, ``sm_…`` → nvidia (by well-formed name only), else None."""
    if parse_gfx(arch) is not None:
        return "amd"
    if parse_sm(arch) is not None:
        return "nvidia"
    return None


def is_device_arch(arch: str) -> bool:
    """A name a GPU itself can have: a gfx target or a plain ``sm_XY`` (no a/f suffix)."""
    if parse_gfx(arch) is not None:
        return True
    sm = parse_sm(arch)
    return sm is not None and not sm.suffix


def family(arch: str) -> str | None:
    """``gfx1031`` → ``gfx103x``, ``gfx90a`` → ``gfx90x``, ``sm_86`` → ``sm_8x``."""
    gfx = parse_gfx(arch)
    if gfx is not None:
        return gfx.family
    sm = parse_sm(arch)
    return None if sm is None else sm.family


def sort_key(arch: str) -> tuple[int, int, int, int, str]:
    """Numeric order: AMD before NVIDIA, then (major, minor, stepping); unknown names last."""
    gfx = parse_gfx(arch)
    if gfx is not None:
        return (0, gfx.major, gfx.minor, gfx.stepping, "")
    sm = parse_sm(arch)
    if sm is not None:
        return (1, sm.major, sm.minor, 0, sm.suffix)
    return (2, 0, 0, 0, arch)


def ordinal(arch: str) -> int | None:
    """A number whose differences measure how far apart two archs of a vendor are."""
    gfx = parse_gfx(arch)
    if gfx is not None:
        return gfx.major * 256 + gfx.minor * 16 + gfx.stepping
    sm = parse_sm(arch)
    return None if sm is None else sm.major * 10 + sm.minor
