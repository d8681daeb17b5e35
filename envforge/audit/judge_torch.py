"""Checks 3 to 5: compiled extensions against the installed torch and NumPy, companions
against the companion table.

* ``torch-extensions``: a distribution that requires torch (``Requires-Dist``) and ships a
  shared object linking ``libtorch*``/``libc10*``: its torch requirement (metadata, and the
  extension table's row for its release) against the installed torch, and each torch
  library it needs that the installed torch does not have (``libtorch_cuda.so`` beside a
  CPU torch: the import fails).
* ``numpy-c-api``: an extension module built against NumPy 1 (it imports the C-API from
  ``numpy.core._multiarray_umath`` only; NumPy 2's headers try ``numpy._core`` first) or
  whose distribution requires a NumPy the installed one is not, beside NumPy 2.
* ``companions``: torchvision, torchaudio, torchcodec, torchao and Triton against the
  companion table's pairing with the installed torch, and their build (local tag, else
  what they link; a build without a local tag of a ``plain_build_fits`` package fits any)
  against torch's.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge.audit.model import CheckResult, Collected, Distribution, Finding, check_result
from envforge.knowledge.companions import family_of, load_companions
from envforge.knowledge.extensions import load_extensions

if TYPE_CHECKING:  # the tables load only when a distribution needs them (~0.3 s)
    from envforge.knowledge.companions import CompanionTable
    from envforge.knowledge.extensions import ExtensionTable

TORCH_LIB_RE = re.compile(r"^lib(torch|c10)[A-Za-z0-9_]*\.so")
CUDA_LINKS = re.compile(r"^lib(cudart|c10_cuda|torch_cuda|cublas)")
ROCM_LINKS = re.compile(r"^lib(amdhip64|c10_hip|torch_hip|rocblas)")
#: Names that may be companions: only then is the companion table loaded (it decides).
MAY_PAIR = re.compile(r"^(torchvision|torchaudio|torchcodec|torchao|.*triton.*)$")


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def _admits(spec: SpecifierSet, version: str) -> bool:
    try:
        return spec.contains(Version(version), prereleases=True) or spec.contains(
            Version(_base(version)), prereleases=True
        )
    except InvalidVersion:
        return True


def _needed(collected: Collected, dist: Distribution) -> set[str]:
    out: set[str] = set()
    for path, _size in dist.shared:
        facts = collected.facts_of(path)
        if facts is not None:
            out.update(facts.needed)
    return out


def build_family(collected: Collected, dist: Distribution) -> tuple[str, str]:
    """(cpu | cuda | rocm, how it is known) of a torch-family distribution."""
    _, sep, local = dist.version.partition("+")
    if sep:
        return family_of(local), f"+{local}"
    names = {os.path.basename(p) for p, _ in dist.shared} | _needed(collected, dist)
    cuda = sorted(n for n in names if CUDA_LINKS.match(n))
    if cuda:
        return "cuda", f"has {', '.join(cuda[:3])}"
    rocm = sorted(n for n in names if ROCM_LINKS.match(n))
    if rocm:
        return "rocm", f"has {', '.join(rocm[:3])}"
    return "cpu", "links no GPU runtime"


def _torch_libs(collected: Collected, torch: Distribution) -> set[str]:
    names = {os.path.basename(p) for p, _ in torch.shared}
    for path, _size in torch.shared:
        facts = collected.facts_of(path)
        if facts is not None and facts.soname:
            names.add(facts.soname)
    return names


def _extension(collected: Collected, dist: Distribution, torch: Distribution) -> list[Finding]:
    needed = _needed(collected, dist)
    if not any(TORCH_LIB_RE.match(n) for n in needed):
        return []

    table: ExtensionTable = load_extensions()
    findings: list[Finding] = []
    req = dist.requirement("torch", collected.inventory.marker_env)
    said = []
    if req is not None and str(req.specifier) and not _admits(req.specifier, torch.version):
        said.append(f"requires torch{req.specifier} (its metadata)")
    release = next(
        (
            r
            for r in table.releases
            if r.package == dist.key and _same_version(r.version, dist.version)
        ),
        None,
    )
    if release is not None and not _admits(SpecifierSet(release.requires), torch.version):
        said.append(f"its wheels require torch{release.requires} ({release.source})")
    if said:
        findings.append(
            Finding(
                "torch-extensions",
                "error",
                dist.name,
                f"{dist.label} {' and '.join(said)}; torch {torch.version} "
                "is installed: its compiled code was built for another torch",
            )
        )
    missing = sorted(
        n for n in needed if TORCH_LIB_RE.match(n) and n not in _torch_libs(collected, torch)
    )
    if missing:
        findings.append(
            Finding(
                "torch-extensions",
                "error",
                dist.name,
                f"{dist.label} links {', '.join(missing)}, which torch "
                f"{torch.version} does not have: importing it fails",
            )
        )
    return findings


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(Version(b).public)
    except InvalidVersion:
        return False


def check_extensions(collected: Collected) -> tuple[CheckResult, list[Finding]]:
    inv = collected.inventory
    torch = inv.dist("torch")
    if torch is None:
        return check_result("torch-extensions", [], "", skipped="torch is not installed"), []
    findings: list[Finding] = []
    checked = 0
    markers = inv.marker_env
    for dist in inv.distributions:
        if dist.shadowed or dist.key == "torch" or dist.requirement("torch", markers) is None:
            continue
        checked += 1
        findings.extend(_extension(collected, dist, torch))
    detail = f"{checked} distributions requiring torch checked against torch {torch.version}"
    return check_result("torch-extensions", findings, detail), findings


# --------------------------------------------------------------------------- NumPy


def check_numpy(collected: Collected) -> tuple[CheckResult, list[Finding]]:
    inv = collected.inventory
    numpy = inv.dist("numpy")
    if numpy is None:
        return check_result("numpy-c-api", [], "", skipped="numpy is not installed"), []
    try:
        major = Version(numpy.version).major
    except InvalidVersion:
        return check_result("numpy-c-api", [], "", skipped=f"numpy {numpy.version}?"), []
    users: dict[str, list[str]] = {}
    for so, facts in collected.libraries():
        owner = so.owners[0] if so.owners else None
        if facts.numpy_api is None or owner is None:
            continue
        dist = inv.dist(owner)
        if dist is not None and dist.key != "numpy":
            users.setdefault(dist.key, []).append(f"{collected.name(so)}:{facts.numpy_api}")
    findings = []
    for key, modules in sorted(users.items()):
        dist = inv.dist(key)
        assert dist is not None
        old = [m.rsplit(":", 1)[0] for m in modules if m.endswith(":1")]
        req = dist.requirement("numpy", inv.marker_env)
        pins = req is not None and str(req.specifier) and not _admits(req.specifier, numpy.version)
        if major >= 2 and old:
            findings.append(
                Finding(
                    "numpy-c-api",
                    "error",
                    dist.name,
                    f"{dist.label}: {', '.join(old[:3])} built against NumPy 1 "
                    f"(imports numpy.core._multiarray_umath only); numpy "
                    f"{numpy.version} is installed: importing it fails",
                )
            )
        elif pins and req is not None:
            findings.append(
                Finding(
                    "numpy-c-api",
                    "error",
                    dist.name,
                    f"{dist.label} uses the NumPy C-API and requires "
                    f"numpy{req.specifier}; numpy {numpy.version} is installed",
                )
            )
    detail = (
        f"{len(users)} distributions using the NumPy C-API checked against numpy {numpy.version}"
    )
    return check_result("numpy-c-api", findings, detail), findings


# --------------------------------------------------------------------------- companions


def _companion(
    collected: Collected,
    dist: Distribution,
    torch: Distribution,
    family: tuple[str, str],
    table: CompanionTable,
) -> list[Finding]:
    package = table.package(dist.key)
    assert package is not None
    if family[0] not in package.families:
        return []  # triton beside a CPU torch: not torch's companion there
    findings: list[Finding] = []
    pair = table.pairing(dist.key, torch.version)
    if table.covers(dist.key, dist.version) and not table.fits(
        dist.key, dist.version, torch.version
    ):
        wants = f"; {pair.package} {pair.version} pairs with it ({pair.source})" if pair else ""
        findings.append(
            Finding(
                "companions",
                "error",
                dist.name,
                f"{dist.label} does not pair with torch {torch.version}{wants}",
            )
        )
    plain = package.plain_build_fits and "+" not in dist.version
    if package.local_tag and not plain:
        own = build_family(collected, dist)
        if own[0] != family[0] or (
            own[1].startswith("+") and family[1].startswith("+") and own[1] != family[1]
        ):
            version = pair.version if pair else _base(dist.version)
            tag = torch.version.partition("+")[2]
            fix = f": install {dist.name}=={version}+{tag}" if tag else ""
            findings.append(
                Finding(
                    "companions",
                    "error",
                    dist.name,
                    f"{dist.label} is a {own[0]} build ({own[1]}) beside torch {torch.version}, "
                    f"a {family[0]} build ({family[1]}){fix}",
                )
            )
    return findings


def check_companions(collected: Collected) -> tuple[CheckResult, list[Finding]]:
    inv = collected.inventory
    torch = inv.dist("torch")
    if torch is None:
        return check_result("companions", [], "", skipped="torch is not installed"), []
    findings: list[Finding] = []
    seen: list[str] = []
    if not any(MAY_PAIR.match(d.key) for d in inv.distributions if not d.shadowed):
        return check_result(
            "companions", findings, f"no companion of torch {torch.version} installed"
        ), findings

    table = load_companions()
    family = build_family(collected, torch)
    for package in table.packages:
        dist = inv.dist(package.name)
        if dist is None:
            continue
        seen.append(dist.label)
        findings.extend(_companion(collected, dist, torch, family, table))
    detail = (
        f"{', '.join(seen)} against torch {torch.version}"
        if seen
        else f"no companion of torch {torch.version} installed"
    )
    return check_result("companions", findings, detail), findings
