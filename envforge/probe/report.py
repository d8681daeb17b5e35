"""Probe results: :class:`ProbeReport` with JSON and JUnit XML forms, and host identity.

The JSON form (``to_dict``/``to_json``) is stable: top-level ``status`` and ``steps``
(``{name, status, seconds, detail}``) plus recipe, environment, host, envforge version
and time. The Docker backend binds it to an image's layers to make a certificate.
"""

from __future__ import annotations

import json
import os
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from envforge.errors import InvalidInput
from envforge.fsutil import write_atomically

Status = Literal["pass", "fail", "hang", "crash", "oom", "no-device", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "hang", "crash", "oom", "no-device", "skip")
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
class GpuInfo:
    name: str
    arch: str | None = None
    vendor: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "vendor": self.vendor}


@dataclass(frozen=True)
class HostInfo:
    kernel: str
    machine: str
    gpus: tuple[GpuInfo, ...] = ()
    driver: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "machine": self.machine,
            "gpus": [g.to_dict() for g in self.gpus],
            "driver": self.driver,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostInfo:
        return cls(
            kernel=str(data.get("kernel", "")),
            machine=str(data.get("machine", "")),
            gpus=tuple(
                GpuInfo(name=str(g["name"]), arch=g.get("arch"), vendor=g.get("vendor"))
                for g in data.get("gpus", [])
            ),
            driver=data.get("driver"),
        )


@dataclass(frozen=True)
class ProbeReport:
    steps: tuple[StepResult, ...]
    level: str
    #: What was probed: interpreter path, image id (the target's description).
    target: str
    host: HostInfo
    envforge_version: str
    created: str  # UTC, ISO 8601
    seconds: float = 0.0
    recipe_name: str | None = None
    recipe_hash: str | None = None
    #: The worker's environment snapshot (versions, compiled archs, env vars).
    snapshot: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Literal["pass", "fail"]:
        ok = bool(self.steps) and all(s.status == "pass" for s in self.steps)
        return "pass" if ok else "fail"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def first_problem(self) -> StepResult | None:
        """The first step that neither passed nor was skipped (the cause of a failure)."""
        for s in self.steps:
            if s.status not in ("pass", "skip"):
                return s
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "status": self.status,
            "steps": [s.to_dict() for s in self.steps],
            "level": self.level,
            "recipe": {"name": self.recipe_name, "hash": self.recipe_hash},
            "environment": {"target": self.target, "snapshot": dict(self.snapshot)},
            "host": self.host.to_dict(),
            "envforge_version": self.envforge_version,
            "created": self.created,
            "seconds": round(self.seconds, 3),
        }

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
                host=HostInfo.from_dict(data.get("host") or {}),
                envforge_version=str(data["envforge_version"]),
                created=str(data["created"]),
                seconds=float(data.get("seconds", 0.0)),
                recipe_name=recipe.get("name"),
                recipe_hash=recipe.get("hash"),
                snapshot=dict(env.get("snapshot") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                f"not a probe report: {exc}", hint="pass a probe.json written by envforge"
            ) from None

    @classmethod
    def from_json(cls, text: str) -> ProbeReport:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"not a probe report: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInput("not a probe report: expected a JSON object")
        return cls.from_dict(data)

    def to_junit(self) -> str:
        """JUnit XML: one testsuite, one testcase per step; every text through :func:`printable`."""
        counts = {k: sum(1 for s in self.steps if s.status in k) for k in
                  (_JUNIT_FAILURE, _JUNIT_ERROR, ("skip",))}
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
        ):
            ET.SubElement(props, "property", {"name": key, "value": printable(value)})
        classname = printable(f"envforge.probe.{self.recipe_name or 'installed'}")
        for step in self.steps:
            detail = printable(step.detail)
            case = ET.SubElement(
                suite,
                "testcase",
                {"classname": classname, "name": printable(step.name),
                 "time": f"{step.seconds:.3f}"},
            )
            if step.status in _JUNIT_FAILURE:
                el = ET.SubElement(case, "failure", {"type": step.status, "message": detail})
                el.text = detail
            elif step.status in _JUNIT_ERROR:
                el = ET.SubElement(case, "error", {"type": step.status, "message": detail})
                el.text = detail
            elif step.status == "skip":
                ET.SubElement(case, "skipped", {"message": detail})
        ET.indent(suites)
        return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"

    def write(self, folder: Path) -> tuple[Path, Path]:
        """Write ``probe.json`` and ``probe.junit.xml`` into ``folder``, each atomically."""
        folder.mkdir(parents=True, exist_ok=True)
        json_path = folder / JSON_NAME
        junit_path = folder / JUNIT_NAME
        write_atomically(json_path, self.to_json() + "\n")
        write_atomically(junit_path, self.to_junit())
        return json_path, junit_path


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- host


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def gfx_from_target_version(value: int) -> str | None:
    """KFD's ``gfx_target_version`` (``100100``, ``90010``) → ``gfx1010``, ``gfx90a``."""
    if value <= 0:
        return None
    major, minor, stepping = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor}{stepping:x}"


def _amd_archs(root: Path) -> list[str]:
    archs: list[str] = []
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    for props in sorted(nodes.glob("*/properties")):
        text = _read(props) or ""
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit():
                arch = gfx_from_target_version(int(value))
                if arch:
                    archs.append(arch)
    return archs


def _drm_gpus(root: Path) -> list[GpuInfo]:
    gpus: list[GpuInfo] = []
    for card in sorted((root / "sys/class/drm").glob("card[0-9]*")):
        if "-" in card.name:  # connectors such as card0-DP-1
            continue
        dev = card / "device"
        vendor_id = _read(dev / "vendor")
        if vendor_id not in ("0x1002", "0x10de"):
            continue
        vendor = "amd" if vendor_id == "0x1002" else "nvidia"
        name = _read(dev / "product_name") or f"{vendor.upper()} GPU {_read(dev / 'device') or ''}"
        gpus.append(GpuInfo(name=name.strip(), vendor=vendor))
    return gpus


def _nvidia(root: Path) -> tuple[list[GpuInfo], str | None]:
    gpus: list[GpuInfo] = []
    for info in sorted((root / "proc/driver/nvidia/gpus").glob("*/information")):
        for line in (_read(info) or "").splitlines():
            if line.startswith("Model:"):
                gpus.append(GpuInfo(name=line.split(":", 1)[1].strip(), vendor="nvidia"))
    version = _read(root / "proc/driver/nvidia/version")
    driver = None
    if version:
        first = version.splitlines()[0]
        words = [w for w in first.split() if w[:1].isdigit() and "." in w]
        driver = f"nvidia {words[0]}" if words else first
    return gpus, driver


def host_info(root: Path = Path("/")) -> HostInfo:
    """Kernel, GPUs and driver of this host, from uname, sysfs and procfs; best effort, cheap."""
    uname = os.uname()
    nv_gpus, nv_driver = _nvidia(root)
    drm = _drm_gpus(root)
    amd = [g for g in drm if g.vendor == "amd"]
    archs = _amd_archs(root)
    gpus: list[GpuInfo] = []
    for i, g in enumerate(amd):
        gpus.append(GpuInfo(name=g.name, arch=archs[i] if i < len(archs) else None, vendor="amd"))
    gpus.extend(nv_gpus or [g for g in drm if g.vendor == "nvidia"])
    driver = nv_driver
    if amd:
        amd_version = _read(root / "sys/module/amdgpu/version")
        kfd = "amdgpu " + (amd_version or f"(in-tree, kernel {uname.release})")
        driver = f"{driver}; {kfd}" if driver else kfd
    return HostInfo(kernel=f"{uname.sysname} {uname.release}", machine=uname.machine,
                    gpus=tuple(gpus), driver=driver)


def summarize(steps: Iterable[StepResult]) -> str:
    """``9 pass, 1 hang, 2 skip`` in status order."""
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.status] = counts.get(s.status, 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in STATUSES if k in counts)
