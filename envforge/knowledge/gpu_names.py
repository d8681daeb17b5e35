"""GPUs by the names people use: ``"RX 7900 XTX"``, ``"GeForce RTX 3060"``, ``"H200"``,
``"MI300X"``, ``"Strix Halo"`` → the arch, through the compatibility table's names.

The names are the table's: each ``amd_archs`` / ``nvidia_archs`` row's ``products``, AMD
families' code names (``RDNA3.5 Strix Halo APU`` → ``Strix Halo``, ``RDNA3 Navi 31`` →
``Navi 31``), the AMD PCI ids' products and the NVIDIA driver model fragments ``detect``
matches. Matching is by words, case-insensitive, vendor and brand words left out
(``AMD``, ``NVIDIA``, ``Radeon``, ``RX``, ``GeForce``, ``Instinct``):

1. a name equal to the asked one → its arch;
2. else names the asked one contains (``RTX 4090 24GB``), the longest wins, as in
   ``detect``;
3. else the asked one is part of names (``Radeon 7900``, ``MI300``): inexact, exit 2
   naming those products with their archs (``RX 7900 XTX / RX 7900 XT / RX 7900 GRE →
   gfx1100``), never archs whose names do not match;
4. nothing: exit 2 saying so.

An arch's own name (``gfx1100``, ``SM_89``) is taken as is. Pure: a
:class:`~envforge.knowledge.table.CompatTable` in, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from envforge.errors import InvalidInput
from envforge.knowledge.arch import is_device_arch, sort_key
from envforge.knowledge.table import CompatTable

#: Words that name a vendor or brand, not a GPU: left out on both sides.
BRAND_WORDS = frozenset({"amd", "nvidia", "radeon", "rx", "geforce", "instinct"})

#: How many candidate products an inexact name's error lists at most.
MAX_LISTED = 12

_FAMILY = re.compile(r"^(?:RDNA|GCN|CDNA)[\d.]*\s+(?P<name>[^()]+?)(?:\s+(?:APU|iGPU))?$")
_HINT = (
    'name the GPU as the table does (envforge show "RX 7900 XTX", envforge solve H200)'
    " or its arch (gfx1100, sm_89); envforge detect shows this host's"
)


@dataclass(frozen=True)
class GpuName:
    """One name the table gives a GPU: the name as written, its words, its arch."""

    name: str
    words: tuple[str, ...]
    arch: str


def words(text: str) -> tuple[str, ...]:
    """``"AMD Radeon RX 7900 XTX"`` → ``("7900", "xtx")``: lower case, split on spaces,
    hyphens and underscores, brand words left out."""
    parts = re.split(r"[\s\-_]+", text.strip().lower())
    return tuple(p for p in parts if p and p not in BRAND_WORDS)


def _named(table: CompatTable) -> Iterator[tuple[str, str]]:
    for info in (*table.amd_archs, *table.nvidia_archs):
        for product in info.products:
            yield product, info.arch
    for info in table.amd_archs:
        match = _FAMILY.match(info.family.strip())
        if match:
            yield match.group("name"), info.arch
    for pci in table.amd_pci_ids:
        yield pci.product, pci.arch
    yield from table.nvidia_model_names


def gpu_names(table: CompatTable) -> tuple[GpuName, ...]:
    """Every name the table gives a GPU, once per (words, arch)."""
    seen: set[tuple[tuple[str, ...], str]] = set()
    out: list[GpuName] = []
    for name, arch in _named(table):
        key = (words(name), arch)
        if key[0] and key not in seen:
            seen.add(key)
            out.append(GpuName(name, key[0], arch))
    return tuple(out)


def _within(part: tuple[str, ...], whole: tuple[str, ...], *, prefix: bool = False) -> bool:
    """``part`` is a run of ``whole``'s words (``prefix``: each word starts one)."""
    n = len(part)
    for i in range(len(whole) - n + 1):
        if all(w.startswith(p) if prefix else w == p for p, w in zip(part, whole[i : i + n])):
            return True
    return False


@dataclass(frozen=True)
class NameMatch:
    """What a name matched: the arch when it is one, else the candidates (empty: none)."""

    asked: str
    arch: str | None
    candidates: tuple[GpuName, ...] = ()

    def listing(self) -> str:
        """``RX 7900 XTX / RX 7900 XT / RX 7900 GRE → gfx1100; …`` (arch order)."""
        by_arch: dict[str, list[str]] = {}
        for c in self.candidates[:MAX_LISTED]:
            names = by_arch.setdefault(c.arch, [])
            if c.name not in names:
                names.append(c.name)
        archs = sorted(by_arch, key=sort_key)
        more = len(self.candidates) - MAX_LISTED
        tail = f"; and {more} more" if more > 0 else ""
        return "; ".join(f"{' / '.join(by_arch[a])} → {a}" for a in archs) + tail


def match_gpu(text: str, table: CompatTable) -> NameMatch:
    """Match ``text`` against the table's GPU names (see the module docstring)."""
    asked = words(text)
    if not asked:
        return NameMatch(text, None)
    names = gpu_names(table)
    exact = [n for n in names if n.words == asked]
    if exact:
        return _one(text, exact)
    inside = [n for n in names if _within(n.words, asked)]
    if inside:
        longest = max(len(n.words) for n in inside)
        return _one(text, [n for n in inside if len(n.words) == longest])
    partial = [n for n in names if _within(asked, n.words, prefix=True)]
    partial.sort(key=lambda n: sort_key(n.arch))  # stable: the table's order within an arch
    return NameMatch(text, None, tuple(partial))


def _one(text: str, hits: list[GpuName]) -> NameMatch:
    archs = {n.arch for n in hits}
    if len(archs) == 1:
        return NameMatch(text, hits[0].arch)
    hits.sort(key=lambda n: sort_key(n.arch))
    return NameMatch(text, None, tuple(hits))


def arch_for_name(text: str, table: CompatTable, *, what: str = "") -> str:
    """The arch ``text`` names: an arch as is (lower case), else a GPU name the table
    knows (:func:`match_gpu`). Exit 2 (:class:`InvalidInput`) for an ambiguous or
    inexact name, listing the candidates with their archs, or for no match; ``what``
    (``--arch``) leads the message."""
    plain = text.strip().lower()
    if is_device_arch(plain):
        return plain
    found = match_gpu(text, table)
    if found.arch is not None:
        return found.arch
    if found.candidates:
        raise InvalidInput(
            f"{what}{' ' if what else ''}{text!r} is not exactly one GPU the compatibility"
            f" table names; it may mean: {found.listing()}",
            hint="name one of them exactly (quoted) or its arch",
        )
    lead = f"{what} {text!r}: " if what else ""
    raise InvalidInput(f"{lead}the compatibility table names no GPU {text!r}", hint=_HINT)


def resolve_name(text: str, table: CompatTable) -> NameMatch:
    """:func:`match_gpu`, with an arch's own name (``gfx1100``) matched as itself."""
    plain = text.strip().lower()
    if is_device_arch(plain):
        return NameMatch(text, plain)
    return match_gpu(text, table)
