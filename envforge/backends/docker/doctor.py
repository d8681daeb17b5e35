"""What ``envforge doctor`` finds for the Docker backend: does an engine answer, and how
do the recipe's GPUs reach its containers on it (CDI names, raw device nodes or Docker's
GPU request)?

Asked through the backend protocol (:func:`envforge.backends.docker.findings`); the
engine is asked only here, and tests stand in for it (:class:`~envforge.backends.base.HostCheck`
``stand_ins``: ``ping`` and ``engine``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from envforge.backends.base import HostCheck
from envforge.container.cdi import scan as scan_cdi
from envforge.container.devices import device_flags
from envforge.container.identity import EngineIdentity
from envforge.core.lazy import LazyModule
from envforge.core.paths import state_dir
from envforge.errors import EnvforgeError
from envforge.host.doctor import GIB, Finding, Severity
from envforge.recipe.model import Recipe

#: Imported when the engine is asked (it loads the ``docker`` SDK).
_engine = LazyModule("envforge.backends.docker.engine")

#: Rough space an image build takes, by vendor: the ROCm base images are large.
SPACE_ESTIMATE: dict[str, int] = {"amd": 30 * GIB, "nvidia": 18 * GIB, "none": 3 * GIB}

#: Where the engine keeps images on a usual host.
DOCKER_ROOT = Path("/var/lib/docker")

#: Pings the Docker engine: returns None when it answers, else why it did not.
DockerPing = Callable[[], "str | None"]

#: Asks the engine what it is (Docker or Podman, CDI, rootless); None when none answers.
EngineProbe = Callable[[], "EngineIdentity | None"]


def docker_ping() -> str | None:
    """Ask the engine the docker CLI would use (DOCKER_HOST, context) for a ping."""
    try:
        _engine.connect().close()
    except EnvforgeError as exc:
        return exc.message
    except Exception as exc:  # any failure means "not reachable"; say why
        text = " ".join(str(exc).split())
        return text[:200] or type(exc).__name__
    return None


def engine_identity() -> EngineIdentity | None:
    """The engine the docker CLI would use, identified; None when none answers."""
    try:
        client = _engine.connect()
    except Exception:  # check_docker says why the engine does not answer
        return None
    try:
        identity: EngineIdentity = _engine.identify_engine(client)
        return identity
    finally:
        client.close()


def check_docker(ping: DockerPing, required: bool) -> list[Finding]:
    """``required``: the Docker backend was asked for (an unreachable engine blocks)."""
    problem = ping()
    if problem is None:
        return [Finding("docker", "ok", "Docker engine answers")]
    severity: Severity = "block" if required else "warn"
    return [
        Finding(
            "docker",
            severity,
            f"Docker engine not reachable: {problem}",
            "start the engine (`sudo systemctl start docker`) or set DOCKER_HOST;"
            " or use `--backend venv`",
        )
    ]


def check_device_path(
    recipe: Recipe | None, root: Path, engine: EngineIdentity | None, required: bool
) -> list[Finding]:
    """How the recipe's GPUs reach its containers on this engine: CDI names, raw device
    nodes or Docker's GPU request, and why (CDI specs under ``etc/cdi`` and ``var/run/cdi``
    of ``root``; the engine's CDI support)."""
    if recipe is None or recipe.gpu.vendor not in ("amd", "nvidia"):
        return []
    inventory = scan_cdi((root / "etc" / "cdi", root / "var" / "run" / "cdi"))
    findings = [Finding("cdi", "warn", note, "fix or remove that spec") for note in inventory.notes]
    eng = engine or EngineIdentity(cdi_reason="no engine answered")
    flags = device_flags(
        recipe.gpu.vendor,
        dev_root=root / "dev",
        proc_root=root / "proc",
        engine=eng,
        cdi=inventory,
    )
    who = f"{eng.label}:" if engine is not None else "no engine answered;"
    if flags.path == "none":
        if flags.reason:  # devices present, but this engine cannot pass them
            findings.append(
                Finding(
                    "device-path",
                    "block" if required else "warn",
                    f"{who} {flags.reason}",
                    "generate a CDI spec for the GPUs, or use Docker, or `--backend venv`",
                )
            )
        return findings  # no devices: check_device_nodes says so
    ipc = "host IPC" if flags.ipc_mode == "host" else f"/dev/shm {flags.shm_size}"
    findings.append(
        Finding("device-path", "ok", f"{who} GPUs reach containers by {flags.reason}; {ipc}")
    )
    return findings


def host_findings(recipe: Recipe | None, check: HostCheck) -> list[Finding]:
    """The engine check, then (for a GPU recipe) the device path. A stand-in ``ping``
    without an ``engine`` asks no engine (tests never touch this machine's)."""
    ping = check.stand_ins.get("ping", docker_ping)
    default_engine = engine_identity if "ping" not in check.stand_ins else (lambda: None)
    engine = check.stand_ins.get("engine", default_engine)
    findings = check_docker(ping, check.required)
    if recipe is not None and recipe.gpu.vendor != "none":
        findings += check_device_path(recipe, check.root, engine(), check.required)
    return findings


def disk_need(vendor: str) -> tuple[int, Path]:
    """Bytes an image build for ``vendor`` takes, and the folder they go to."""
    return SPACE_ESTIMATE[vendor], DOCKER_ROOT if DOCKER_ROOT.is_dir() else state_dir()
