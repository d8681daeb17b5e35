"""Recipes as frozen, typed values: what the rest of the pipeline receives.

A :class:`Recipe` is only ever made by :func:`envforge.recipe.load.load_recipe`, which
validates the YAML once; every later stage trusts these types.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envforge.core import patterns, pep508
from envforge.core.patterns import Confidence

Vendor = Literal["amd", "nvidia", "none"]
Level = patterns.Level

VENDORS: tuple[Vendor, ...] = ("amd", "nvidia", "none")
LEVELS = patterns.LEVELS

#: Characters no quoting makes safe in a Dockerfile line, a requirements file or a shell
#: script: NUL and every line break ``str.splitlines`` knows (editors and log readers
#: break lines there too). The loader and the renderer both refuse them.
UNQUOTABLE = frozenset("\n\r\x00\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


@dataclass(frozen=True)
class Gpu:
    vendor: Vendor
    arch: str | None
    products: tuple[str, ...] = ()


@dataclass(frozen=True)
class Torch:
    version: str
    index: str | None


@dataclass(frozen=True)
class PackageIndex:
    """A ``packages`` entry that comes from its own index only (``{name: REQ, index: URL}``):
    ``name`` is the canonical distribution name, ``url`` the index as written."""

    name: str
    url: str


@dataclass(frozen=True)
class EnvVar:
    """One environment variable a recipe sets, with why, evidence and how sure we are."""

    name: str
    value: str
    why: str
    evidence: tuple[str, ...]
    confidence: Confidence


@dataclass(frozen=True)
class KnownIssue:
    symptom: str
    workaround: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class CertifySettings:
    step_timeout: float = 60.0
    level: Level = "full"
    #: Absolute paths (relative ones are resolved against the recipe file at load).
    extra_checks: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    gpu: Gpu
    base_image: str
    python: str
    torch: Torch
    numpy: str
    rocm: str | None = None
    cuda: str | None = None
    packages: tuple[str, ...] = ()
    #: Debian/Ubuntu packages the environment needs (ffmpeg, libgl1): installed in the
    #: image; on the venv backend checked on the host.
    system_packages: tuple[str, ...] = ()
    #: The ``packages`` entries pinned to an index of their own (by canonical name).
    package_indexes: tuple[PackageIndex, ...] = ()
    env: tuple[EnvVar, ...] = ()
    known_issues: tuple[KnownIssue, ...] = ()
    certify: CertifySettings = field(default_factory=CertifySettings)
    sources: tuple[str, ...] = ()
    #: Where the recipe was read from ("<builtin>/cpu.yaml" style for display).
    origin: str = "<memory>"

    @property
    def env_map(self) -> dict[str, str]:
        return {e.name: e.value for e in self.env}

    @property
    def accelerator(self) -> str:
        """``rocm5.2``, ``cu126`` or ``cpu``: the wheel variant this recipe asks for."""
        if self.rocm:
            return f"rocm{self.rocm}"
        if self.cuda:
            # "12.6" and "12.6.3" both name the cu126 wheels (major + minor only).
            return "cu" + "".join(self.cuda.split(".")[:2])
        return "cpu"

    @property
    def stack_tag(self) -> str:
        """Tag naming the stack, e.g. ``torch1.13.1-rocm5.2-py3.10`` (see docs/docker.md)."""
        version = self.torch.version.split("+", 1)[0]
        return f"torch{version}-{self.accelerator}-py{self.python}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data, in the recipe file's own key names (for ``--json`` and hashing).
        ``system_packages`` only when there are some: a recipe without them keeps the hash
        it had before the key existed."""
        data = self._data()
        if self.system_packages:
            data["system_packages"] = list(self.system_packages)
        return data

    def _data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "gpu": {
                "vendor": self.gpu.vendor,
                "arch": self.gpu.arch,
                "products": list(self.gpu.products),
            },
            "base_image": self.base_image,
            "python": self.python,
            "rocm": self.rocm,
            "cuda": self.cuda,
            "torch": {"version": self.torch.version, "index": self.torch.index},
            "numpy": self.numpy,
            "packages": self._packages_data(),
            "env": {
                e.name: {
                    "value": e.value,
                    "why": e.why,
                    "evidence": list(e.evidence),
                    "confidence": e.confidence,
                }
                for e in self.env
            },
            "known_issues": [
                {"symptom": k.symptom, "workaround": k.workaround, "evidence": list(k.evidence)}
                for k in self.known_issues
            ],
            "certify": {
                "step_timeout": self.certify.step_timeout,
                "level": self.certify.level,
                "extra_checks": [str(p) for p in self.certify.extra_checks],
            },
            "sources": list(self.sources),
        }

    def index_of(self, requirement: str) -> str | None:
        """The index a ``packages`` entry is pinned to; None: the stack's usual sources."""
        name = pep508.name_of(requirement)
        return next((p.url for p in self.package_indexes if p.name == name), None)

    def _packages_data(self) -> list[Any]:
        """``packages`` as the recipe file writes it (an entry with an index: a mapping)."""
        out: list[Any] = []
        for entry in self.packages:
            index = self.index_of(entry) if self.package_indexes else None
            out.append(entry if index is None else {"name": entry, "index": index})
        return out

    @property
    def hash(self) -> str:
        """sha256 over the recipe's content and the content of its extra check files.

        Paths are left out so that the same recipe hashes the same on every machine.
        """
        data = self.to_dict()
        data["certify"]["extra_checks"] = [_file_digest(p) for p in self.certify.extra_checks]
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return f"missing:{path.name}"
