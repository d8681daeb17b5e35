"""Which engine to talk to, and a client for it (what killed envforges left is swept).

Engine selection follows the docker CLI: ``DOCKER_HOST`` (with ``DOCKER_TLS_VERIFY`` and
``DOCKER_CERT_PATH``) first, then ``DOCKER_CONTEXT``, then the CLI's current context, then
the local socket. ``envforge shell`` runs the ``docker`` CLI itself with the same
environment, so it resolves the same engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
from docker.context import ContextAPI

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.containers import sweep
from envforge.backends.docker.sdkerrors import TRANSPORT_ERRORS, first_line
from envforge.container.identity import EngineIdentity, engine_kind, identify
from envforge.errors import Unavailable

_CONNECT_TIMEOUT = 10
_STREAM_TIMEOUT = 6 * 3600
#: API version for the reachability ping only (every engine since Docker 1.12 speaks it).
_PING_API_VERSION = "1.24"


@dataclass(frozen=True)
class EngineAddress:
    """Which engine to talk to and why (for messages)."""

    base_url: str | None
    source: str
    tls: Any = None


def resolve_engine(environ: Mapping[str, str] | None = None) -> EngineAddress:
    """Pick the engine the way the docker CLI does (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_HOST"):
        return EngineAddress(None, f"DOCKER_HOST={env['DOCKER_HOST']}")
    name = env.get("DOCKER_CONTEXT") or None
    try:
        context = ContextAPI.get_context(name)
    except docker.errors.DockerException as exc:
        raise Unavailable(
            f"docker context {name or '(current)'} cannot be read: {exc}",
            hint="docker context ls; or set DOCKER_HOST",
        ) from None
    if context is None:
        raise Unavailable(
            f"docker context {name!r} does not exist", hint="docker context ls; or set DOCKER_HOST"
        )
    if context.Name == "default":
        return EngineAddress(None, "the default engine socket")
    return EngineAddress(context.Host, f"docker context {context.Name}", context.TLSConfig)


def connect(environ: Mapping[str, str] | None = None) -> EngineClient:
    """A client for the engine the CLI would use; :class:`Unavailable` when none answers."""
    env = dict(os.environ if environ is None else environ)
    address = resolve_engine(env)

    # ssh:// engines go through the system's ssh client (as the docker CLI does), so
    # they work without paramiko and with the user's ssh config and agent.
    ssh = (env.get("DOCKER_HOST") or address.base_url or "").startswith("ssh://")

    def make(version: str | None) -> docker.DockerClient:
        if address.base_url is None:
            return docker.DockerClient.from_env(
                environment=env, timeout=_CONNECT_TIMEOUT, version=version, use_ssh_client=ssh
            )
        return docker.DockerClient(
            base_url=address.base_url,
            tls=address.tls,
            timeout=_CONNECT_TIMEOUT,
            version=version,
            use_ssh_client=ssh,
        )

    host = env.get("DOCKER_HOST") or address.base_url or "unix:///var/run/docker.sock"
    if host.startswith("unix://") and not Path(host[len("unix://") :]).exists():
        raise Unavailable(
            f"no Docker engine answers ({address.source}): {host[len('unix://') :]} does not exist",
            hint="start the engine (dockerd), or point DOCKER_HOST / docker context at one",
        )
    try:
        # First a ping with a pinned API version (the constructor then contacts nothing,
        # so a dead engine leaks no socket), then the client that negotiates the version.
        probe = make(_PING_API_VERSION)
        try:
            probe.ping()
        finally:
            probe.close()
        client = make(None)
    except (docker.errors.DockerException, OSError) as exc:
        detail = first_line(str(exc))
        hint = "start the engine (dockerd), or point DOCKER_HOST / docker context at one"
        if "paramiko" in detail:
            hint = "pip install paramiko (the docker SDK needs it for ssh:// engines)"
        raise Unavailable(
            f"no Docker engine answers ({address.source}): {detail}", hint=hint
        ) from None
    # Builds and pushes stream for minutes: a long read timeout after the quick ping.
    client.api.timeout = _STREAM_TIMEOUT
    # DockerClient is the EngineClient these Protocols describe (its stubs' signatures are
    # wider than the slice envforge declares, so mypy cannot match them structurally).
    engine = cast(EngineClient, client)
    sweep(engine)  # what killed envforges left: their containers, their build contexts
    return engine


def identify_engine(client: EngineClient) -> EngineIdentity:
    """Docker or Podman, its version, rootless, CDI (see :mod:`.identity`).

    An engine that cannot say (a dropped connection) is taken for a Docker without CDI:
    the raw device path, which every engine takes.
    """
    try:
        version = client.api.version()
    except TRANSPORT_ERRORS:
        return EngineIdentity(cdi_reason="the engine did not answer /version")
    try:
        info = client.api.info()
    except TRANSPORT_ERRORS:
        info = {}
    libpod: dict[str, Any] | None = None
    if engine_kind(version) == "podman":
        libpod = podman_info(client)
    return identify(version, info, libpod)


_LIBPOD_ERRORS: tuple[type[Exception], ...] = (*TRANSPORT_ERRORS, ValueError, AttributeError)


def podman_info(client: EngineClient) -> dict[str, Any] | None:
    """Podman's own ``/libpod/info`` (served on the same socket); None when it fails."""
    api = cast(docker.APIClient, client.api)
    try:
        # No SDK call for it: APIClient is a requests session on the engine's socket.
        response = api.get(f"{api.base_url}/v{api.api_version}/libpod/info", timeout=10)
        response.raise_for_status()
        data = response.json()
    except _LIBPOD_ERRORS:
        return None
    return data if isinstance(data, dict) else None
