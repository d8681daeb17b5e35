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
- **Python**: the newest CPython the variant has wheels for that a known base image
  ships (or the one asked for, with a base image that ships it).
- **NumPy**: ``<2`` where the release breaks with NumPy 2, else ``>=1.26,<3``
  (``<3`` where no NumPy >= 1.26 has a wheel for the Python).
- **env**: ``HSA_OVERRIDE_GFX_VERSION`` from the table's override map when the stack
  runs another arch's code.

An arch no published wheel can run (sm_35, gfx803) raises :class:`NoStack` (exit 2)
naming the last release that could, or saying none; a name the table does not know
raises :class:`UnknownArch` (exit 2) with the nearest known archs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge.arch import (
    NVIDIA_COMPUTE_CAPABILITIES,
    family,
    is_device_arch,
    ordinal,
    parse_sm,
    sort_key,
    vendor_of,
)
from envforge.errors import InvalidInput
from envforge.knowledge.table import (
    CompatTable,
    Override,
    Release,
    Variant,
    base_version,
    local_label,
    py_tuple,
)
from envforge.patterns import Confidence

HSA_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"

#: How a wheel runs the arch, best first.
Via = Literal["sass", "same-major", "arch-list", "override", "ptx"]
_VIA_RANK: dict[str, int] = {"sass": 0, "arch-list": 0, "same-major": 1, "override": 2, "ptx": 3}
_CONF_RANK: dict[str, int] = {"verified": 0, "community": 1, "uncertain": 2}

#: How many runner-up stacks a solution lists.
RUNNER_UPS = 4

_GH_REF = re.compile(r"\b([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?:#| PR #)(\d+)")


class NoStack(InvalidInput):
    """No published wheel (under the request's constraints) runs the arch. Exit 2."""


class UnknownArch(InvalidInput):
    """An arch name the compatibility table does not know. Exit 2."""


@dataclass(frozen=True)
class SolveRequest:
    """What to solve for: an arch plus the user's constraints (all optional)."""

    arch: str
    torch: str | None = None
    python: str | None = None
    base_image: str | None = None
    #: NVIDIA driver version (detected or ``--driver``); None when unknown.
    driver: str | None = None
    conservative: bool = False


@dataclass(frozen=True)
class Pick:
    """One choice of a solution: what, why, from where, how sure."""

    key: str
    value: str
    reason: str
    source: str
    confidence: Confidence

    def to_dict(self) -> dict[str, str]:
        return {
            "key": self.key,
            "value": self.value,
            "reason": self.reason,
            "source": self.source,
            "confidence": self.confidence,
        }


@dataclass(frozen=True)
class Stack:
    """A torch wheel that runs the arch, with the Python, base image and NumPy for it."""

    torch: str
    series: str
    variant: str
    kind: str
    accelerator_version: str
    index: str
    form: str
    python: str
    base_image: str
    distro: str
    numpy: str
    via: Via
    #: The arch whose code runs (the arch itself, a same-major lower SM, the override target).
    runs: str
    override: Override | None
    confidence: Confidence
    #: Why the confidence is what it is (empty when verified).
    doubts: tuple[str, ...]
    pypi_default: bool
    #: From the table's newest release (not yet widely reported on).
    newest_release: bool
    driver_floor: str | None

    @property
    def label(self) -> str:
        return f"torch {self.torch}+{self.variant} py{self.python}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "torch": self.torch,
            "variant": self.variant,
            "index": self.index,
            "python": self.python,
            "base_image": self.base_image,
            "numpy": self.numpy,
            "via": self.via,
            "runs": self.runs,
            "confidence": self.confidence,
            "doubts": list(self.doubts),
            "driver_floor": self.driver_floor,
        }


@dataclass(frozen=True)
class Solution:
    """The solved stack for an arch: the stack, each choice explained, the runner-ups."""

    arch: str
    vendor: str
    family: str
    products: tuple[str, ...]
    stack: Stack
    picks: tuple[Pick, ...]
    runner_ups: tuple[Stack, ...]
    conservative: bool
    notes: tuple[str, ...] = ()

    @property
    def confidence(self) -> Confidence:
        return self.stack.confidence

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "vendor": self.vendor,
            "family": self.family,
            "products": list(self.products),
            "mode": "conservative" if self.conservative else "newest",
            "confidence": self.confidence,
            "stack": self.stack.to_dict(),
            "choices": [p.to_dict() for p in self.picks],
            "runner_ups": [s.to_dict() for s in self.runner_ups],
            "notes": list(self.notes),
            "recipe": self.recipe_dict(),
        }

    def recipe_dict(self) -> dict[str, Any]:
        """The solution as a recipe (the keys of a recipe YAML file), named after the arch."""
        s = self.stack
        data: dict[str, Any] = {
            "name": self.arch,
            "description": self._description(),
            "gpu": {
                "vendor": self.vendor,
                "arch": self.arch,
                "products": list(self.products),
            },
            "base_image": s.base_image,
            "python": s.python,
        }
        data["rocm" if s.kind == "rocm" else "cuda"] = s.accelerator_version
        version = s.torch + ("+" + s.variant if s.form == "extra-index-url" else "")
        data["torch"] = {"version": version, "index": s.index}
        data["numpy"] = s.numpy
        if s.override is not None:
            o = s.override
            data["env"] = {
                HSA_OVERRIDE: {
                    "value": o.value,
                    "why": (
                        f"No {s.variant} wheel of torch {s.torch} has {self.arch} code; "
                        f"{o.value} makes the HSA runtime report {o.target} so its kernels "
                        f"load (table status: {o.status}). {o.note}"
                    ).strip(),
                    "evidence": evidence_links(o.source),
                    "confidence": o.confidence,
                }
            }
        issues: list[dict[str, Any]] = []
        if s.doubts:
            issues.append(
                {
                    "symptom": "parts of this stack are not confirmed by a primary source: "
                    + "; ".join(s.doubts),
                    "workaround": "certify it on the GPU (envforge build) before relying on it, "
                    "or solve with --conservative",
                    "evidence": [],
                }
            )
        if issues:
            data["known_issues"] = issues
        data["certify"] = {"step_timeout": 120 if s.kind == "rocm" else 60, "level": "full"}
        data["sources"] = sorted({link for p in self.picks for link in evidence_links(p.source)})
        return data

    def _description(self) -> str:
        s = self.stack
        products = ", ".join(self.products[:4]) or self.arch
        how = {
            "sass": f"the wheel has {self.arch} SASS",
            "arch-list": f"{self.arch} is compiled into the wheel",
            "same-major": f"the wheel's {s.runs} SASS runs on {self.arch} (same major)",
            "ptx": f"the wheel's {s.runs} PTX is JIT-compiled for {self.arch}",
            "override": f"{HSA_OVERRIDE}={s.override.value if s.override else ''} runs "
            f"{s.runs} code",
        }[s.via]
        text = (
            f"{self.family} ({products}): solved by envforge from the compatibility table "
            f"({'conservative' if self.conservative else 'newest'}): torch {s.torch}+"
            f"{s.variant} on {s.distro}'s Python {s.python}; {how}."
        )
        if s.confidence != "verified":
            text += f" Confidence: {s.confidence} ({'; '.join(s.doubts)})."
        return text


# --------------------------------------------------------------------------- helpers


def evidence_links(source: str) -> list[str]:
    """URLs and ``owner/repo#N`` references in a source text, as GitHub issue URLs."""
    links: list[str] = []
    for m in re.finditer(r"https?://\S+", source):
        links.append(m.group(0).rstrip(").,;"))
    for m in _GH_REF.finditer(source):
        links.append(f"https://github.com/{m.group(1)}/issues/{m.group(2)}")
    # "owner/repo#1, #2": the bare numbers belong to the last named repo.
    repo: str | None = None
    for token in re.finditer(
        r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?=#| PR #)|(?<![\w/])#(\d+)", source
    ):
        if token.group(1):
            repo = token.group(1)
        elif repo is not None:
            links.append(f"https://github.com/{repo}/issues/{token.group(2)}")
    return list(dict.fromkeys(links))


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _driver_ok(driver: str, floor: str) -> bool:
    try:
        return Version(driver) >= Version(floor)
    except InvalidVersion:
        return _version_key(driver) >= _version_key(floor)


def known_archs(table: CompatTable) -> tuple[str, ...]:
    """Every arch the table names (arch info, wheel lists, overrides) plus the shipped
    NVIDIA compute capabilities, in arch order."""
    names: set[str] = {a.arch for a in (*table.amd_archs, *table.nvidia_archs)}
    names.update(o.arch for o in table.overrides)
    names.update(NVIDIA_COMPUTE_CAPABILITIES)
    for r in table.releases:
        for v in r.variants:
            names.update(a for a in v.archs if is_device_arch(a))
    return tuple(sorted(names, key=sort_key))


def nearest_archs(arch: str, table: CompatTable, limit: int = 3) -> list[str]:
    """Known archs of the same vendor closest to ``arch`` (shared prefix, then distance)."""
    vendor = vendor_of(arch) or ("amd" if arch.lower().startswith("gfx") else "nvidia")
    number = ordinal(arch) or 0

    def prefix(a: str) -> int:
        n = 0
        for x, y in zip(arch.lower(), a):
            if x != y:
                break
            n += 1
        return n

    same = [a for a in known_archs(table) if vendor_of(a) == vendor]
    same.sort(key=lambda a: (-prefix(a), abs((ordinal(a) or 0) - number), sort_key(a)))
    return same[:limit]


def _coverage(
    arch: str, variant: Variant, table: CompatTable
) -> tuple[Via, str, Override | None] | None:
    """How ``variant`` runs ``arch`` (via, the arch whose code runs, the override), or None."""
    if variant.kind == "cuda":
        if arch in variant.archs:
            return "sass", arch, None
        gpu = parse_sm(arch)
        if gpu is None:
            return None
        lower = [
            a
            for a in variant.archs
            if (s := parse_sm(a)) is not None
            and not s.suffix
            and s.major == gpu.major
            and s.minor < gpu.minor
        ]
        if lower:
            return "same-major", max(lower, key=sort_key), None
        if variant.ptx is not None and variant.covers(arch):
            return "ptx", variant.ptx, None
        return None
    if variant.kind != "rocm":
        return None
    if arch in variant.archs:
        return None if variant.broken_arch(arch) else ("arch-list", arch, None)
    o = table.override_for(arch)
    if o is None or o.status != "works":
        return None
    if o.target in variant.archs and variant.broken_arch(o.target) is None:
        return "override", o.target, o
    return None


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


def _numpy_spec(release: Release, python: str, table: CompatTable) -> tuple[str, str]:
    """(specifier, reason) for NumPy on this release and Python."""
    available = table.numpy_installable(python)
    if release.numpy_breaks is not None:
        m = re.fullmatch(r"\s*>=\s*([0-9.]+)\s*", release.numpy_breaks)
        bound = f"<{m.group(1)}" if m else "<2"
        return bound, f"torch {release.series} wheels break with NumPy {release.numpy_breaks}"
    spec = ">=1.26,<3"
    if not any(SpecifierSet(spec).contains(v) for v in available):
        spec = "<3"
    return spec, (
        f"no NumPy break known for torch {release.series} on Linux; NumPy 3 is not released "
        "(bounded below 3)"
    )


# --------------------------------------------------------------------------- solve


@dataclass(frozen=True)
class _Candidate:
    release: Release
    version: str
    variant: Variant
    via: Via
    runs: str
    override: Override | None


def _candidates(arch: str, table: CompatTable) -> list[_Candidate]:
    out: list[_Candidate] = []
    for release in table.releases:
        for variant in release.variants:
            found = _coverage(arch, variant, table)
            if found is None:
                continue
            via, runs, override = found
            for version in release.versions:
                out.append(_Candidate(release, version, variant, via, runs, override))
    return out


def _doubts(c: _Candidate, arch: str) -> tuple[Confidence, tuple[str, ...]]:
    doubts: list[str] = []
    worst = "verified"
    if c.variant.confidence != "verified":
        doubts.append(f"the {c.variant.name} variant of torch {c.release.series} is unconfirmed")
        worst = c.variant.confidence
    if c.runs in c.variant.archs_uncertain:
        doubts.append(f"{c.runs} in the {c.variant.name} wheel is inferred, not confirmed")
        worst = "uncertain"
    if c.via == "ptx":
        doubts.append(
            f"PTX of {c.runs} in the {c.variant.name} wheel is per the release notes only; "
            "the package index's cu13x wheels have none (AUDIT row 60)"
        )
        worst = "uncertain"
    if c.override is not None:
        if _CONF_RANK[c.override.confidence] > _CONF_RANK[worst]:
            worst = c.override.confidence
        if c.override.confidence == "uncertain":
            doubts.append(f"the {HSA_OVERRIDE} override for {arch} is unconfirmed")
    confidence: Confidence = "uncertain"
    if worst == "verified":
        confidence = "verified"
    elif worst == "community":
        confidence = "community"
    return confidence, tuple(doubts)


def solve(request: SolveRequest, table: CompatTable) -> Solution:
    """Solve ``request`` against ``table``; raises :class:`NoStack` / :class:`UnknownArch`
    (exit 2) or :class:`InvalidInput` for a malformed constraint."""
    arch = request.arch.strip().lower()
    vendor = vendor_of(arch)
    if vendor is None or not is_device_arch(arch) or arch not in known_archs(table):
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

    all_candidates = _candidates(arch, table)
    if not all_candidates:
        raise NoStack(_no_wheel_message(arch, table), hint=_no_wheel_hint(arch, table))
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
            stacks.append(stack)
    if not stacks:
        last = all_candidates[-1]
        raise NoStack(
            f"no published wheel runs {arch} under the constraints given ({rejected[-1]}); the "
            f"last release that can run {arch} is torch {last.version}+{last.variant.name}",
            hint="drop or change --torch/--python/--base-image/--driver",
        )

    if request.conservative:
        stacks.sort(key=_evidence_key)
    else:
        stacks.sort(key=_newest_key)
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
    picks = _picks(arch, best, chosen, request, table)
    notes: list[str] = []
    if not request.conservative and best.confidence != "verified":
        safest = min(stacks, key=_evidence_key)
        if safest is not best and _CONF_RANK[safest.confidence] < _CONF_RANK[best.confidence]:
            notes.append(
                f"--conservative would choose {safest.label} on {safest.base_image} "
                f"({safest.confidence})"
            )
    if info is not None and info.official:
        notes.append(f"{arch} official support: {info.official}")
    o = table.override_for(arch)
    if o is not None and best.override is None and o.status != "works":
        notes.append(
            f"the table's {HSA_OVERRIDE}={o.value} override for {arch} is {o.status} "
            f"({o.note}; {o.source}): not used"
        )
    return Solution(
        arch=arch,
        vendor=vendor,
        family=fam,
        products=products,
        stack=best,
        picks=picks,
        runner_ups=tuple(runner_ups),
        conservative=request.conservative,
        notes=tuple(notes),
    )


def _check_request(request: SolveRequest, table: CompatTable) -> None:
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
    c: _Candidate,
    request: SolveRequest,
    *,
    table: CompatTable,
    images: dict[str, tuple[str, str, str]],
    arch: str,
    newest_series: str,
) -> tuple[Stack | None, str]:
    label = f"torch {c.version}+{c.variant.name}"
    if request.torch is not None:
        if base_version(request.torch) != c.version:
            return None, f"{label} is not --torch {request.torch}"
        wanted = local_label(request.torch)
        if wanted is not None and wanted != c.variant.name:
            return None, f"{label} is not --torch {request.torch}"
    floor: str | None = None
    if c.variant.kind == "cuda" and c.variant.version is not None:
        df = table.driver_floor(c.variant.version)
        floor = None if df is None else df.min
        if (
            floor is not None
            and request.driver is not None
            and not _driver_ok(request.driver, floor)
        ):
            return None, f"{label} needs NVIDIA driver >= {floor}, the driver is {request.driver}"
    low, high = c.variant.python_range(c.version)

    def admitted(py: str) -> bool:
        return py_tuple(low) <= py_tuple(py) <= py_tuple(high)

    if request.base_image is not None:
        entry = table.base_image(request.base_image)
        if entry is None:
            if request.python is None:
                return None, (
                    f"--base-image {request.base_image} is not a known base image: give --python"
                )
            python, image, distro = request.python, request.base_image, request.base_image
        else:
            if request.python is not None and request.python != entry.python:
                return None, (
                    f"--base-image {request.base_image} ships Python {entry.python}, not "
                    f"{request.python}"
                )
            python, image, distro = entry.python, request.base_image, entry.distro
        if not admitted(python):
            return None, f"{label} has wheels for Python {low}-{high}, not {python}"
    elif request.python is not None:
        if not admitted(request.python):
            return None, f"{label} has wheels for Python {low}-{high}, not {request.python}"
        if request.python not in images:
            return None, f"no known base image ships Python {request.python}: give --base-image"
        python = request.python
        image, distro, _ = images[python]
    else:
        shipped = sorted((p for p in images if admitted(p)), key=py_tuple)
        if not shipped:
            return None, f"no known base image ships a Python {low}-{high} for {label}"
        python = shipped[-1]
        image, distro, _ = images[python]
    numpy, _ = _numpy_spec(c.release, python, table)
    if not any(SpecifierSet(numpy).contains(v) for v in table.numpy_installable(python)):
        return None, f"no NumPy release admitted by {numpy} has a wheel for Python {python}"
    confidence, doubts = _doubts(c, arch)
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
            doubts=doubts,
            pypi_default=c.variant.pypi_default,
            newest_release=c.release.series == newest_series,
            driver_floor=floor,
        ),
        "",
    )


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
        _CONF_RANK[s.confidence],
        _VIA_RANK[s.via],
        s.newest_release,
        tuple(-x for x in _version_key(s.torch)),
        not s.pypi_default,
        _version_key(s.accelerator_version),
    )


def _picks(
    arch: str, s: Stack, c: _Candidate, request: SolveRequest, table: CompatTable
) -> tuple[Pick, ...]:
    v = c.variant
    how = {
        "sass": f"has {arch} SASS",
        "arch-list": f"is built for {arch} (PYTORCH_ROCM_ARCH)",
        "same-major": f"has {s.runs} SASS, which runs on {arch} (same major, lower minor)",
        "ptx": f"has {s.runs} PTX, JIT-compiled for {arch}",
        "override": f"is built for {s.runs}, which {arch} runs with {HSA_OVERRIDE}",
    }[s.via]
    if request.torch is not None:
        why_torch = f"asked for (--torch); its {v.name} wheel {how}"
    elif request.conservative:
        why_torch = (
            f"the stack with the most evidence ({s.confidence}"
            + (", the package-index default build" if s.pypi_default else "")
            + ("" if s.newest_release else ", not from the table's newest release")
            + f"); its {v.name} wheel {how}"
        )
    else:
        why_torch = f"the newest release whose {v.name} wheel {how}"
        if v.broken:
            why_torch += " and runs it"
    arch_source = (
        v.arch_source(s.runs)
        if v.kind == "rocm"
        else (v.arch_source(v.archs[0]) if v.archs else v.source)
    )
    conf_variant: Confidence = "uncertain" if s.doubts else "verified"
    picks = [
        Pick(
            "torch",
            s.torch,
            why_torch,
            table.cite(f"{c.release.source}; {arch_source}"),
            conf_variant,
        ),
        Pick(
            "variant",
            f"{v.name} ({s.index}, {s.form})",
            f"{'ROCm' if v.kind == 'rocm' else 'CUDA'} {s.accelerator_version} wheels of torch "
            f"{s.torch}" + (" (the package-index default)" if v.pypi_default else ""),
            table.cite(v.source),
            v.confidence,
        ),
    ]
    if s.driver_floor is not None:
        df = table.driver_floor(s.accelerator_version)
        met = (
            f"; the driver {request.driver} meets it"
            if request.driver
            else "; the host driver is unknown (give --driver to check)"
        )
        picks.append(
            Pick(
                "driver",
                f">= {s.driver_floor}",
                f"CUDA {s.accelerator_version.split('.')[0]} wheels need a Linux driver >= "
                f"{s.driver_floor}{met}",
                table.cite(df.source) if df else "",
                df.confidence if df else "uncertain",
            )
        )
    low, high = v.python_range(s.torch)
    entry = table.base_image(s.base_image)
    if request.python is not None:
        why_py = f"asked for (--python); the wheels cover {low}-{high}"
    elif request.base_image is not None:
        why_py = f"the Python {request.base_image} ships; the wheels cover {low}-{high}"
    else:
        why_py = f"the newest CPython in the wheels' {low}-{high} that a known base image ships"
    py_conf: Confidence = "uncertain" if "[?]" in v.python_source else "verified"
    picks.append(Pick("python", s.python, why_py, table.cite(v.python_source), py_conf))
    picks.append(
        Pick(
            "base_image",
            s.base_image,
            f"ships Python {s.python} ({s.distro})"
            if entry is not None
            else "asked for (--base-image); not a base image the table knows",
            table.cite(entry.source) if entry else "--base-image",
            "verified" if entry is not None else "uncertain",
        )
    )
    numpy, why_np = _numpy_spec(c.release, s.python, table)
    picks.append(
        Pick("numpy", numpy, why_np, table.cite(c.release.numpy_source or "NP2"), "verified")
    )
    if s.override is not None:
        o = s.override
        picks.append(
            Pick(
                f"env.{HSA_OVERRIDE}",
                o.value,
                f"{arch} is not in the wheel; {o.value} runs {o.target} code ({o.status}). "
                + o.note,
                o.source,
                o.confidence,
            )
        )
    return tuple(picks)


def _no_wheel_message(arch: str, table: CompatTable) -> str:
    info = table.arch_info(arch)
    what = f"{arch} ({info.family})" if info else arch
    text = f"no published torch wheel in the compatibility table runs {what}"
    o = table.override_for(arch)
    if o is not None:
        text += f"; the {HSA_OVERRIDE}={o.value} override is {o.status} ({o.confidence}: {o.note})"
    else:
        text += "; no release the table knows ever had code for it (none could)"
    if info is not None and info.official:
        text += f"; official support: {info.official}"
    return text


def _no_wheel_hint(arch: str, table: CompatTable) -> str:
    o = table.override_for(arch)
    if o is not None and o.status == "unreliable":
        return (
            f"a curated recipe may use the {o.status} override (envforge list), or use the cpu "
            "recipe"
        )
    return "use the cpu recipe, or build torch from source for this arch"


def _last_covering(arch: str, table: CompatTable) -> str | None:
    found: str | None = None
    for r in table.releases:
        for v in r.variants:
            if v.covers(arch) and v.broken_arch(arch) is None:
                found = f"{r.versions[-1]}+{v.name}"
    return found
