"""One value for the stack: what a recipe pins, computed once from the recipe and the table.

The pipeline reads recipe -> :class:`Stack` -> render, lock, backends, probe, certificate.
A :class:`Stack` holds torch with its index, index form and local tag, the companions
(torchvision, torchaudio, ... paired with torch), the NumPy bound, the recipe's other
packages and room for a project's requirements. Every stage that installs, locks, labels
or checks "the stack's packages" reads them here; no stage builds a torch pin of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envforge.errors import InvalidInput
from envforge.knowledge import variant_of
from envforge.knowledge.table import CompatTable
from envforge.recipe.model import Recipe

IndexForm = Literal["index-url", "extra-index-url"]

#: A PyTorch wheel index (``.../whl/rocm5.2``, ``.../whl/cu126``, ``.../whl/nightly/cpu``):
#: these publish torch under local version labels (``+rocm5.2``).
_PYTORCH_INDEX_RE = re.compile(r"/whl/(?:nightly/|test/)?(?:cpu|cu\d+|rocm\d+(?:\.\d+)*)/?$")


@dataclass(frozen=True)
class Pin:
    """One package the stack pins for the user, with why and where that is written."""

    #: The distribution's canonical name (``torchvision``).
    name: str
    #: The requirement line (``torchvision==0.28.0+cpu``).
    requirement: str
    #: Why this version (``pairs with torch 2.13.0 (Requires-Dist: torch==2.13.0)``).
    reason: str
    #: A URL a user can open that says so.
    source: str

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "requirement": self.requirement,
            "reason": self.reason,
            "source": self.source,
        }


@dataclass(frozen=True)
class Stack:
    """The packages a recipe's environment is made of, and where torch comes from."""

    #: ``torch==2.13.0+cpu`` (with the variant's local tag on a PyTorch index).
    torch: str
    #: The torch release without a local tag (``2.13.0``).
    torch_version: str
    #: The recipe's ``torch.index`` as written (a mirror is applied when rendering).
    index: str | None
    #: How that index is given to the installer; None without an index.
    index_form: IndexForm | None
    #: The wheel variant (``cpu``, ``cu126``, ``rocm6.2``) and the local tag the torch
    #: family carries on its index (None: the default index's untagged build).
    accelerator: str
    local_tag: str | None
    #: The recipe's NumPy bound as written (``>=1.26,<3``).
    numpy_bound: str
    #: Packages pinned to pair with torch (torchvision, torchaudio, triton, ...).
    companions: tuple[Pin, ...] = ()
    #: The recipe's other ``packages`` entries, as written.
    packages: tuple[str, ...] = ()
    #: A project's own requirements (added on top; empty for a plain recipe).
    project: tuple[str, ...] = ()

    @property
    def numpy(self) -> str:
        """The NumPy requirement line (``numpy>=1.26,<3``)."""
        return f"numpy{self.numpy_bound.strip()}"

    def requirement_lines(self) -> tuple[str, ...]:
        """torch, the NumPy bound, the companions, the recipe's packages, the project's."""
        return (
            self.torch,
            self.numpy,
            *(c.requirement for c in self.companions),
            *self.packages,
            *self.project,
        )

    def constraint_lines(self) -> tuple[str, ...]:
        """What nothing else may move: torch, the NumPy bound and the companions."""
        return (self.torch, self.numpy, *(c.requirement for c in self.companions))

    def requirement_keys(self, prefix: str = "") -> tuple[str, ...]:
        """Where each of :meth:`requirement_lines` comes from, for error messages."""
        return (
            "torch.version",
            "numpy",
            *(f"packages: {c.name}" for c in self.companions),
            *(f"packages[{i}]" for i in range(len(self.packages))),
            *(f"{prefix}requirements[{i}]" for i in range(len(self.project))),
        )

    def distributions(self) -> tuple[str, ...]:
        """Canonical names of every distribution the stack asks for, in order, once each
        (torch, numpy, the companions, the recipe's packages, the project's); the probe
        imports each one's top-level modules."""
        names: list[str] = []
        for line in self.requirement_lines():
            name = requirement_name(line)
            if name is not None and name not in names:
                names.append(name)
        return tuple(names)

    def with_project(self, requirements: tuple[str, ...]) -> Stack:
        """The same stack with a project's requirements added on top."""
        return replace(self, project=tuple(requirements))

    def to_dict(self) -> dict[str, Any]:
        return {
            "torch": self.torch,
            "torch_version": self.torch_version,
            "index": self.index,
            "index_form": self.index_form,
            "accelerator": self.accelerator,
            "local_tag": self.local_tag,
            "numpy": self.numpy_bound,
            "companions": [c.to_dict() for c in self.companions],
            "packages": list(self.packages),
            "project": list(self.project),
        }


def requirement_name(line: str) -> str | None:
    """The canonical distribution name of a requirement line; None if it is not PEP 508."""
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None


def is_pytorch_index(url: str | None) -> bool:
    """True for a PyTorch wheel index, which names torch builds with a local label."""
    return url is not None and _PYTORCH_INDEX_RE.search(url) is not None


def local_tag(recipe: Recipe) -> str | None:
    """The local version label the stack's torch family carries (``cpu``, ``rocm5.2``):
    the one written in ``torch.version``, else the variant's on a PyTorch index."""
    version = recipe.torch.version
    if "+" in version:
        return version.split("+", 1)[1]
    return recipe.accelerator if is_pytorch_index(recipe.torch.index) else None


def torch_requirement(recipe: Recipe) -> str:
    """``torch==1.13.1+rocm5.2`` for a PyTorch index, ``torch==2.4.1`` for the default one.

    A version that already carries a local label is used as written.
    """
    version = recipe.torch.version
    if "+" not in version and is_pytorch_index(recipe.torch.index):
        version = f"{version}+{recipe.accelerator}"
    return f"torch=={version}"


def index_form(recipe: Recipe, table: CompatTable | None = None) -> IndexForm | None:
    """How ``torch.index`` is passed to the installer; None without an index.

    The compatibility table says, per wheel variant: torch 1.11-1.13 wheels are published
    on the PyTorch index as an *extra* index with an explicit local version; from 2.0 the
    variant index is *the* index (matrix 2a). For a variant the table does not know (or
    an index that is not a PyTorch one) the same rule is applied to the version.
    """
    if recipe.torch.index is None:
        return None
    if is_pytorch_index(recipe.torch.index):
        variant = variant_of(recipe, table)
        if variant is not None:
            return variant.form
    base = recipe.torch.version.split("+", 1)[0]
    try:
        version = Version(base)
    except InvalidVersion:
        raise InvalidInput(
            f"{recipe.origin}: torch.version: {recipe.torch.version!r} is not a version",
            hint='write it like "2.4.1"',
        ) from None
    return "extra-index-url" if version < Version("2.0") else "index-url"


def stack_of(recipe: Recipe, table: CompatTable | None = None) -> Stack:
    """The stack ``recipe`` asks for, computed once; every later stage reads this value."""
    return Stack(
        torch=torch_requirement(recipe),
        torch_version=recipe.torch.version.split("+", 1)[0],
        index=recipe.torch.index,
        index_form=index_form(recipe, table),
        accelerator=recipe.accelerator,
        local_tag=local_tag(recipe),
        numpy_bound=recipe.numpy,
        packages=recipe.packages,
    )
