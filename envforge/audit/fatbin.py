"""GPU code containers inside a shared object, read from its section only (stdlib; Python 3.9).

NVIDIA ``.nv_fatbin``: one or more fatbin containers, each a 16-byte header (magic
``0xBA55ED50``, version 1, header size, size of what follows) and entries one after the
other: a header (``kind`` 1 = PTX, 2 = ELF/SASS; its own header size; payload size; the
SM arch at byte 28; flags at byte 40, ``0x2000``/``0x8000`` = compressed) and the
payload. Only the headers are read: the walk seeks from one to the next, so a section
of hundreds of MB costs a few thousand small reads.

AMD ``.hip_fatbin``: clang offload bundles (``__CLANG_OFFLOAD_BUNDLE__``, an entry count,
then per entry offset, size and an id such as ``hipv4-amdgcn-amd-amdhsa--gfx1030``), or
compressed bundles (``CCOB``, version, method 0 = zlib / 1 = zstd, sizes, hash). A
compressed bundle is opened when the stdlib can decompress it (zlib; zstd from Python
3.14), only as far as its entry table; otherwise it is reported as compressed with its
targets unknown, never guessed.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO

NV_MAGIC = 0xBA55ED50
NV_KIND_PTX = 1
NV_KIND_ELF = 2
NV_FLAG_COMPRESSED = 0x2000 | 0x8000
_NV_HEADER = struct.Struct("<IHHQ")
_NV_ENTRY = struct.Struct("<HHIQIIHHIIIQ")  # up to and including the flags
#: Entries per section at most (the largest real library has a few thousand).
MAX_ENTRIES = 200_000

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
#: How far past a bundle's end the next one is looked for (bundles are page-aligned).
BUNDLE_GAP = 64 * 1024
_MAX_BUNDLE_ENTRIES = 4096
_MAX_ID = 1024


@dataclass(frozen=True)
class NvidiaCode:
    """What a ``.nv_fatbin`` section holds: SASS and PTX archs (``sm_80``), sorted."""

    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    entries: int
    compressed: int = 0
    #: Why the section could not be read to its end (what was read is kept).
    problem: str | None = None
    #: The section's size in bytes.
    size: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "sass": list(self.sass),
            "ptx": list(self.ptx),
            "entries": self.entries,
            "compressed": self.compressed,
            "problem": self.problem,
            "size": self.size,
        }


@dataclass(frozen=True)
class AmdCode:
    """What a ``.hip_fatbin`` section holds: the code objects' targets (``gfx90a:xnack-``)."""

    targets: tuple[str, ...]
    bundles: int
    #: Compressed bundles whose targets could not be read ("zstd"), each method once.
    unreadable: tuple[str, ...] = ()
    problem: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "targets": list(self.targets),
            "bundles": self.bundles,
            "unreadable": list(self.unreadable),
            "problem": self.problem,
        }


def _sm(arch: int) -> str:
    return f"sm_{arch}"


def read_nv_fatbin(f: BinaryIO, offset: int, size: int) -> NvidiaCode:
    """Walk the fatbin containers in ``size`` bytes at ``offset`` of ``f``."""
    end = offset + size
    pos = offset
    sass: set[int] = set()
    ptx: set[int] = set()
    entries = compressed = 0
    problem: str | None = None
    while pos + _NV_HEADER.size <= end and problem is None:
        f.seek(pos)
        head = f.read(_NV_HEADER.size)
        if len(head) < _NV_HEADER.size:
            problem = "section ends early"
            break
        magic, _version, header_size, body = _NV_HEADER.unpack(head)
        if magic != NV_MAGIC:
            pos += 8  # containers are 8-aligned; padding between them
            continue
        container_end = pos + header_size + body
        if container_end > end or header_size < _NV_HEADER.size:
            problem = f"a container at +{pos - offset:#x} runs past the section"
            break
        walk = _nv_entries(f, pos + header_size, container_end)
        entries += walk[0]
        compressed += walk[1]
        sass.update(walk[2])
        ptx.update(walk[3])
        problem = walk[4]
        if entries > MAX_ENTRIES:
            problem = f"more than {MAX_ENTRIES} entries"
        pos = container_end
    return NvidiaCode(
        tuple(_sm(a) for a in sorted(sass)),
        tuple(_sm(a) for a in sorted(ptx)),
        entries,
        compressed,
        problem,
        size,
    )


def _nv_entries(f: BinaryIO, pos: int, end: int) -> tuple[int, int, set[int], set[int], str | None]:
    """(entries, compressed, SASS archs, PTX archs, problem) of one container."""
    count = compressed = 0
    sass: set[int] = set()
    ptx: set[int] = set()
    while pos + _NV_ENTRY.size <= end:
        f.seek(pos)
        raw = f.read(_NV_ENTRY.size)
        if len(raw) < _NV_ENTRY.size:
            return count, compressed, sass, ptx, "section ends early"
        fields = _NV_ENTRY.unpack(raw)
        kind, header_size, size, arch, flags = (
            fields[0],
            fields[2],
            fields[3],
            fields[8],
            fields[11],
        )
        if header_size < _NV_ENTRY.size or pos + header_size + size > end:
            return count, compressed, sass, ptx, f"a malformed entry (header size {header_size})"
        count += 1
        if flags & NV_FLAG_COMPRESSED:
            compressed += 1
        if kind == NV_KIND_PTX:
            ptx.add(arch)
        elif kind == NV_KIND_ELF:
            sass.add(arch)
        pos += header_size + size
    return count, compressed, sass, ptx, None


# --------------------------------------------------------------------------- AMD


def read_hip_fatbin(f: BinaryIO, offset: int, size: int) -> AmdCode:
    """Walk the offload bundles in ``size`` bytes at ``offset`` of ``f``."""
    end = offset + size
    pos = offset
    targets: set[str] = set()
    unreadable: set[str] = set()
    bundles = 0
    problem: str | None = None
    while pos < end:
        found = _find_magic(f, pos, min(end, pos + BUNDLE_GAP))
        if found is None:
            break
        pos = found
        f.seek(pos)
        magic = f.read(len(BUNDLE_MAGIC))
        bundles += 1
        if magic == BUNDLE_MAGIC:
            ids, bundle_end, problem = _bundle_ids(f, pos, end)
        else:
            ids, bundle_end, method, problem = _compressed_ids(f, pos, end)
            if method is not None:
                unreadable.add(method)
        targets.update(_target(i) for i in ids if _target(i))
        if problem is not None or bundle_end <= pos:
            break
        pos = bundle_end
    return AmdCode(tuple(sorted(targets)), bundles, tuple(sorted(unreadable)), problem)


def _find_magic(f: BinaryIO, start: int, stop: int) -> int | None:
    if stop <= start:
        return None
    f.seek(start)
    window = f.read(stop - start)
    hits = [i for i in (window.find(BUNDLE_MAGIC), window.find(CCOB_MAGIC)) if i >= 0]
    return start + min(hits) if hits else None


def _target(bundle_id: str) -> str:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` → ``gfx90a:xnack-``; host entries → ""."""
    if not bundle_id.startswith("hip") or "--" not in bundle_id:
        return ""
    return bundle_id.split("--", 1)[1]


def parse_bundle_table(data: bytes) -> tuple[list[str], int] | None:
    """(entry ids, the bundle's length) of an uncompressed bundle starting ``data``; None
    when ``data`` is too short to hold its table."""
    at = len(BUNDLE_MAGIC)
    if len(data) < at + 8:
        return None
    (count,) = struct.unpack_from("<Q", data, at)
    if count > _MAX_BUNDLE_ENTRIES:
        raise ValueError(f"{count} entries in one bundle")
    at += 8
    ids: list[str] = []
    length = at
    for _ in range(count):
        if len(data) < at + 24:
            return None
        off, size, id_len = struct.unpack_from("<QQQ", data, at)
        if id_len > _MAX_ID:
            raise ValueError(f"an entry id of {id_len} bytes")
        at += 24
        if len(data) < at + id_len:
            return None
        ids.append(data[at : at + id_len].decode("ascii", errors="replace"))
        at += id_len
        length = max(length, at, off + size)
    return ids, length


def _bundle_ids(f: BinaryIO, pos: int, end: int) -> tuple[list[str], int, str | None]:
    want = 64 * 1024
    while True:
        f.seek(pos)
        data = f.read(min(want, end - pos))
        try:
            table = parse_bundle_table(data)
        except ValueError as exc:
            return [], pos, f"a malformed offload bundle: {exc}"
        if table is not None:
            ids, length = table
            return ids, pos + length, None
        if len(data) < want:
            return [], pos, "an offload bundle's table runs past the section"
        want *= 4


_CCOB_HEADERS = {
    1: struct.Struct("<4sHHIQ"),
    2: struct.Struct("<4sHHIIQ"),
    3: struct.Struct("<4sHHQQQ"),
}
_METHODS = {0: "zlib", 1: "zstd"}


def _compressed_ids(
    f: BinaryIO, pos: int, end: int
) -> tuple[list[str], int, str | None, str | None]:
    """(entry ids, the bundle's end, the method when unreadable, problem) of a CCOB bundle."""
    f.seek(pos)
    head = f.read(8)
    if len(head) < 8:
        return [], pos, None, "a compressed bundle's header runs past the section"
    version, method_code = struct.unpack_from("<HH", head, 4)
    header = _CCOB_HEADERS.get(version)
    method = _METHODS.get(method_code, f"method {method_code}")
    if header is None:
        return [], pos, f"{method}, version {version}", None
    f.seek(pos)
    fields = header.unpack(f.read(header.size))
    total = int(fields[3]) if version >= 2 else 0
    bundle_end = pos + total if total else pos + header.size
    data = _decompress_head(f, pos + header.size, min(end, bundle_end if total else end), method)
    if data is None:
        return [], bundle_end, method, None
    try:
        table = parse_bundle_table(data)
    except ValueError:
        table = None
    if table is None:
        return [], bundle_end, method, None
    return table[0], bundle_end, None, None


def _decompress_head(f: BinaryIO, start: int, stop: int, method: str) -> bytes | None:
    """The first bytes (enough for the entry table) of a compressed bundle, or None."""
    decomp = _decompressor(method)
    if decomp is None:
        return None
    f.seek(start)
    out = b""
    left = stop - start
    try:
        while left > 0 and len(out) < 256 * 1024:
            chunk = f.read(min(left, 64 * 1024))
            if not chunk:
                break
            left -= len(chunk)
            out += decomp.decompress(chunk, 256 * 1024 - len(out))
            if out.startswith(BUNDLE_MAGIC) and parse_bundle_table(out) is not None:
                return out
    except Exception:  # any decoder error means: targets unknown
        return None
    return out or None


class _Decomp:
    def __init__(self, method: str) -> None:
        self.method = method
        self.obj: object = None

    def decompress(self, data: bytes, limit: int) -> bytes:
        out = self.obj.decompress(data, limit)  # type: ignore[attr-defined]
        return bytes(out)


def _decompressor(method: str) -> _Decomp | None:
    if method == "zlib":
        d = _Decomp(method)
        d.obj = zlib.decompressobj()
        return d
    if method == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
        except ImportError:
            return None
        d = _Decomp(method)
        d.obj = zstd.ZstdDecompressor()
        return d
    return None
