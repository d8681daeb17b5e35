"""``envforge solve``: derive a stack for a GPU arch from the compatibility table.

Pure: frozen values in (:class:`SolveRequest`, a :class:`~envforge.knowledge.table.CompatTable`),
a :class:`Solution` out (every choice with its reason and source, plus the runner-up
stacks); no I/O. Rules (issue 10, section 1):

- **torch**: the newest release whose variant has code for the arch (SASS of the arch,
  same-major lower SASS, PTX, or an ``HSA_OVERRIDE_GFX_VERSION`` the table marks
  ``works``), not marked broken for it, whose NVIDIA driver floor is met when the
  driver is known. Within a release a confirmed variant beats an uncertain one, then
  the newer ROCm/CUDA. ``--conservative`` orders by evidence instead: confidence
  (verified > community > uncertain), native code over override over PTX, a release
  older than the table's newest (reported on for longer); then the newest such release,
  within it the package-index default build (the most used), then the older ROCm/CUDA.
- **Default**: the newest stack whose every choice (torch, variant, driver, Python, base
  image, NumPy) is verified; where none is, the newest with the best evidence, said in a
  note. ``--latest`` takes the newest stack (uncertain choices allowed) and says so; each
  mode names what the other would choose when it differs.
- **Python**: the newest CPython the variant has wheels for that a known base image
  ships (or the one asked for, with a base image that ships it); by default, where the
  variant's range is assumed ([?]), the newest whose wheel file was seen (``python_files``).
- **NumPy**: ``<2`` where the release breaks with NumPy 2, else ``>=1.26,<3``
  (``<3`` where no NumPy >= 1.26 has a wheel for the Python).
- **env**: ``HSA_OVERRIDE_GFX_VERSION`` from the table's override map when the stack
  runs another arch's code.

An arch no published wheel can run (sm_35, gfx803) raises :class:`NoStack` (exit 2)
naming the last release that could, or saying none. An arch the table has no row for
is predicted from its ISA family (:mod:`envforge.solve.predict`, rules in
``families.yaml``): confidence ``predicted``, refused under strict; a name no family rule
speaks for raises :class:`UnknownArch` (exit 2) with the nearest known archs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from envforge.errors import InvalidInput
from envforge.knowledge.arch import (
    family,
    is_device_arch,
    vendor_of,
)
from envforge.knowledge.arch_checks import jetpack_note, jetpack_runs, jetson_info
from envforge.knowledge.links import evidence_links
from envforge.knowledge.table import (
    PLATFORMS,
    CompatTable,
    Variant,
    base_version,
    local_label,
    py_tuple,
)
from envforge.solve.coverage import CONF_RANK, candidates, doubts, known_archs, nearest_archs
from envforge.solve.predict import mark, prediction_for
from envforge.solve.solution import (
    HSA_OVERRIDE,
    Candidate,
    NoStack,
    Pick,
    Solution,
    SolveRequest,
    Stack,
    UnknownArch,
    Via,
)
from envforge.solve.solve_picks import (
    admits_any,
    last_runnable,
    no_wheel_hint,
    no_wheel_message,
    numpy_spec,
    picks,
)

if TYPE_CHECKING:
    from envforge.knowledge.families import Families

__all__ = [
    "HSA_OVERRIDE",
    "RUNNER_UPS",
    "NoStack",
    "Pick",
    "Solution",
    "SolveRequest",
    "Stack",
    "UnknownArch",
    "Via",
    "evidence_links",
    "known_archs",
    "nearest_archs",
    "solve",
]

_VIA_RANK: dict[str, int] = {"sass": 0, "arch-list": 0, "same-major": 1, "override": 2, "ptx": 3}

#: How many runner-up stacks a solution lists.
RUNNER_UPS = 4


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _driver_ok(driver: str, floor: str) -> bool:
    try:
        return Version(driver) >= Version(floor)
    except InvalidVersion:
        return _version_key(driver) >= _version_key(floor)


def _image_ref(patterns: tuple[str, ...]) -> str:
    """The first plain reference of a base image's match patterns (``ubuntu:24.04*`` →
    ``ubuntu:24.04``)."""
    for p in patterns:
        ref = p.rstrip("*")
        if "*" not in ref and "?" not in ref and "[" not in ref:
            return ref
    return patterns[0].replace("*", "")


def _images_by_python(table: CompatTable) -> dict[str, tuple[str, str, str]]:
    """CPython → (image reference, distro, source) of the preferred known base image
    (Ubuntu before Debian, newer before older)."""
    out: dict[str, tuple[str, str, str]] = {}
    ordered = sorted(
        table.base_images,
        key=lambda b: (not b.distro.lower().startswith("ubuntu"), b.distro),
    )
    for b in ordered:
        out.setdefault(b.python, (_image_ref(b.match), b.distro, b.source))
    return out


def solve(request: SolveRequest, table: CompatTable, families: Families | None = None) -> Solution:
    """Solve ``request`` against ``table``; raises :class:`NoStack` / :class:`UnknownArch`
    (exit 2) or :class:`InvalidInput` for a malformed constraint.

    The default is the newest stack whose every choice is verified; ``--latest`` the newest
    stack; each says what the other would choose when it differs. An arch the table has
    no row for is predicted from its ISA family (:mod:`envforge.solve.predict`; ``families``,
    default the shipped ``families.yaml``): confidence ``predicted``, refused under strict."""
    guess = prediction_for(request.arch.strip().lower(), table, families)
    if guess is not None:  # no row for the arch: solve against its family's rule
        table = guess.table
    solution = _both(request, table, predicted=guess is not None)
    return solution if guess is None else mark(guess, solution, strict=request.strict)


def _both(request: SolveRequest, table: CompatTable, *, predicted: bool) -> Solution:
    """The request's mode, noting what the default/``--latest`` mode would choose."""
    solution = _solve(request, table, predicted=predicted)
    if request.conservative:
        return solution
    other = _solve(replace(request, latest=not request.latest), table, predicted=predicted).stack
    if other.label == solution.stack.label:
        return solution
    said = "without --latest:" if request.latest else "--latest would choose"
    note = f"{said} {other.label} on {other.base_image} ({other.confidence})"
    return replace(solution, notes=(*solution.notes, note))


def _solve(request: SolveRequest, table: CompatTable, *, predicted: bool = False) -> Solution:
    arch = request.arch.strip().lower()
    vendor = vendor_of(arch)
    known = predicted or arch in known_archs(table)
    if vendor is None or not is_device_arch(arch) or not known:
        near = ", ".join(nearest_archs(arch, table)) or "none"
        raise UnknownArch(
            f"the compatibility table does not know the arch {request.arch!r}; nearest known: "
            f"{near}",
            hint="name a GPU arch like gfx1100 or sm_89 (envforge detect shows this host's)",
        )
    _check_request(request, table)
    info = table.arch_info(arch)
    products = info.products if info else ()
    fam = info.family if info else (family(arch) or arch)

    platform = _platform(arch, request, table)
    all_candidates = candidates(arch, table, platform)
    if not all_candidates:
        raise NoStack(
            no_wheel_message(arch, table, platform), hint=no_wheel_hint(arch, table, platform)
        )
    newest_series = table.releases[-1].series
    images = _images_by_python(table)

    stacks: list[Stack] = []
    rejected: list[str] = []
    for c in all_candidates:
        stack, why = _stack_for(
            c, request, table=table, images=images, arch=arch, newest_series=newest_series
        )
        if stack is None:
            rejected.append(why)
        else:
            stacks.append(replace(stack, platform=platform))
    if not stacks:
        raise NoStack(
            f"no published wheel runs {arch} under the constraints given ({rejected[-1]}); the "
            f"last release that can run {arch} is "
            f"{last_runnable(all_candidates, lambda c: doubts(c, arch)[0])}",
            hint="drop or change --torch/--python/--base-image/--driver/--platform",
        )

    notes: list[str] = []
    if request.conservative:
        stacks.sort(key=_evidence_key)
    else:
        stacks.sort(key=_newest_key)
        if not request.latest:
            stacks, note = _verified_first(stacks, all_candidates, arch, request, table)
            notes += [note] if note else []
    best = stacks[0]
    runner_ups: list[Stack] = []
    seen = {(best.series, best.variant)}
    for s in stacks[1:]:
        if (s.series, s.variant) in seen:
            continue
        seen.add((s.series, s.variant))
        runner_ups.append(s)
        if len(runner_ups) == RUNNER_UPS:
            break
    chosen = next(
        c for c in all_candidates if (c.version, c.variant.name) == (best.torch, best.variant)
    )
    chosen_picks = picks(arch, best, chosen, request, table)
    if request.latest and _unverified(chosen_picks):
        notes.append(
            f"--latest: the newest stack, uncertain choices allowed ({_unverified(chosen_picks)})"
        )
    elif not request.conservative and best.confidence != "verified":
        safest = min(stacks, key=_evidence_key)
        if safest is not best and CONF_RANK[safest.confidence] < CONF_RANK[best.confidence]:
            notes.append(
                f"--conservative would choose {safest.label} on {safest.base_image} "
                f"({safest.confidence})"
            )
    notes += _arch_notes(arch, best, table)
    return Solution(
        arch=arch,
        vendor=vendor,
        family=fam,
        products=products,
        stack=best,
        picks=chosen_picks,
        runner_ups=tuple(runner_ups),
        conservative=request.conservative,
        notes=tuple(notes),
        latest=request.latest,
    )


def _arch_notes(arch: str, best: Stack, table: CompatTable) -> list[str]:
    """The arch's official support and an override the table knows but did not use."""
    notes: list[str] = []
    info = table.arch_info(arch)
    if info is not None and info.official:
        notes.append(f"{arch} official support: {table.cite(info.official)}")
    notes += [n for n in [jetpack_note(arch, table, best.platform)] if n]
    o = table.override_for(arch)
    if o is not None and best.override is None and o.status != "works":
        notes.append(
            f"the table's {HSA_OVERRIDE}={o.value} override for {arch} is {o.status} "
            f"({o.note}; {o.source}): not used"
        )
    return notes


def _platform(arch: str, request: SolveRequest, table: CompatTable) -> str:
    """The wheels' platform: ``tegra`` for Jetson archs, the arch's only platform, else
    the one asked for (default linux/amd64)."""
    where = table.arch_platform(arch)
    if where == "tegra":  # a JetPack line whose CUDA is SBSA (7.2: Orin) runs those wheels
        return request.platform or where if jetpack_runs(table, arch, request.platform) else where
    if where and request.platform not in (None, where):
        raise NoStack(
            f"{arch} exists only on {where} hosts; --platform {request.platform} has no {arch} GPU",
            hint=f"--platform {where}",
        )
    return where or request.platform or PLATFORMS[0]


def _unverified(chosen: Sequence[Pick]) -> str:
    """The choices of a stack that are not verified, as ``key (confidence)`` text."""
    return ", ".join(f"{p.key} ({p.confidence})" for p in chosen if p.confidence != "verified")


def _verified_first(
    stacks: list[Stack],
    candidates: Sequence[Candidate],
    arch: str,
    request: SolveRequest,
    table: CompatTable,
) -> tuple[list[Stack], str]:
    """``stacks`` (newest first) reordered so the newest with the best evidence leads:
    verified over community over uncertain, then the newest."""
    by_key = {(c.version, c.variant.name): c for c in candidates}

    def unverified(s: Stack) -> int:
        c = by_key[(s.torch, s.variant)]
        return sum(p.confidence != "verified" for p in picks(arch, s, c, request, table))

    # the newest stack whose every choice is verified; where none is, the newest with
    # the best evidence (the stack's confidence, then the fewest unverified choices)
    counts = [unverified(s) for s in stacks]
    best = min(
        range(len(stacks)),
        key=lambda i: (counts[i] > 0, CONF_RANK[stacks[i].confidence], counts[i], i),
    )
    chosen = stacks[best]
    note = (
        "chose the newest stack whose every choice is verified"
        if counts[best] == 0
        else f"no stack has every choice verified: chose the newest with the best evidence "
        f"({chosen.confidence}, {counts[best]} choice(s) not verified)"
    )
    if best == 0 and counts[best] == 0:
        return stacks, ""
    return [chosen, *stacks[:best], *stacks[best + 1 :]], note


def _check_request(request: SolveRequest, table: CompatTable) -> None:
    if request.latest and request.conservative:
        raise InvalidInput(
            "--latest and --conservative contradict each other (the newest stack, uncertain "
            "choices allowed, or the stack with the most evidence)",
            hint="give one of them; with neither, the newest stack whose every choice is verified",
        )
    if request.torch is not None and table.release(request.torch) is None:
        newest = table.releases[-1].versions[-1]
        raise InvalidInput(
            f"--torch {request.torch}: the compatibility table does not know this release",
            hint=f"give a release from 1.12.0 to {newest}",
        )
    if request.python is not None and not re.fullmatch(r"3\.\d{1,2}", request.python):
        raise InvalidInput(
            f"--python {request.python}: expected X.Y like 3.12", hint="--python 3.12"
        )
    if request.driver is not None and not re.fullmatch(r"\d{1,4}(\.\d{1,4}){0,3}", request.driver):
        raise InvalidInput(
            f"--driver {request.driver}: expected a driver version like 580.65.06",
            hint="--driver 580.65.06",
        )


def _stack_for(
    c: Candidate,
    request: SolveRequest,
    *,
    table: CompatTable,
    images: dict[str, tuple[str, str, str]],
    arch: str,
    newest_series: str,
) -> tuple[Stack | None, str]:
    label = f"torch {c.version}+{c.variant.name}"
    if not _torch_asked(c, request.torch):
        return None, f"{label} is not --torch {request.torch}"
    floor = _floor(c.variant, table)
    if floor is not None and request.driver is not None and not _driver_ok(request.driver, floor):
        return None, f"{label} needs NVIDIA driver >= {floor}, the driver is {request.driver}"
    found = _python_image(c, request, table, images)
    if isinstance(found, str):
        return None, found
    python, image, distro = found
    numpy, _ = numpy_spec(c.release, python, table)
    if not admits_any(numpy, table.numpy_installable(python)):
        return None, f"no NumPy release admitted by {numpy} has a wheel for Python {python}"
    confidence, why = doubts(c, arch, jetson_info(arch, table))
    accel = c.variant.version or ""
    return (
        Stack(
            torch=c.version,
            series=c.release.series,
            variant=c.variant.name,
            kind=c.variant.kind,
            accelerator_version=accel,
            index=c.variant.index,
            form=c.variant.form,
            python=python,
            base_image=image,
            distro=distro,
            numpy=numpy,
            via=c.via,
            runs=c.runs,
            override=c.override,
            confidence=confidence,
            doubts=why,
            pypi_default=c.variant.pypi_default,
            newest_release=c.release.series == newest_series,
            driver_floor=floor,
        ),
        "",
    )


def _torch_asked(c: Candidate, wanted: str | None) -> bool:
    """The candidate is the ``--torch`` release asked for (any when none was)."""
    if wanted is None:
        return True
    label = local_label(wanted)
    return base_version(wanted) == c.version and label in (None, c.variant.name)


def _floor(variant: Variant, table: CompatTable) -> str | None:
    """The NVIDIA driver floor of a CUDA variant (None for others or when unknown)."""
    if variant.kind != "cuda" or variant.version is None:
        return None
    df = table.driver_floor(variant.version)
    return None if df is None else df.min


def _python_image(
    c: Candidate,
    request: SolveRequest,
    table: CompatTable,
    images: dict[str, tuple[str, str, str]],
) -> tuple[str, str, str] | str:
    """(python, base image, distro) for the candidate under the request, or why none."""
    label = f"torch {c.version}+{c.variant.name}"
    low, high = c.variant.python_range(c.version)

    def admitted(py: str) -> bool:
        return py_tuple(low) <= py_tuple(py) <= py_tuple(high)

    if request.base_image is not None:
        entry = table.base_image(request.base_image)
        if entry is None:
            if request.python is None:
                return f"--base-image {request.base_image} is not a known base image: give --python"
            python, image, distro = request.python, request.base_image, request.base_image
        elif request.python is not None and request.python != entry.python:
            return (
                f"--base-image {request.base_image} ships Python {entry.python}, not "
                f"{request.python}"
            )
        else:
            python, image, distro = entry.python, request.base_image, entry.distro
        if not admitted(python):
            return f"{label} has wheels for Python {low}-{high}, not {python}"
        return python, image, distro
    if request.python is not None:
        if not admitted(request.python):
            return f"{label} has wheels for Python {low}-{high}, not {request.python}"
        if request.python not in images:
            return f"no known base image ships Python {request.python}: give --base-image"
        image, distro, _ = images[request.python]
        return request.python, image, distro
    shipped = sorted((p for p in images if admitted(p)), key=py_tuple)
    if not shipped:
        return f"no known base image ships a Python {low}-{high} for {label}"
    python = _preferred_python(c, shipped, request)
    image, distro, _ = images[python]
    return python, image, distro


def _preferred_python(c: Candidate, shipped: Sequence[str], request: SolveRequest) -> str:
    """The newest of ``shipped``; by default, where the variant's CPython range is only
    assumed ([?]), the newest whose wheel file has been seen (``python_files``)."""
    if not request.latest and "[?]" in c.variant.python_source:
        seen = [p for p in shipped if c.variant.python_seen(c.version, p)]
        if seen:
            return seen[-1]
    return shipped[-1]


def _newest_key(s: Stack) -> tuple[Any, ...]:
    """Newest release first; within it a confirmed variant, better code, newer ROCm/CUDA."""
    return (
        tuple(-x for x in _version_key(s.torch)),
        s.confidence == "uncertain",
        _VIA_RANK[s.via],
        tuple(-x for x in _version_key(s.accelerator_version)),
    )


def _evidence_key(s: Stack) -> tuple[Any, ...]:
    """Most evidence first: confidence, native code, a release that is not the table's
    newest (it has been reported on); then the newest such release, within it the
    package-index default build, then the older (longer used) ROCm/CUDA."""
    return (
        CONF_RANK[s.confidence],
        _VIA_RANK[s.via],
        s.newest_release,
        tuple(-x for x in _version_key(s.torch)),
        not s.pypi_default,
        _version_key(s.accelerator_version),
    )
