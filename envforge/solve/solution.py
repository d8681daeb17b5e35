"""The values ``envforge solve`` gives: the request, each :class:`Pick` with its reason and
source, the :class:`Stack` and the :class:`Solution` (with its recipe form).

:mod:`envforge.solve.solver` computes them from the compatibility table; this module holds the
frozen values and their dict/recipe renderings (no table logic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from envforge.core.patterns import Confidence
from envforge.errors import InvalidInput
from envforge.knowledge.links import evidence_links
from envforge.knowledge.table import Override, Release, Variant

HSA_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"

#: How a wheel runs the arch, best first.
Via = Literal["sass", "same-major", "arch-list", "override", "ptx"]


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
    #: ``linux/amd64`` or ``linux/arm64`` (the wheels' platform); None: the arch's own
    #: platform when it has only one (Jetson, GB10), else linux/amd64.
    platform: str | None = None
    #: Allow uncertain choices: the newest stack, not the newest fully verified one.
    latest: bool = False
    #: Refuse an answer predicted from the arch's family (an arch with no table row).
    strict: bool = False


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
    #: The wheels' platform (``linux/amd64``, ``linux/arm64``).
    platform: str = "linux/amd64"

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
            "platform": self.platform,
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
    #: ``--latest``: uncertain choices were allowed.
    latest: bool = False
    #: Why the answer is predicted from the arch's ISA family (the table has no row for
    #: the arch): the rule and its source; "" for an arch the table knows.
    prediction: str = ""

    @property
    def mode(self) -> str:
        """``conservative``, ``latest`` or ``verified`` (the default)."""
        return "conservative" if self.conservative else "latest" if self.latest else "verified"

    @property
    def confidence(self) -> Confidence:
        return self.stack.confidence

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "vendor": self.vendor,
            "family": self.family,
            "products": list(self.products),
            "mode": self.mode,
            "platform": self.stack.platform,
            "confidence": "predicted" if self.prediction else self.confidence,
            "prediction": self.prediction or None,
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
            f"({self.mode}, {s.platform}): torch {s.torch}+"
            f"{s.variant} on {s.distro}'s Python {s.python}; {how}."
        )
        if self.prediction:
            text += f" Confidence: predicted, not verified ({self.prediction})."
        elif s.confidence != "verified":
            text += f" Confidence: {s.confidence} ({'; '.join(s.doubts)})."
        return text


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class Candidate:
    """A torch version of a release whose variant runs the arch, and how."""

    release: Release
    version: str
    variant: Variant
    via: Via
    runs: str
    override: Override | None
