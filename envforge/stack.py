"""One value for the stack: what a recipe pins, computed once from the recipe and the table.

The pipeline reads recipe -> :class:`Stack` -> render, lock, backends, probe, certificate.
A :class:`Stack` holds torch with its index, index form and local tag, the companions
(torchvision, torchaudio, ... paired with torch), the NumPy bound, the recipe's other
packages and room for a project's requirements. Every stage that installs, locks, labels
or checks "the stack's packages" reads them here; no stage builds a torch pin of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envforge.core import pep508
from envforge.errors import ConstraintViolation
from envforge.knowledge import load_table
from envforge.knowledge.companion_route import python_gap, route
from envforge.knowledge.companions import CompanionTable, Row, family_of, load_companions
from envforge.knowledge.extensions import extension_checks
from envforge.knowledge.table import CompatTable
from envforge.knowledge.torch_index import IndexForm, index_form, local_tag, torch_requirement
from envforge.recipe.model import PackageIndex, Recipe

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from envforge.knowledge.wheel_variants import WheelVariant


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
    #: The index this build comes from when it is not the stack's (torchaudio 2.11.0+cu130
    #: beside torch +cu132: only the cu130 index has it); None: the stack's index.
    index: str | None = None

    def to_dict(self) -> dict[str, str]:
        data = {
            "name": self.name,
            "requirement": self.requirement,
            "reason": self.reason,
            "source": self.source,
        }
        if self.index is not None:  # absent otherwise: the output stays as it was
            data["index"] = self.index
        return data


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
    #: ``packages`` entries that come from an index of their own, and from nowhere else.
    package_indexes: tuple[PackageIndex, ...] = ()
    #: The PEP 825 wheel variant chosen for torch where its index serves variants.
    variant: WheelVariant | None = None

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

    def indexed_lines(self) -> tuple[tuple[str, str], ...]:
        """(requirement, index URL) of each package that comes from its own index only:
        a companion whose build lives on another index than torch's, then the recipe's
        ``{name, index}`` packages."""
        urls = {p.name: p.url for p in self.package_indexes}
        out = [(c.requirement, c.index) for c in self.companions if c.index is not None]
        for line in self.packages:
            name = requirement_name(line)
            if name in urls:
                out.append((line, urls[name]))
        return tuple(out)

    def install_lines(self) -> tuple[str, ...]:
        """:meth:`requirement_lines` less the packages from their own index (installed from
        there by a step of their own, :meth:`indexed_lines`)."""
        skip = {line for line, _ in self.indexed_lines()}
        return tuple(line for line in self.requirement_lines() if line not in skip)

    def first_layer(self) -> tuple[str, ...]:
        """What is installed from the stack's index (or the wheelhouse) alone, never the
        default index: torch and its companions (with the NumPy bound, which torchvision
        and torchaudio need, so that the first install already honours it). A companion
        from another index is not among them (:meth:`indexed_lines`)."""
        if not self.companions:
            return (self.torch,)
        own = (c.requirement for c in self.companions if c.index is None)
        return (self.torch, *own, self.numpy)

    def family(self) -> tuple[str, ...]:
        """Canonical names of the torch family: torch and the companions."""
        return ("torch", *(c.name for c in self.companions))

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
        data = self._data()
        if self.package_indexes:  # absent otherwise: the output stays as it was
            data["package_indexes"] = {p.name: p.url for p in self.package_indexes}
        if self.variant is not None:  # likewise: non-variant stacks are as they were
            data["variant"] = self.variant.to_dict()
        return data

    def _data(self) -> dict[str, Any]:
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
    return pep508.name_of(line)


def stack_of(
    recipe: Recipe,
    table: CompatTable | None = None,
    companions: CompanionTable | None = None,
) -> Stack:
    """The stack ``recipe`` asks for, computed once; every later stage reads this value.

    Companion entries of ``packages`` (a bare ``torchvision``, or a pin) become
    :class:`Pin` values paired with torch by the companion table; an entry that contradicts
    the stack (another torch, another variant's build, a release that does not exist, a
    NumPy outside the bound, a runtime wheel of another major) raises
    :class:`ConstraintViolation` (exit 2) naming the package and the version that fits.
    """
    base = Stack(
        torch=torch_requirement(recipe),
        torch_version=recipe.torch.version.split("+", 1)[0],
        index=recipe.torch.index,
        index_form=index_form(recipe, table),
        accelerator=recipe.accelerator,
        local_tag=local_tag(recipe),
        numpy_bound=recipe.numpy,
    )
    pins, rest = split_packages(
        recipe,
        base,
        load_companions() if companions is None else companions,
        load_table() if table is None else table,
    )
    refusals, _issues = extension_checks(recipe, base.torch_version)
    if refusals:
        first = refusals[0]
        raise ConstraintViolation(
            recipe.origin, first.rule, first.message, evidence=first.evidence, hint=first.hint
        )
    return replace(base, companions=pins, packages=rest, package_indexes=recipe.package_indexes)


# --------------------------------------------------------------------------- packages

_CUDA_RUNTIME_RE = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)$")
_ROCM_RUNTIME_RE = re.compile(r"^(?:rocm|rocm-sdk-[a-z0-9-]+)$")


def _cuda_major(variant: str) -> str | None:
    """``cu130`` → ``13``, ``cu126`` → ``12``; None for other variants."""
    digits = variant[2:]
    return digits[:-1] if variant.startswith("cu") and digits.isdigit() else None


def split_packages(
    recipe: Recipe, stack: Stack, table: CompanionTable, compat: CompatTable
) -> tuple[tuple[Pin, ...], tuple[str, ...]]:
    """(the companions pinned to the stack, the recipe's other packages as written)."""
    check = PackageCheck(recipe, stack, table, compat)
    pins: list[Pin] = []
    rest: list[str] = []
    for i, entry in enumerate(recipe.packages):
        key = f"packages[{i}]"
        req = pep508.parse(entry)
        if req is None:
            rest.append(entry)  # the loader refuses these; a hand-made recipe keeps them
            continue
        name = pep508.canonical_name(req.name)
        if name == "torch":
            check.torch(key, req)
            continue
        package = table.package(name)
        pin = None if package is None or req.url else check.companion(key, req, package.name)
        if pin is not None:
            pins.append(pin)
            continue
        if name == "numpy":
            check.numpy(key, req)
        check.runtime(key, req, name)
        rest.append(entry)
    return tuple(pins), tuple(rest)


def _pinned(req: Requirement) -> str | None:
    """The version of a ``==`` pin (with its local tag), or None."""
    return next((s.version for s in req.specifier if s.operator in ("==", "===")), None)


class PackageCheck:
    """The refusals of :func:`split_packages`: each one line naming the package, what it
    pairs with and the version that fits."""

    def __init__(
        self,
        recipe: Recipe,
        stack: Stack,
        table: CompanionTable,
        compat: CompatTable,
        *,
        origin: str | None = None,
    ) -> None:
        self.recipe = recipe
        self.stack = stack
        self.table = table
        self.compat = compat
        self.family = family_of(stack.accelerator)
        self.build = (
            recipe.torch.version
            if "+" in recipe.torch.version
            else (
                f"{stack.torch_version}+{stack.local_tag}"
                if stack.local_tag
                else stack.torch_version
            )
        )
        #: The file a refusal names (a project's requirements file, else the recipe's),
        #: and how it names the stack's torch.
        self.origin = recipe.origin if origin is None else origin
        self.torch_label = (
            f"torch.version {recipe.torch.version}"
            if origin is None
            else f"the {recipe.name} stack's torch {self.build}"
        )

    def refuse(self, rule: str, message: str, *, source: str, hint: str) -> ConstraintViolation:
        return ConstraintViolation(self.origin, rule, message, evidence=source, hint=hint)

    def torch(self, key: str, req: Requirement) -> None:
        version = _pinned(req)
        wanted = self.stack.torch.split("==", 1)[1]
        if (
            version is None
            or version.split("+", 1)[0] != self.stack.torch_version
            or ("+" in version and version != wanted)
        ):
            raise self.refuse(
                "torch-in-packages",
                f"{key}: {req} contradicts torch.version {self.recipe.torch.version}",
                source="the recipe's torch.version",
                hint=f"remove {req.name} from packages (torch.version pins {self.stack.torch})",
            )

    def numpy(self, key: str, req: Requirement) -> None:
        version = _pinned(req)
        bound = SpecifierSet(self.stack.numpy_bound)
        if version is not None and not bound.contains(version.split("+", 1)[0], prereleases=True):
            raise self.refuse(
                "numpy-bound",
                f"{key}: {req} is outside the recipe's NumPy bound "
                f"{self.stack.numpy_bound.strip()} (torch {self.build})",
                source="the recipe's numpy key",
                hint=f"pin a NumPy within {self.stack.numpy_bound.strip()}, or drop the pin",
            )

    def fitting(self, name: str) -> str:
        row = self.table.pairing(name, self.stack.torch_version)
        if row is None:
            return ""
        tags = self.tags(name, row)
        return self._line(row, tags[0] if tags else self.stack.local_tag)

    def _line(self, row: Row, tag: str | None) -> str:
        if row.accepts is not None:
            return f"{row.package}{row.accepts}"
        return f"{row.package}=={row.version}" + (f"+{tag}" if tag else "")

    def tags(self, name: str, row: Row) -> tuple[str | None, ...]:
        """The local tags a build of ``row`` that fits the stack can carry: the stack's
        own, or (CUDA) another variant of the same major when the release that ``row``
        was published with has no build of the stack's variant; () when none fits."""
        package = self.table.package(name)
        tag = self.stack.local_tag
        if package is None or not package.local_tag or not tag:
            return (None,)
        own = tag not in row.missing  # its index carries the release (not known otherwise)
        if own and Version(row.torch) == Version(self.stack.torch_version):
            return (tag,)
        release = self.compat.release(row.torch)
        published = tuple(
            v
            for v in (release.variant_names if release is not None else ())
            if v not in row.missing
        )
        if own and (not published or tag in published):
            return (tag,)
        major = _cuda_major(tag)
        same = [v for v in published if major is not None and _cuda_major(v) == major]
        return tuple(sorted(same, key=lambda v: int(v[2:]), reverse=True))

    def tag_for(self, key: str, name: str, row: Row) -> str | None:
        tags = self.tags(name, row)
        if tags:
            return tags[0]
        release = self.compat.release(row.torch)
        published = ", ".join(release.variant_names) if release is not None else "?"
        raise self.refuse(
            "companion-variant",
            f"{key}: {name} {row.version} (published with torch {row.torch} for {published}) "
            f"has no build that fits torch {self.build}",
            source=row.source,
            hint=f"remove {name}, or choose a torch whose {name} has a {self.family} build",
        )

    def companion(self, key: str, req: Requirement, name: str) -> Pin | None:
        package = self.table.package(name)
        assert package is not None
        if self.family not in package.families:
            others = [
                p.name
                for p in self.table.packages
                if self.family in p.families
                and p.pinned_by_torch == package.pinned_by_torch
                and self.table.pairing(p.name, self.stack.torch_version) is not None
            ]
            fits = f"; {self.fitting(others[0])} pairs with it" if others else ""
            raise self.refuse(
                "companion-variant",
                f"{key}: {name} is for the {'/'.join(package.families)} builds; torch "
                f"{self.build} is a {self.family} build{fits}",
                source=self._source(others[0] if others else name),
                hint=f"remove {name}" + (f" or write {others[0]}" if others else ""),
            )
        if not str(req.specifier):
            return self._bare(key, name)
        version = _pinned(req)
        if version is None:
            return None  # the loader refuses unpinned entries; hand-made recipes keep them
        return self._pin(key, req, name, version)

    def _source(self, name: str) -> str:
        row = self.table.pairing(name, self.stack.torch_version)
        rows = self.table.rows_of(name)
        return row.source if row is not None else rows[-1].source if rows else "companions.yaml"

    def _bare(self, key: str, name: str) -> Pin:
        row = self.table.pairing(name, self.stack.torch_version)
        if row is None:
            raise self.refuse(
                "companion-unknown",
                f"{key}: the companion table has no {name} release that pairs with torch "
                f"{self.build}",
                source="envforge/data/companions.yaml",
                hint=f"pin it: {name}==VERSION (the release published with torch "
                f"{self.stack.torch_version})",
            )
        tag = self.tag_for(key, name, row)
        return Pin(name, self._line(row, tag), *self._route(row, tag))

    def _route(self, row: Row, tag: str | None) -> tuple[str, str, str | None]:
        gap = python_gap(row, self.recipe.python)
        if gap is not None:
            raise self.refuse(
                "companion-python",
                f"{gap} (beside torch {self.build})",
                source=row.source,
                hint=f"remove {row.package}, or use a Python its wheels have",
            )
        package = self.table.package(row.package)
        return route(
            row,
            tag,
            own=self.stack.local_tag,
            index=self.stack.index,
            compat=self.compat,
            system=package.system if package is not None else "",
        )

    def _pin(self, key: str, req: Requirement, name: str, version: str) -> Pin | None:
        if not self.table.covers(name, version):
            return None  # older than the table: kept as written, not checked
        fit = self.fitting(name)
        fits = f"; {fit} fits" if fit else ""
        row = self.table.row(name, version)
        if row is None:
            raise self.refuse(
                "companion-release",
                f"{key}: {name} {version} is not a release the companion table knows "
                f"(checked {max(r.checked for r in self.table.rows_of(name))}){fits}",
                source=self.table.rows_of(name)[-1].source,
                hint=f"write {fit or name}, or {name} alone: envforge pins the pairing release",
            )
        if not self.table.fits(name, version, self.stack.torch_version):
            raise self.refuse(
                "companion-pairing",
                f"{key}: {name}=={version} pairs with torch {row.torch}, not "
                f"{self.torch_label}{fits}",
                source=row.source,
                hint=f"write {fit or name}, or {name} alone: envforge pins the pairing release",
            )
        tag = version.split("+", 1)[1] if "+" in version else None
        fitting = self.tags(name, row)
        wanted = fitting[0] if fitting else self.tag_for(key, name, row)
        if tag is not None and wanted is not None and tag not in fitting:
            raise self.refuse(
                "companion-variant",
                f"{key}: {name}=={version} is another variant's build (+{tag}) beside torch "
                f"{self.build}{fits}",
                source=row.source,
                hint=f"write {fit or name}",
            )
        line = str(req) if tag is not None or wanted is None else f"{name}=={version}+{wanted}"
        reason, source, index = self._route(row, tag or wanted)
        return Pin(name, line, f"as written; {reason}", source, index)

    def project_line(self, line: str, environment: Mapping[str, str]) -> Pin | None:
        """The pin a project's requirement ``line`` becomes when it names a companion
        (None: not one, a URL, or a marker that does not hold here)."""
        req = pep508.parse(line)
        if req is None:
            return None
        package = self.table.package(pep508.canonical_name(req.name))
        if (
            package is None
            or req.url
            or (req.marker is not None and not req.marker.evaluate(dict(environment)))
        ):
            return None
        key = "project requirement"
        version = _pinned(req)
        if self._before_table(package.name):
            line = f"{package.name}{req.specifier}"
            return Pin(
                package.name,
                line,
                f"the project requires {req}; the companion table "
                f"starts after torch {self.stack.torch_version}, so the stack's index "
                "picks the release (uncertain)",
                self._source(package.name),
            )
        if version is not None and not self.table.covers(package.name, version):
            fit = self.fitting(package.name)
            raise self.refuse(
                "companion-pairing",
                f"{key}: {package.name}=={version} is older than every release the companion "
                f"table pairs with a torch"
                + (f"; {fit} pairs with torch {self.build}" if fit else ""),
                source=self._source(package.name),
                hint=f"write {fit or package.name}, or {package.name} alone: envforge pins "
                "the pairing release",
            )
        pin = self.companion(
            key, req if version is not None else pep508.requirement(package.name), package.name
        )
        if pin is None:
            return None
        if version is None and str(req.specifier):
            self._within(key, req, pin)
        return replace(pin, reason=f"the project requires {req}; {pin.reason}")

    def _before_table(self, name: str) -> bool:
        """The stack's torch is older than every torch the table pairs ``name`` with."""
        rows = self.table.rows_of(name)
        return bool(rows) and Version(self.stack.torch_version) < min(
            Version(r.torch) for r in rows
        )

    def _within(self, key: str, req: Requirement, pin: Pin) -> None:
        """A range (``torchvision>=0.20``) must admit the release that pairs with torch."""
        version = Version(_pinned(pep508.requirement(pin.requirement)) or "0").public
        if not req.specifier.contains(version, prereleases=True):
            raise self.refuse(
                "companion-pairing",
                f"{key}: {req} excludes {pin.name} {version}, the release that pairs with "
                f"{self.torch_label}",
                source=pin.source,
                hint=f"write {pin.name} alone (envforge pins {pin.requirement}), or choose a "
                f"recipe whose torch pairs with {req}",
            )

    def runtime(self, key: str, req: Requirement, name: str) -> None:
        """A CUDA or ROCm runtime wheel must be of the stack's major (and family)."""
        cuda = _CUDA_RUNTIME_RE.match(name)
        major: str | None = cuda.group(1) if cuda else None
        version = _pinned(req)
        if name == "cuda-toolkit" and version is not None:
            major = version.split(".", 1)[0]
        if major is not None:
            have = (self.recipe.cuda or "").split(".", 1)[0]
            if major != have:
                built = f"built for CUDA {have}" if have else f"a {self.family} build"
                raise self.refuse(
                    "runtime-major",
                    f"{key}: {req} is a CUDA {major} runtime wheel; torch {self.build} is {built}",
                    source="the recipe's cuda key",
                    hint=f"remove {req.name}: torch's own metadata brings the runtime it needs",
                )
        if _ROCM_RUNTIME_RE.match(name) and version is not None:
            series = ".".join(version.split("+", 1)[0].split(".")[:2])
            have = ".".join((self.recipe.rocm or "").split(".")[:2])
            if series != have:
                built = f"built for ROCm {have}" if have else f"a {self.family} build"
                raise self.refuse(
                    "runtime-major",
                    f"{key}: {req} is a ROCm {series} runtime wheel; torch {self.build} is {built}",
                    source="the recipe's rocm key",
                    hint=f"remove {req.name}, or pin it to ROCm {have or 'of the stack'}",
                )
