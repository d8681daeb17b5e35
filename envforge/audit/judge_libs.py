"""Check 2: one library, two copies.

* **Same soname from two distributions** (``libnccl.so.2`` from nvidia-nccl-cu12 and from
  nvidia-nccl-cu13 in two folders): the dynamic loader keeps one library per soname, so
  every user gets whichever is found or loaded first. An error when the libraries that
  link that soname can end up with different copies (they find different ones, or one
  finds none and takes whatever was loaded first); a warning when every one of them finds
  the same copy, or none links it (triton's own CUPTI beside nvidia-cuda-cupti's: torch
  finds nvidia's by its RPATH, triton loads its own by path). What the loader takes is worked
  out for each library that needs the soname from its ``DT_RPATH`` (searched before
  ``LD_LIBRARY_PATH``) or ``DT_RUNPATH`` (after it) with ``$ORIGIN`` expanded; where none
  names a folder holding a copy, the first one loaded in the process wins.
* **One file in two distributions' RECORD** (both NCCL wheels install
  ``nvidia/nccl/lib/libnccl.so.2``): the second install overwrote the first; the size on
  disk against each RECORD's says whose file is there.
* **One runtime in two versions** (a warning): CUDA libraries of two majors
  (``libcudart.so.12`` and ``.so.13``) from two distributions, or two kinds of OpenMP
  runtime (``libgomp``, ``libiomp5``, ``libomp``).

Python extension modules (``*.cpython-*.so``, no soname) are never duplicates: a file
name repeated in two packages is what every environment has. Nor are copies of one build
that auditwheel vendored into two wheels (``libgfortran-83c28eba.so.5.0.0`` in both
opencv-python-headless and scipy): its soname carries the first 8 hex digits of the
original file's SHA-256, so equal sonames of equal size are the same code whichever loads.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

from envforge.audit.elfscan import ElfFacts
from envforge.audit.model import CheckResult, Collected, Finding, SharedObject, check_result

CHECK = "duplicate-libraries"
#: ``libcudart.so.12``, auditwheel's ``libgomp-a34b3233.so.1`` / ``libcudart.faf08d9a.so.13``
#: → (stem, major).
STEM_RE = re.compile(r"^(lib[A-Za-z0-9_+]+?)(?:[-.][0-9a-f]{8})?\.so(?:\.([0-9]+))?")
OPENMP = {"libgomp": "GNU OpenMP", "libiomp5": "Intel OpenMP", "libomp": "LLVM OpenMP"}
#: Stems of the CUDA libraries whose majors must not mix.
#: A soname auditwheel gave a vendored copy: ``libgfortran-83c28eba.so.5.0.0``.
HASHED_SONAME = re.compile(r"^lib[A-Za-z0-9_+]+?[-.][0-9a-f]{8}\.so(\.[0-9]+)*$")
CUDA_STEMS = re.compile(
    r"^lib(cudart|cublas|cublasLt|cudnn|cufft|curand|cusolver|cusparse|"
    r"nccl|nvrtc|nvJitLink|nvjpeg|cupti)$"
)


def stem(name: str) -> tuple[str, str | None] | None:
    m = STEM_RE.match(name)
    return (m.group(1), m.group(2)) if m else None


def _owned(collected: Collected) -> list[tuple[SharedObject, ElfFacts, str]]:
    """Libraries (a soname, not an extension module) with their owner label."""
    out = []
    for so, facts in collected.libraries():
        if facts.soname and not facts.extension_module:
            out.append((so, facts, collected.owner(so)))
    return out


def private(so: SharedObject, facts: ElfFacts) -> bool:
    """A vendored copy renamed by auditwheel (``libcudart.faf08d9a.so.13``, soname
    ``libcudart.so.13``): its users need it by its file name, so it is not the copy
    another library's ``DT_NEEDED libcudart.so.13`` finds in a folder."""
    return not os.path.basename(so.path).startswith(str(facts.soname))


def _search_dirs(user: SharedObject, facts: ElfFacts, env: dict[str, str]) -> list[tuple[str, str]]:
    """(folder, why) in the loader's order for what ``user`` needs."""
    origin = os.path.dirname(user.path)
    ld_path = [(p, "LD_LIBRARY_PATH") for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]

    def expand(items: tuple[str, ...], why: str) -> list[tuple[str, str]]:
        return [
            (os.path.normpath(p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)), why)
            for p in items
        ]

    if facts.runpath:
        return ld_path + expand(facts.runpath, "its RUNPATH")
    return expand(facts.rpath, "its RPATH") + ld_path


def _who_loads(collected: Collected, soname: str, copies: list[SharedObject]) -> tuple[str, bool]:
    """(what the loader takes for ``soname``, for each library that needs it; whether that
    is one copy for all of them). Users that each find the same copy by their own search
    path make the other copies reachable only by a dlopen by path (triton's private
    CUPTI beside nvidia-cuda-cupti's): no mix. Users finding different copies, or one
    finding none (it gets whichever was loaded first), can mix them."""
    where = {os.path.dirname(so.path): so for so in copies}
    env = collected.inventory.env_map
    said: list[str] = []
    chosen: set[str | None] = set()
    for user, facts in collected.libraries():
        if soname not in facts.needed:
            continue
        found = next(
            ((folder, why) for folder, why in _search_dirs(user, facts, env) if folder in where),
            None,
        )
        chosen.add(None if found is None else where[found[0]].path)
        if found is not None and len(said) < 2:
            said.append(
                f"{os.path.basename(user.path)} ({collected.owner(user)}) takes "
                f"{collected.name(where[found[0]])} by {found[1]}"
            )
    one = len(chosen) == 1 and None not in chosen
    if not said:
        return "no library names a folder holding a copy: the first one loaded wins", False
    if one:
        said.append("the other copies are loaded only by path (a dlopen)")
    return "; ".join(said), one


def one_build(soname: str, sizes: set[int]) -> bool:
    """Copies of one vendored build: auditwheel's content hash in the soname, one size."""
    return bool(HASHED_SONAME.match(soname)) and len(sizes) == 1


def _same_soname(
    collected: Collected, libs: list[tuple[SharedObject, ElfFacts, str]]
) -> tuple[list[Finding], int]:
    """The findings, and how many sonames were copies of one build (not findings)."""
    groups: dict[str, list[tuple[SharedObject, str]]] = defaultdict(list)
    sizes: dict[str, set[int]] = defaultdict(set)
    for so, facts, owner in libs:
        if not private(so, facts):
            groups[str(facts.soname)].append((so, owner))
            sizes[str(facts.soname)].add(facts.size)
    findings = []
    same = 0
    for soname, items in sorted(groups.items()):
        owners = {owner for _so, owner in items}
        if len(owners) < 2:
            continue
        if one_build(soname, sizes[soname]):
            same += 1
            continue
        copies = [so for so, _owner in items]
        listing = ", ".join(f"{collected.name(so)} ({owner})" for so, owner in items)
        linked = any(soname in facts.needed for _so, facts in collected.libraries())
        how, one = (
            _who_loads(collected, soname, copies)
            if linked
            else ("no library here links it by that name (only a dlopen of both mixes them)", True)
        )
        findings.append(
            Finding(
                CHECK,
                "warning" if one else "error",
                soname,
                f"{soname} twice: {listing}; {how}",
                tuple(so.path for so in copies),
            )
        )
    return findings, same


def _overwritten(collected: Collected) -> list[Finding]:
    findings = []
    inv = collected.inventory
    for so in inv.shared_objects:
        if len(so.owners) < 2:
            continue
        facts = collected.facts.get(so.real)
        size = facts.size if facts is not None else None
        sizes = []
        for name in so.owners:
            dist = inv.dist(name) or next((d for d in inv.distributions if d.name == name), None)
            recorded = next((s for p, s in dist.shared if p == so.path), None) if dist else None
            sizes.append((dist.label if dist else name, recorded))
        whose = [label for label, recorded in sizes if recorded is not None and recorded == size]
        there = (
            f"the file here ({size:,} bytes) is {' or '.join(whose)}'s"
            if whose and size
            else "the file here matches neither RECORD's size"
        )
        labels = " and ".join(f"{label}'s" for label, _ in sizes)
        findings.append(
            Finding(
                CHECK,
                "error",
                collected.name(so),
                f"{collected.name(so)} is in both {labels} RECORD: the later install overwrote "
                f"the other; {there}",
                (so.path,),
            )
        )
    return findings


def _families(libs: list[tuple[SharedObject, ElfFacts, str]]) -> list[Finding]:
    cuda: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    openmp: dict[str, set[str]] = defaultdict(set)
    for so, facts, owner in libs:
        found = stem(str(facts.soname)) or stem(os.path.basename(so.path))
        if found is None:
            continue
        name, major = found
        if name in OPENMP:
            openmp[name].add(owner)
        elif CUDA_STEMS.match(name) and major is not None:
            cuda[name][major].add(owner)
    findings = []
    for name, majors in sorted(cuda.items()):
        owners = {o for v in majors.values() for o in v}
        if len(majors) > 1 and len(owners) > 1:
            listing = ", ".join(
                f"{name}.so.{m} ({', '.join(sorted(o))})" for m, o in sorted(majors.items())
            )
            findings.append(
                Finding(
                    CHECK,
                    "warning",
                    name,
                    f"{name} in {len(majors)} majors side by side: {listing}; "
                    "what links each one decides which is used",
                )
            )
    if len(openmp) > 1:
        listing = ", ".join(
            f"{OPENMP[k]} {k} ({', '.join(sorted(v))})" for k, v in sorted(openmp.items())
        )
        findings.append(
            Finding(
                CHECK,
                "warning",
                "openmp",
                f"{len(openmp)} OpenMP runtimes: {listing}; two in one "
                "process can oversubscribe threads or abort (OMP: Error #15)",
            )
        )
    return findings


def check_duplicates(collected: Collected) -> tuple[CheckResult, list[Finding]]:
    libs = _owned(collected)
    twice, same = _same_soname(collected, libs)
    findings = [*twice, *_overwritten(collected), *_families(libs)]
    detail = (
        f"{len(libs)} libraries with a soname compared across "
        f"{len(collected.inventory.distributions)} distributions"
    )
    if same:
        detail += (
            f"; {same} vendored in several wheels as one build (auditwheel's hash in "
            "the soname, one size): not duplicates"
        )
    return check_result(CHECK, findings, detail), findings
