"""Where a recipe's venv lives, what is recorded in it, and the backend's options and results."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from envforge.core import paths
from envforge.core.jsonlimits import load_file
from envforge.errors import (
    CertificationFailed,
)
from envforge.probe.report import ProbeReport
from envforge.probe.runner import ProbeListener
from envforge.publish.certificate import Certificate, VenvBinding
from envforge.recipe.model import Level, Recipe

if TYPE_CHECKING:
    from envforge.backends.base import Admit
    from envforge.probe.spec import GpuChecks
    from envforge.project.model import Project

from envforge.backends.venv.interpreter import Interpreter

#: Seconds one ``uv`` install may run (a ROCm torch wheel is several GB).
INSTALL_TIMEOUT = 3600.0


MARKER_DIR = ".envforge"


BUILD_MARKER = "build.json"


CERT_MARKER = "certified.json"


ENV_SCRIPT = "envforge-env.sh"


ACTIVATE_HOOK = (
    "\n# envforge: the recipe's environment variables\n"
    '[ -f "$VIRTUAL_ENV/bin/{name}" ] && . "$VIRTUAL_ENV/bin/{name}"\n'
)


Say = Callable[[str], None]


BuildStatus = Literal["built", "reinstalled", "recertified", "up-to-date", "uncertified"]


def _quiet(_text: str) -> None:
    pass


def short_hash(recipe: Recipe) -> str:
    return recipe.hash.split(":", 1)[-1][:12]


def venv_location(
    recipe: Recipe, environ: Mapping[str, str] | None = None, project: Project | None = None
) -> Path:
    """``venvs_dir()/<recipe>/<stack tag>-<12 hex of the recipe hash>``; a project's
    environment adds ``-<project name>-<8 hex of its folder>``: one per recipe and project,
    never the recipe's own or another project's."""
    name = f"{recipe.stack_tag}-{short_hash(recipe)}"
    if project is not None:
        name += f"-{project.key()}"
    return paths.venvs_dir(environ) / recipe.name / name


def project_binding(project: Project | None) -> str | None:
    """What a project's certificate is bound to: the project's folder and what decides its
    environment's contents (a requirements change makes the certificate not hold)."""
    if project is None:
        return None
    return f"{project.key()}:{project.requirements_digest()}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> list[Path]:
    return sorted((venv / "lib").glob("python*/site-packages"))


def fingerprint(venv: Path) -> str:
    """sha256 over every installed distribution's name and RECORD (path-independent)."""
    digest = hashlib.sha256()
    for sp in site_packages(venv):
        for dist in sorted(sp.glob("*.dist-info")):
            record = dist / "RECORD"
            try:
                body = hashlib.sha256(record.read_bytes()).hexdigest()
            except OSError:
                body = "-"
            digest.update(f"{dist.name}\0{body}\n".encode())
    return "sha256:" + digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:  # regular files only, bounded, within the decoder's limits
        data = load_file(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_certificate(venv: Path) -> dict[str, Any] | None:
    """The venv's ``certified.json`` as the fields the backend reads (``recipe``,
    ``recipe_hash``, ``project``, ``fingerprint``, ``content``, ``content_format``,
    ``level``, ``report``, and ``checks``, ``incremental``, ``skip_imports`` where
    recorded), from a format 3 certificate (its digest checked) or the shape before it
    (no ``schema``: :func:`~envforge.publish.certificate.legacy_venv`, read as it is);
    None when there is none, or it is neither (an altered certificate included)."""
    data = _read_json(venv / MARKER_DIR / CERT_MARKER)
    if data is None or data.get("schema") is None:
        return data
    try:
        cert = Certificate.from_data(data)
    except CertificationFailed:
        return None
    binding = cert.binding
    if not isinstance(binding, VenvBinding):
        return None
    view: dict[str, Any] = {
        "recipe": cert.recipe_name,
        "recipe_hash": cert.recipe_hash,
        "project": binding.project,
        "fingerprint": binding.fingerprint,
        "content": dict(binding.content),
        "content_format": binding.content_format,
        "level": cert.report.get("level"),
        "report": dict(cert.report),
    }
    if binding.checks is not None:
        view["checks"] = binding.checks
    view.update({k: data[k] for k in ("incremental", "skip_imports") if k in data})
    return view


@dataclass(frozen=True)
class VenvOptions:
    """How to build (none of this is part of the recipe hash)."""

    python: str | None = None
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    #: The index mirror setting's text (:func:`envforge.core.mirror.parse_index_mirror`);
    #: None: ``ENVFORGE_INDEX_MIRROR`` (or the user's file) when the plan is rendered.
    index_mirror: str | None = None
    level: Level | None = None
    step_timeout: float | None = None
    #: ``--require-free GIB``: the probe's memory step fails below GIB free on a GPU.
    require_free: float | None = None
    #: The probe's health and collective steps (None: neither).
    gpu_checks: GpuChecks | None = None
    extra_checks: tuple[Path, ...] = ()
    #: ``--project``: the project's requirements on the stack, the project installed
    #: (editable) and its checks certified; an environment of its own.
    project: Project | None = None
    #: Install from the recipe's lock file when one matches it.
    use_lock: bool = True
    #: Rebuild even when up to date.
    force: bool = False
    #: ``--no-certify``: install only (a login node without the GPU); ``certify`` on a
    #: node with the GPU certifies it later.
    certify: bool = True
    #: Base environment (PATH for the interpreter search, proxies, certificates).
    environ: Mapping[str, str] | None = None
    listener: ProbeListener | None = None
    say: Say = field(default=_quiet)
    #: ``shell`` with trusted keys: the venv must be admitted (:data:`.base.Admit`).
    admit: Admit | None = None


@dataclass(frozen=True)
class VenvBuildResult:
    recipe: str
    path: Path
    status: BuildStatus
    interpreter: Interpreter
    report: ProbeReport | None
    seconds: float
    lock: Path | None = None
    #: Certified incrementally: a project's rebuild whose stack is the certified one
    #: (:mod:`envforge.backends.venv.staging`).
    incremental: bool = False

    @property
    def certified(self) -> bool:
        return self.status == "up-to-date" or (self.report is not None and self.report.passed)

    def facts(self) -> list[tuple[str, str]]:
        return [("backend", "venv"), ("status", self.status)]

    def printed(self) -> str:
        return str(self.path)

    def closing(self) -> str | None:
        if self.status == "up-to-date":
            return f"{self.recipe}: up to date ({self.path})"
        if self.status == "uncertified":
            return (
                f"{self.recipe}: built without certification ({self.path}); `envforge"
                f" certify {self.recipe} --backend venv` on a host with the GPU certifies it"
            )
        if self.incremental:
            return (
                f"{self.recipe}: certified incrementally ({self.status} in"
                f" {self.seconds:.1f}s; torch's files and their certificate kept)"
            )
        return f"{self.recipe}: certified ({self.status} in {self.seconds:.1f}s)"

    def failure(self) -> CertificationFailed | None:
        return None  # a probe that did not pass raised

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "backend": "venv",
            "path": str(self.path),
            "status": self.status,
            "certified": self.certified,
            "python": self.interpreter.version,
            "lock": str(self.lock) if self.lock else None,
            "incremental": self.incremental,
            "seconds": round(self.seconds, 3),
        }


#: The options of a call that gives none.
DEFAULT_OPTIONS = VenvOptions()


def remembered(options: VenvOptions, built: Mapping[str, Any] | None, where: Path) -> VenvOptions:
    """``options`` with the wheelhouse and CA bundle the last build of ``where`` used
    (its ``build.json``) where none is given (flag, project or user settings): a rebuild
    after a requirements edit installs from where the first build did. Said in one line;
    a recorded path that is gone is left out."""
    if not built:
        return options
    wheelhouse, ca_bundle = options.wheelhouse, options.ca_bundle
    index_mirror = options.index_mirror
    said: list[str] = []
    if wheelhouse is None:
        wheelhouse = _recorded(built.get("wheelhouse") or _find_links(built), "dir")
        said += [f"--wheelhouse {wheelhouse}"] if wheelhouse else []
    if ca_bundle is None:
        ca_bundle = _recorded(built.get("ca_bundle"), "file")
        said += [f"--ca-bundle {ca_bundle}"] if ca_bundle else []
    recorded = built.get("index_mirror")
    if index_mirror is None and isinstance(recorded, str) and recorded.strip():
        index_mirror = recorded
        said.append(f"--index-mirror {shlex.quote(recorded)}")
    if not said:
        return options
    options.say(
        f"{' '.join(said)}: what the last build of {where} used (give the flag to change it)"
    )
    return replace(options, wheelhouse=wheelhouse, ca_bundle=ca_bundle, index_mirror=index_mirror)


def _find_links(built: Mapping[str, Any]) -> str | None:
    """The wheelhouse of a ``build.json`` written before it recorded one (its sources)."""
    sources = built.get("sources")
    if isinstance(sources, list) and len(sources) == 2 and sources[0] == "--find-links":
        return str(sources[1])
    return None


def _recorded(value: object, kind: Literal["dir", "file"]) -> Path | None:
    if not isinstance(value, str) or not value:
        return None
    path = Path(value)
    return path if (path.is_dir() if kind == "dir" else path.is_file()) else None
