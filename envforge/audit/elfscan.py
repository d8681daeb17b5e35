"""A shared object's ELF facts, read with pyelftools (Python 3.9; no envforge imports).

Only what the audit judges is read, and only from the sections that hold it: the
dynamic section (``DT_SONAME``, ``DT_NEEDED``, ``DT_RPATH``, ``DT_RUNPATH``), the GPU code
sections (``.nv_fatbin``, ``.hip_fatbin``; walked header by header, see :mod:`.fatbin`)
and, for a Python extension module only, ``.rodata`` (the NumPy C-API import strings).
No file is read whole.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from .fatbin import AmdCode, NvidiaCode, read_hip_fatbin, read_nv_fatbin

#: A Python extension module's file name (``_C.cpython-311-x86_64-linux-gnu.so``, ``x.abi3.so``).
EXTENSION_RE = re.compile(r"\.(cpython-[^./]+|abi3|pypy[^./]*)\.so$")
#: The most of ``.rodata`` read to find the NumPy C-API strings.
MAX_RODATA = 64 * 1024 * 1024
NUMPY_API = b"_ARRAY_API"
NUMPY2_MODULE = b"numpy._core._multiarray_umath"
NUMPY1_MODULE = b"numpy.core._multiarray_umath"


@dataclass(frozen=True)
class ElfFacts:
    """What the audit needs to know of one shared object."""

    path: str
    size: int
    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    nvidia: NvidiaCode | None = None
    amd: AmdCode | None = None
    #: The NumPy C-API it was built against: "1" (imports only ``numpy.core``), "2"
    #: (``numpy._core``), None (no NumPy C-API, or not a Python extension module).
    numpy_api: str | None = None
    #: Why it could not be read (not an ELF file, truncated), else None.
    problem: str | None = None

    @property
    def extension_module(self) -> bool:
        """A Python C-extension (by its name), not a library other code links."""
        return bool(EXTENSION_RE.search(os.path.basename(self.path)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "soname": self.soname,
            "needed": list(self.needed),
            "rpath": list(self.rpath),
            "runpath": list(self.runpath),
            "nvidia": None if self.nvidia is None else self.nvidia.to_dict(),
            "amd": None if self.amd is None else self.amd.to_dict(),
            "numpy_api": self.numpy_api,
            "problem": self.problem,
        }


def facts_from_dict(data: dict[str, Any]) -> ElfFacts:
    """The inverse of :meth:`ElfFacts.to_dict` (facts read inside an image)."""
    nv, amd = data.get("nvidia"), data.get("amd")
    return ElfFacts(
        path=str(data["path"]),
        size=int(data.get("size") or 0),
        soname=data.get("soname"),
        needed=tuple(data.get("needed") or ()),
        rpath=tuple(data.get("rpath") or ()),
        runpath=tuple(data.get("runpath") or ()),
        nvidia=None
        if not nv
        else NvidiaCode(
            tuple(nv["sass"]),
            tuple(nv["ptx"]),
            int(nv["entries"]),
            int(nv["compressed"]),
            nv.get("problem"),
            int(nv.get("size") or 0),
        ),
        amd=None
        if not amd
        else AmdCode(
            tuple(amd["targets"]), int(amd["bundles"]), tuple(amd["unreadable"]), amd.get("problem")
        ),
        numpy_api=data.get("numpy_api"),
        problem=data.get("problem"),
    )


def scan(path: str) -> ElfFacts:
    """The facts of the shared object at ``path``; a file that is not one says why."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            return _scan(f, path, size)
    except (ELFError, OSError, ValueError, KeyError, AssertionError) as exc:
        # pyelftools raises these for a truncated or malformed file
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ElfFacts(path=path, size=0, problem=f"cannot be read as ELF: {reason}"[:300])


def _scan(f: BinaryIO, path: str, size: int) -> ElfFacts:
    if f.read(4) != b"\x7fELF":
        return ElfFacts(path=path, size=size, problem="not an ELF file")
    f.seek(0)
    elf = ELFFile(f)
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    nvidia = amd = None
    rodata = None
    for section in elf.iter_sections():
        name = section.name
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                kind = tag.entry.d_tag
                # pyelftools sets the string of a tag as an attribute named by it
                if kind == "DT_SONAME":
                    soname = str(getattr(tag, "soname", ""))
                elif kind == "DT_NEEDED":
                    needed.append(str(getattr(tag, "needed", "")))
                elif kind == "DT_RPATH":
                    rpath.extend(p for p in str(getattr(tag, "rpath", "")).split(":") if p)
                elif kind == "DT_RUNPATH":
                    runpath.extend(p for p in str(getattr(tag, "runpath", "")).split(":") if p)
        elif name == ".nv_fatbin":
            nvidia = read_nv_fatbin(f, section["sh_offset"], section["sh_size"])
        elif name == ".hip_fatbin":
            amd = read_hip_fatbin(f, section["sh_offset"], section["sh_size"])
        elif name == ".rodata":
            rodata = (section["sh_offset"], section["sh_size"])
    numpy_api = None
    if rodata is not None and EXTENSION_RE.search(os.path.basename(path)):
        numpy_api = _numpy_api(f, *rodata)
    return ElfFacts(
        path=path,
        size=size,
        soname=soname,
        needed=tuple(needed),
        rpath=tuple(rpath),
        runpath=tuple(runpath),
        nvidia=nvidia,
        amd=amd,
        numpy_api=numpy_api,
    )


def _numpy_api(f: BinaryIO, offset: int, size: int) -> str | None:
    if size > MAX_RODATA:
        return None
    f.seek(offset)
    data = f.read(size)
    if NUMPY_API not in data:
        return None
    if NUMPY2_MODULE in data:
        return "2"
    if NUMPY1_MODULE in data:
        return "1"
    return None
