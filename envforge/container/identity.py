"""Which engine answers the Docker API: Docker or Podman, its version, rootless, CDI (pure).

Podman's Docker-compatible API (``podman system service``) answers ``/version`` with a
component named ``Podman Engine``; Docker's with ``Engine`` (and a platform name such as
``Docker Engine - Community``). ``/info`` lists ``name=rootless`` among the security
options of a rootless Docker (a rootless Podman says so in ``/libpod/info``), and
Docker 27+ lists ``CDISpecDirs`` when its CDI feature is on. :func:`identify` reads those
recorded responses; the engine module asks the engine for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

EngineKind = Literal["docker", "podman"]

#: Docker accepts CDI device requests from 25 on (with the ``cdi`` feature enabled).
DOCKER_CDI_SINCE = (25,)
#: Podman's own CLI resolves CDI names given to ``--device`` since 4.1, but its
#: Docker-compatible API did not in 4.x: measured on Debian 12's 4.3.1, a container created
#: with the device ``nvidia.com/gpu=all`` fails with "stat nvidia.com/gpu=all: no such file
#: or directory", and the docker CLI's CDI device request is dropped silently (reported the
#: same for 4.9: containers/podman#19338, #28436). envforge talks to that API, so it
#: requests CDI names only from Podman 5 on, where that is untested (no Podman 5 on the CI
#: machine) and doctor says so.
PODMAN_CDI_SINCE = (5,)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"25.0.3"`` -> (25, 0, 3); ``"20.10.24+dfsg1"`` -> (20, 10, 24); junk -> ()."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


@dataclass(frozen=True)
class EngineIdentity:
    """What envforge needs to know about the engine to pick device flags."""

    kind: EngineKind = "docker"
    version: str = ""
    rootless: bool = False
    #: The engine can inject CDI devices by name.
    cdi: bool = False
    #: Why (not) CDI, for doctor.
    cdi_reason: str = "engine not asked"

    @property
    def label(self) -> str:
        mode = " (rootless)" if self.rootless else ""
        name = "Podman" if self.kind == "podman" else "Docker"
        return f"{name} {self.version or '(version unknown)'}{mode}"


def engine_kind(version: Mapping[str, Any]) -> EngineKind:
    """Docker or Podman, from a ``/version`` response."""
    names: list[str] = []
    for comp in version.get("Components") or []:
        if isinstance(comp, Mapping):
            names.append(str(comp.get("Name", "")))
    platform = version.get("Platform")
    if isinstance(platform, Mapping):
        names.append(str(platform.get("Name", "")))
    if any("podman" in n.lower() for n in names):
        return "podman"
    return "docker"


def _engine_version(version: Mapping[str, Any], kind: EngineKind) -> str:
    wanted = "podman engine" if kind == "podman" else "engine"
    for comp in version.get("Components") or []:
        if isinstance(comp, Mapping) and str(comp.get("Name", "")).lower() == wanted:
            return str(comp.get("Version", ""))
    return str(version.get("Version", ""))


def podman_rootless(libpod_info: Mapping[str, Any]) -> bool:
    """``host.security.rootless`` of Podman's ``/libpod/info``."""
    host = libpod_info.get("host")
    security = host.get("security") if isinstance(host, Mapping) else None
    return bool(security.get("rootless")) if isinstance(security, Mapping) else False


def identify(
    version: Mapping[str, Any],
    info: Mapping[str, Any] | None = None,
    libpod_info: Mapping[str, Any] | None = None,
) -> EngineIdentity:
    """The engine behind recorded ``/version``, ``/info`` (and, for Podman, ``/libpod/info``:
    Podman 4.3's Docker ``/info`` does not say rootless) responses."""
    info = info or {}
    kind = engine_kind(version)
    text = _engine_version(version, kind)
    have = version_tuple(text)
    options = [str(o) for o in info.get("SecurityOptions") or []]
    rootless = any(o == "name=rootless" or o.startswith("name=rootless,") for o in options)
    if kind == "podman" and libpod_info is not None:
        rootless = rootless or podman_rootless(libpod_info)
    if kind == "podman":
        cdi = have >= PODMAN_CDI_SINCE
        reason = (
            f"Podman {text}: CDI names requested through its Docker API (untested on Podman 5; "
            "Podman 4 dropped them)"
            if cdi
            else f"Podman {text}'s Docker-compatible API does not resolve CDI device names "
            "(Podman 5 does)"
        )
    else:
        spec_dirs = info.get("CDISpecDirs")
        if have < DOCKER_CDI_SINCE:
            cdi, reason = False, f"Docker {text} predates CDI device requests (25)"
        elif spec_dirs:
            cdi, reason = True, f"Docker {text} has CDI enabled (spec dirs {', '.join(spec_dirs)})"
        else:
            cdi, reason = (
                False,
                (
                    f"Docker {text} reports no CDI spec dirs: CDI is not enabled "
                    '("features": {"cdi": true} in daemon.json)'
                ),
            )
    return EngineIdentity(kind=kind, version=text, rootless=rootless, cdi=cdi, cdi_reason=reason)
