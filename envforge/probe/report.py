"""Probe results: :class:`ProbeReport` with JSON and JUnit XML forms, and host identity.

The JSON form (``to_dict``/``to_json``) is stable: top-level ``status`` and ``steps``
(``{name, status, seconds, detail}``) plus recipe, environment, host, envforge version
and time. The Docker backend binds it to an image's layers to make a certificate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from envforge.core.fsutil import write_files
from envforge.core.jsonlimits import BadJSON, loads
from envforge.core.sharing import sharing
from envforge.errors import InvalidInput
from envforge.host.detect import detect, no_tools
from envforge.host.grant import fleet_facts, node_facts

Status = Literal["pass", "warn", "fail", "hang", "crash", "oom", "no-device", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "hang", "crash", "oom", "no-device", "skip")
#: Statuses that pass: ``warn`` is a pass worth a look (the GPU's memory held by another
#: process), recorded in every output and still certified.
PASSING: tuple[Status, ...] = ("pass", "warn")
#: JUnit: a wrong answer is a <failure>; the worker dying or hanging is an <error>.
_JUNIT_FAILURE = ("fail", "oom", "no-device")
_JUNIT_ERROR = ("hang", "crash")
SCHEMA = "envforge.probe/1"
JSON_NAME = "probe.json"
JUNIT_NAME = "probe.junit.xml"


def printable(text: str) -> str:
    """``text`` with control characters and lone surrogates written as escapes (``\\x1b``).

    What a worker reports (a check's error message, a runtime's stderr) may hold ESC,
    NUL or surrogates from undecodable bytes. Escaped, it prints on any terminal, encodes
    as UTF-8 and is valid XML 1.0. Idempotent: the output has nothing left to escape.
    """
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if ch == " " or ch.isprintable():
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cs") or code in (0xFFFE, 0xFFFF):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:  # other spaces and format characters: valid, printable enough
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True)
class StepResult:
    name: str
    status: Status
    seconds: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepResult:
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown step status {status!r}")
        return cls(
            name=str(data["name"]),
            status=status,
            seconds=float(data["seconds"]),
            detail=str(data.get("detail", "")),
        )


@dataclass(frozen=True)
class ReportGpu:
    """A GPU as a probe report records it (a projection of
    :class:`envforge.host.detect.GpuInfo`)."""

    name: str
    arch: str | None = None
    vendor: str | None = None
    #: ``vendor:device`` in hex (``1002:73df``), when the host says.
    pci_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "arch": self.arch, "vendor": self.vendor}
        if self.pci_id:
            data["pci_id"] = self.pci_id
        return data


@dataclass(frozen=True)
class ReportHost:
    """The host as a probe report records it (JSON ``host``); made by :func:`host_info`."""

    kernel: str
    machine: str
    gpus: tuple[ReportGpu, ...] = ()
    driver: str | None = None
    #: An anonymous host identity (:func:`host_id`: a one-way hash of the machine ID, so
    #: that evidence can count hosts without naming them); None when unknown.
    id: str | None = None
    #: Inside a Slurm job or a pod (:func:`envforge.host.grant.node_facts`): the node's
    #: name, and the GPU grant variables as the run saw them (``SLURM_JOB_GPUS``,
    #: ``ROCR_VISIBLE_DEVICES``, ``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``).
    #: Both absent elsewhere (and in reports before them). The node's name stays in the
    #: report the run writes and in the site's evidence store; what leaves the site (a
    #: certificate, a signed report, an export) drops it unless the site opted in
    #: (:meth:`without_node`, :mod:`envforge.core.sharing`).
    node: str | None = None
    granted: tuple[tuple[str, str], ...] = ()
    #: The fleet task the run was for (:func:`envforge.host.grant.fleet_facts`: plan id,
    #: task, the plan's nonce); kept in certificates, checked by ``fleet collect``.
    fleet: tuple[tuple[str, str], ...] = ()
    #: The site's name (setting ``site``, :mod:`envforge.core.sharing`); None when unset.
    site: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kernel": self.kernel,
            "machine": self.machine,
            "gpus": [g.to_dict() for g in self.gpus],
            "driver": self.driver,
        }
        if self.id:
            data["id"] = self.id
        if self.node:
            data["node"] = self.node
        if self.granted:
            data["granted"] = dict(self.granted)
        if self.fleet:
            data["fleet"] = dict(self.fleet)
        if self.site:
            data["site"] = self.site
        return data

    def without_node(self) -> ReportHost:
        return dataclasses.replace(self, node=None) if self.node else self

    @property
    def grant_text(self) -> str:
        """``SLURM_JOB_GPUS=1, CUDA_VISIBLE_DEVICES=0`` ("" when none was seen)."""
        return ", ".join(f"{k}={v}" for k, v in self.granted)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportHost:
        return cls(
            kernel=str(data.get("kernel", "")),
            machine=str(data.get("machine", "")),
            gpus=tuple(
                ReportGpu(
                    name=str(g["name"]),
                    arch=g.get("arch"),
                    vendor=g.get("vendor"),
                    pci_id=g.get("pci_id") or None,
                )
                for g in data.get("gpus", [])
            ),
            driver=data.get("driver"),
            id=str(data["id"]) if data.get("id") else None,
            node=str(data["node"]) if data.get("node") else None,
            granted=_granted(data.get("granted")),
            fleet=_granted(data.get("fleet"), "host.fleet"),
            site=str(data["site"]) if data.get("site") else None,
        )


def without_uuids(health: Mapping[str, Any]) -> Mapping[str, Any]:
    """A report's ``health`` section without the GPUs' serial UUIDs (``health`` itself
    when it has none): they name one board as a host name names one machine."""
    gpus = health.get("gpus")
    if not isinstance(gpus, list) or not any(isinstance(g, Mapping) and "uuid" in g for g in gpus):
        return health
    kept = [
        {k: v for k, v in g.items() if k != "uuid"} if isinstance(g, Mapping) else g for g in gpus
    ]
    return {**health, "gpus": kept}


def _health(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError("key 'health' is not a JSON object")
    return dict(value)


def _granted(value: Any, key: str = "host.granted") -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise TypeError(f"key {key!r} is not a JSON object")
    return tuple((str(k), str(v)) for k, v in value.items())


@dataclass(frozen=True)
class ProbeReport:
    steps: tuple[StepResult, ...]
    level: str
    #: What was probed: interpreter path, image id (the target's description).
    target: str
    host: ReportHost
    envforge_version: str
    created: str  # UTC, ISO 8601
    seconds: float = 0.0
    recipe_name: str | None = None
    recipe_hash: str | None = None
    #: The worker's environment snapshot (versions, compiled archs, env vars).
    snapshot: Mapping[str, Any] = field(default_factory=dict)
    #: GPU health facts of the ``health`` step (envforge/probe/health.py): ``gpus`` and
    #: ``tools``; empty when the probe was not asked for them.
    health: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Literal["pass", "fail"]:
        ok = bool(self.steps) and all(s.status in PASSING for s in self.steps)
        return "pass" if ok else "fail"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def warnings(self) -> tuple[StepResult, ...]:
        """The steps that passed with a warning (``warn``)."""
        return tuple(s for s in self.steps if s.status == "warn")

    @property
    def first_problem(self) -> StepResult | None:
        """The first step that neither passed nor was skipped (the cause of a failure);
        else the first skipped one (a skip alone fails a report)."""
        problems = [s for s in self.steps if s.status not in PASSING]
        return next((s for s in problems if s.status != "skip"), next(iter(problems), None))

    def to_dict(self) -> dict[str, Any]:
        warned = {"warnings": [s.name for s in self.warnings]} if self.warnings else {}
        return {
            "schema": SCHEMA,
            "status": self.status,
            **warned,
            "steps": [s.to_dict() for s in self.steps],
            "level": self.level,
            "recipe": {"name": self.recipe_name, "hash": self.recipe_hash},
            "environment": {"target": self.target, "snapshot": dict(self.snapshot)},
            "host": self.host.to_dict(),
            "envforge_version": self.envforge_version,
            "created": self.created,
            "seconds": round(self.seconds, 3),
            **({"health": dict(self.health)} if self.health else {}),
        }

    def without_node(self) -> ProbeReport:
        """This report without the node's name, nor the GPUs' serial UUIDs of its health
        facts (what a certificate carries: it travels with the image)."""
        host = self.host.without_node()
        health = without_uuids(self.health)
        if host is self.host and health is self.health:
            return self
        return dataclasses.replace(self, host=host, health=health)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeReport:
        try:
            recipe = data.get("recipe") or {}
            env = data.get("environment") or {}
            return cls(
                steps=tuple(StepResult.from_dict(s) for s in data["steps"]),
                level=str(data["level"]),
                target=str(env.get("target", "")),
                host=ReportHost.from_dict(data.get("host") or {}),
                envforge_version=str(data["envforge_version"]),
                created=str(data["created"]),
                seconds=float(data.get("seconds", 0.0)),
                recipe_name=recipe.get("name"),
                recipe_hash=recipe.get("hash"),
                snapshot=dict(env.get("snapshot") or {}),
                health=_health(data.get("health")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                f"not a probe report: {exc}", hint="pass a probe.json written by envforge"
            ) from None

    @classmethod
    def from_json(cls, text: str) -> ProbeReport:
        try:
            data = loads(text)
        except BadJSON as exc:
            raise InvalidInput(f"not a probe report: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInput("not a probe report: expected a JSON object")
        return cls.from_dict(data)

    def to_junit(self) -> str:
        """JUnit XML: one testsuite, one testcase per step; every text through :func:`printable`."""
        counts = {
            k: sum(1 for s in self.steps if s.status in k)
            for k in (_JUNIT_FAILURE, _JUNIT_ERROR, ("skip",))
        }
        name = f"envforge probe {self.recipe_name}" if self.recipe_name else "envforge probe"
        name = printable(name)
        suites = ET.Element("testsuites")
        suite = ET.SubElement(
            suites,
            "testsuite",
            {
                "name": name,
                "tests": str(len(self.steps)),
                "failures": str(counts[_JUNIT_FAILURE]),
                "errors": str(counts[_JUNIT_ERROR]),
                "skipped": str(counts[("skip",)]),
                "time": f"{self.seconds:.3f}",
                "timestamp": printable(self.created),
            },
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("level", self.level),
            ("target", self.target),
            ("recipe", self.recipe_name or ""),
            ("recipe_hash", self.recipe_hash or ""),
            ("kernel", self.host.kernel),
            ("gpus", ", ".join(g.name for g in self.host.gpus)),
            ("driver", self.host.driver or ""),
            ("envforge_version", self.envforge_version),
            *((("site", self.host.site),) if self.host.site else ()),
            *((("node", self.host.node),) if self.host.node else ()),
            *((("granted", self.host.grant_text),) if self.host.granted else ()),
            *((("warnings", ", ".join(s.name for s in self.warnings)),) if self.warnings else ()),
        ):
            ET.SubElement(props, "property", {"name": key, "value": printable(value)})
        classname = printable(f"envforge.probe.{self.recipe_name or 'installed'}")
        for step in self.steps:
            detail = printable(step.detail)
            case = ET.SubElement(
                suite,
                "testcase",
                {
                    "classname": classname,
                    "name": printable(step.name),
                    "time": f"{step.seconds:.3f}",
                },
            )
            if step.status in _JUNIT_FAILURE:
                el = ET.SubElement(case, "failure", {"type": step.status, "message": detail})
                el.text = detail
            elif step.status in _JUNIT_ERROR:
                el = ET.SubElement(case, "error", {"type": step.status, "message": detail})
                el.text = detail
            elif step.status == "skip":
                ET.SubElement(case, "skipped", {"message": detail})
            elif step.status == "warn":
                _junit_warning(case, detail)
        ET.indent(suites)
        return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"

    def write(self, folder: Path) -> tuple[Path, Path]:
        """Write ``probe.json`` and ``probe.junit.xml`` into ``folder``: both or neither."""
        json_path = folder / JSON_NAME
        junit_path = folder / JUNIT_NAME
        write_files(
            [(json_path, self.to_json() + "\n", 0o644), (junit_path, self.to_junit(), 0o644)]
        )
        return json_path, junit_path


def _junit_warning(case: ET.Element, detail: str) -> None:
    """A ``warn`` step in JUnit: a passing testcase (no failure, not skipped: it ran and
    passed) carrying a ``warning`` property and the detail in ``<system-out>``, which
    Jenkins, GitLab and the GitHub test-report actions show beside the test."""
    props = ET.SubElement(case, "properties")
    ET.SubElement(props, "property", {"name": "warning", "value": detail})
    out = ET.SubElement(case, "system-out")
    out.text = f"warning: {detail}"


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- host


def host_info(root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> ReportHost:
    """Kernel, GPUs and driver of this host, through :func:`envforge.host.detect.detect` reading
    sysfs and procfs only (no tools, no override variables): best effort, cheap; inside a
    scheduler's job (``environ``, default this process's) the node and the GPUs granted.

    Archs the detector only guessed from a product name are not recorded as facts.
    """
    env = os.environ if environ is None else environ
    node, grant = node_facts(env)
    uname = os.uname()
    found = detect(root, environ={}, tools=no_tools)
    gpus = tuple(
        ReportGpu(
            name=g.product,
            arch=None if g.arch_guessed else g.arch,
            vendor=g.vendor,
            pci_id=g.pci_id,
        )
        for g in found.gpus
    )
    parts: list[str] = []
    nvidia = next((g.driver_version for g in found.gpus if g.vendor == "nvidia"), None)
    if nvidia:
        parts.append(f"nvidia {nvidia}")
    amd = [g for g in found.gpus if g.vendor == "amd"]
    if amd:
        version = amd[0].driver_version
        if version is None or version.startswith("in-kernel"):
            version = f"(in-tree, kernel {uname.release})"
        parts.append(f"amdgpu {version}")
    return ReportHost(
        kernel=f"{uname.sysname} {uname.release}",
        machine=uname.machine,
        gpus=gpus,
        driver="; ".join(parts) or None,
        id=host_id(root),
        node=node,
        granted=grant,
        fleet=fleet_facts(env),
        site=sharing(env).site or None,
    )


#: Where the machine ID is (systemd, then D-Bus).
_MACHINE_ID = ("etc/machine-id", "var/lib/dbus/machine-id")


def host_id(root: Path = Path("/")) -> str | None:
    """``h-`` + 16 hex digits: a salted sha256 of the machine ID (``/etc/machine-id``).

    It tells two reports from the same host apart from two hosts ("certified on 3
    hosts") without naming the host: the machine ID cannot be recovered from it, and it
    is not the host name. None where there is no machine ID (many containers).
    """
    for name in _MACHINE_ID:
        try:
            text = (root / name).read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            continue
        if text:
            digest = hashlib.sha256(b"envforge host id/1\n" + text.encode()).hexdigest()
            return "h-" + digest[:16]
    return None


def summarize(steps: Iterable[StepResult]) -> str:
    """``9 pass, 1 hang, 2 skip`` in status order."""
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.status] = counts.get(s.status, 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in STATUSES if k in counts)
