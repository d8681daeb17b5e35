"""The audit's values: what the collector found (:class:`Inventory`), what the judges
say (:class:`Finding`, :class:`CheckResult`), and the whole :class:`AuditReport`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envforge.audit.elfscan import ElfFacts

Severity = Literal["error", "warning", "info"]
CheckStatus = Literal["pass", "fail", "warn", "skip"]
#: The checks, in the order they are reported (docs/audit.md).
CHECKS: tuple[str, ...] = (
    "gpu-code",
    "duplicate-libraries",
    "torch-extensions",
    "numpy-c-api",
    "companions",
)
SCHEMA = 1


@dataclass(frozen=True)
class Distribution:
    name: str
    version: str
    requires: tuple[str, ...]
    metadata_dir: str
    site_dir: str
    files: int
    #: (absolute path, size RECORD gives or None) of its shared objects.
    shared: tuple[tuple[str, int | None], ...]
    shadowed: bool = False

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def requirement(
        self, name: str, environment: Mapping[str, str] | None = None
    ) -> Requirement | None:
        """Its ``Requires-Dist`` on ``name`` that apply in ``environment`` (PEP 508 marker
        values of the audited interpreter; extras' requirements left out), their
        specifiers joined: ``numpy<2.0; python_version < "3.9"`` does not apply on 3.12."""
        found: list[Requirement] = []
        for line in self.requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) != canonicalize_name(name):
                continue
            if req.marker is not None:
                if "extra" in str(req.marker):
                    continue
                if environment is not None and not _applies(req, environment):
                    continue
            found.append(req)
        if len(found) < 2:
            return found[0] if found else None
        joined = ",".join(str(r.specifier) for r in found if str(r.specifier))
        return Requirement(f"{found[0].name}{joined}") if joined else found[0]


def _applies(req: Requirement, environment: Mapping[str, str]) -> bool:
    assert req.marker is not None
    try:
        return bool(req.marker.evaluate({**environment, "extra": ""}))
    except Exception:  # a marker packaging cannot evaluate counts as applying
        return True


@dataclass(frozen=True)
class SharedObject:
    path: str
    real: str
    link: bool
    owners: tuple[str, ...]


@dataclass(frozen=True)
class Inventory:
    python: str
    executable: str
    prefix: str
    site_dirs: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    distributions: tuple[Distribution, ...]
    shared_objects: tuple[SharedObject, ...]
    #: PEP 508 marker values of the audited interpreter (the collector's ``markers``).
    markers: tuple[tuple[str, str], ...] = ()

    @property
    def marker_env(self) -> dict[str, str]:
        """The audited interpreter's marker values; from an older collector, this host's
        with the interpreter's Python version."""
        if self.markers:
            return dict(self.markers)

        env = {k: str(v) for k, v in default_environment().items()}
        if self.python:
            env["python_full_version"] = self.python
            env["python_version"] = ".".join(self.python.split(".")[:2])
        return env

    def dist(self, name: str) -> Distribution | None:
        """The distribution ``name`` as imports see it (the first on sys.path)."""
        key = canonicalize_name(name)
        return next((d for d in self.distributions if d.key == key and not d.shadowed), None)

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    def relative(self, path: str) -> str:
        """``path`` below its site folder (``torch/lib/libc10.so``), else as it is."""
        for site in self.site_dirs:
            if path.startswith(site.rstrip("/") + "/"):
                return path[len(site.rstrip("/")) + 1 :]
        return path


def inventory_from_dict(data: Mapping[str, Any]) -> Inventory:
    """The collector's JSON (see :mod:`envforge.audit.inventory`) as values."""
    py = data.get("python") or {}
    dists = tuple(
        Distribution(
            name=str(d["name"]),
            version=str(d.get("version") or ""),
            requires=tuple(str(r) for r in d.get("requires") or ()),
            metadata_dir=str(d.get("metadata_dir") or ""),
            site_dir=str(d.get("site_dir") or ""),
            files=int(d.get("files") or 0),
            shared=tuple((str(p), None if s is None else int(s)) for p, s in d.get("shared") or ()),
            shadowed=bool(d.get("shadowed")),
        )
        for d in data.get("distributions") or ()
    )
    shared = tuple(
        SharedObject(
            path=str(s["path"]),
            real=str(s.get("real") or s["path"]),
            link=bool(s.get("link")),
            owners=tuple(str(o) for o in s.get("owners") or ()),
        )
        for s in data.get("shared_objects") or ()
    )
    return Inventory(
        python=str(py.get("version") or ""),
        executable=str(py.get("executable") or ""),
        prefix=str(py.get("prefix") or ""),
        site_dirs=tuple(str(s) for s in data.get("site_dirs") or ()),
        env=tuple(sorted((str(k), str(v)) for k, v in (data.get("env") or {}).items())),
        distributions=dists,
        shared_objects=shared,
        markers=tuple(sorted((str(k), str(v)) for k, v in (data.get("markers") or {}).items())),
    )


@dataclass(frozen=True)
class Collected:
    """An environment's inventory and the ELF facts of its shared objects (by real path)."""

    inventory: Inventory
    facts: Mapping[str, ElfFacts]
    #: What was audited, in words (an interpreter, a venv, an image).
    target: str

    def libraries(self) -> list[tuple[SharedObject, ElfFacts]]:
        """Each real file once (links folded), with its facts."""
        seen: set[str] = set()
        out: list[tuple[SharedObject, ElfFacts]] = []
        for so in self.inventory.shared_objects:
            facts = self.facts.get(so.real)
            if facts is None or so.real in seen:
                continue
            seen.add(so.real)
            out.append((so, facts))
        return out

    @cached_property
    def by_path(self) -> dict[str, SharedObject]:
        return {so.path: so for so in self.inventory.shared_objects}

    @cached_property
    def _real_owners(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for so in self.inventory.shared_objects:
            if so.owners and so.real not in out:
                out[so.real] = so.owners
        return out

    def facts_of(self, path: str) -> ElfFacts | None:
        """The facts of the shared object listed at ``path`` (a RECORD path)."""
        so = self.by_path.get(path)
        return None if so is None else self.facts.get(so.real)

    def owner(self, so: SharedObject) -> str:
        """The distributions owning ``so`` (or its real file) as a label."""
        names = so.owners or self.owners_of(so.real)
        if not names:
            return "no distribution"
        labels = []
        for name in names:
            dist = self.inventory.dist(name)
            labels.append(dist.label if dist is not None else name)
        return ", ".join(labels)

    def owners_of(self, real: str) -> tuple[str, ...]:
        return self._real_owners.get(real, ())

    def name(self, so: SharedObject) -> str:
        return self.inventory.relative(so.path)


@dataclass(frozen=True)
class Finding:
    """One thing the audit found, as one line."""

    check: str
    severity: Severity
    subject: str
    message: str
    paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "paths": list(self.paths),
        }


@dataclass(frozen=True)
class CheckResult:
    """A check's outcome: ``detail`` says what was checked, or why it was skipped."""

    name: str
    status: CheckStatus
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


def check_result(
    name: str, findings: list[Finding], detail: str, skipped: str | None = None
) -> CheckResult:
    if skipped is not None:
        return CheckResult(name, "skip", skipped)
    if any(f.severity == "error" for f in findings):
        return CheckResult(name, "fail", detail)
    if any(f.severity == "warning" for f in findings):
        return CheckResult(name, "warn", detail)
    return CheckResult(name, "pass", detail)


@dataclass(frozen=True)
class AuditReport:
    target: str
    arch: str | None
    #: Where the arch came from: "--arch", "detected", "none".
    arch_source: str
    python: str
    torch: str | None
    checks: tuple[CheckResult, ...]
    findings: tuple[Finding, ...]
    distributions: int
    shared_objects: int
    gpu_libraries: int
    seconds: float
    unreadable: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "ok": self.ok,
            "target": self.target,
            "arch": self.arch,
            "arch_source": self.arch_source,
            "python": self.python,
            "torch": self.torch,
            "counts": {
                "distributions": self.distributions,
                "shared_objects": self.shared_objects,
                "gpu_libraries": self.gpu_libraries,
                "errors": self.count("error"),
                "warnings": self.count("warning"),
                "infos": self.count("info"),
            },
            "checks": [c.to_dict() for c in self.checks],
            "findings": [f.to_dict() for f in self.findings],
            "unreadable": list(self.unreadable),
            "seconds": round(self.seconds, 3),
        }


def basename(path: str) -> str:
    return os.path.basename(path)
