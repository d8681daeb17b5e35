"""Containers envforge creates (probe, helpers, shells) and the named cache volumes.

Every container carries the role label :data:`~envforge.container.refs.ROLE_LABEL` and
the owner label of :mod:`.leftovers` (what a killed envforge left is swept by the next
one), and is removed in every outcome, with SIGINT held during the removal.
"""

from __future__ import annotations

import io
import secrets
import signal
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import docker.errors
import docker.types
from docker.types import DeviceRequest

from envforge.backends.docker.client import ContainerModel, EngineClient
from envforge.backends.docker.leftovers import (
    OWNER_LABEL,
    owner_labels,
    stale,
    sweep_contexts,
    this_process,
)
from envforge.backends.docker.sdkerrors import TRANSPORT_ERRORS, api_message, first_line
from envforge.container.devices import DeviceFlags
from envforge.container.refs import ROLE_LABEL
from envforge.errors import InvalidInput, Unavailable


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP while cleaning up, so a second Ctrl-C cannot skip a removal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def remove_container(container: ContainerModel) -> None:
    """Kill and remove ``container``; quiet when it is already gone. Never raises."""
    with sigint_deferred():
        for _ in range(3):
            try:
                container.remove(force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code == 409 and "in progress" in str(exc):
                    return  # removal already under way
                time.sleep(0.5)
            except TRANSPORT_ERRORS:
                time.sleep(0.5)


def container_kwargs(
    *,
    env: Mapping[str, str],
    flags: DeviceFlags,
    network: bool = False,
    role: str = "probe",
) -> dict[str, Any]:
    """Common ``containers.create`` arguments: env, devices, no network, envforge label,
    and no health check (an image's HEALTHCHECK never runs in envforge's containers)."""
    kwargs: dict[str, Any] = {
        "healthcheck": {"test": ["NONE"]},
        "environment": {**dict(env), **dict(flags.env)},
        "labels": {ROLE_LABEL: role, **owner_labels()},
        "detach": True,
        "stdin_open": False,
        "tty": False,
    }
    if not network:
        kwargs["network_mode"] = "none"
    kwargs.update(sdk_kwargs(flags))
    return kwargs


def sdk_kwargs(flags: DeviceFlags) -> dict[str, Any]:
    """``flags`` as keyword arguments for ``containers.create`` (the SDK's device requests)."""
    kwargs: dict[str, Any] = {}
    devices = [f"{d}:{d}:rwm" for d in flags.devices]
    if flags.cdi_devices and flags.engine == "podman":
        devices += list(flags.cdi_devices)
    if devices:
        kwargs["devices"] = devices
    if flags.group_add:
        kwargs["group_add"] = list(flags.group_add)
    if flags.security_opt:
        kwargs["security_opt"] = list(flags.security_opt)
    if flags.ipc_mode:
        kwargs["ipc_mode"] = flags.ipc_mode
    if flags.shm_size:
        kwargs["shm_size"] = flags.shm_size
    requests: list[Any] = []
    if flags.gpu_request or (flags.cdi_devices and flags.engine != "podman"):
        if flags.gpu_request:
            requests.append(_device_request(DeviceRequest, flags.device_ids))
        if flags.cdi_devices and flags.engine != "podman":
            requests.append(DeviceRequest(driver="cdi", device_ids=list(flags.cdi_devices)))
    if requests:
        kwargs["device_requests"] = requests
    return kwargs


def _device_request(factory: type[DeviceRequest], device_ids: tuple[str, ...]) -> DeviceRequest:
    """All GPUs (count -1), or those of ``device_ids`` (the engine refuses both at once)."""
    if device_ids:
        return factory(device_ids=list(device_ids), capabilities=[["gpu"]])
    return factory(count=-1, capabilities=[["gpu"]])


def create_container(
    client: EngineClient, image: str, command: Sequence[str], **kwargs: Any
) -> ContainerModel:
    try:
        return client.containers.create(image, list(command), **kwargs)
    except docker.errors.ImageNotFound:
        raise InvalidInput(f"image {image} not found on this engine") from None
    except docker.errors.APIError as exc:
        raise Unavailable(f"cannot create a container from {image}: {api_message(exc)}") from None


def put_file(
    container: ContainerModel, directory: str, name: str, data: bytes, mode: int = 0o644
) -> None:
    """Copy one file into a (created, not yet started) container."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    if not container.put_archive(directory, buf.getvalue()):
        raise Unavailable(f"cannot copy {name} into container {container.short_id}")


def run_capture(
    client: EngineClient,
    image: str,
    command: Sequence[str],
    *,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    mounts: Sequence[docker.types.Mount] = (),
) -> tuple[int, str]:
    """Run ``command`` in a throwaway container (no network); (exit code, output). Removed after."""
    kwargs = container_kwargs(env=env or {}, flags=DeviceFlags(), role="helper")
    if user is not None:
        kwargs["user"] = user
    if mounts:  # Mount objects, never "name:/path:rw" strings
        kwargs["mounts"] = list(mounts)
    container = create_container(client, image, command, **kwargs)
    try:
        container.start()
        try:
            code = wait_stopped(container, timeout)
        except TRANSPORT_ERRORS as exc:  # a dropped connection
            raise Unavailable(f"{' '.join(command)[:60]} did not finish in {timeout:g}s") from exc
        if code is None:
            raise Unavailable(f"{' '.join(command)[:60]} did not finish in {timeout:g}s")
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return code, output
    finally:
        remove_container(container)


#: Container states after its process ended (Podman's Docker API says "stopped" where
#: Docker says "exited").
STOPPED_STATES = ("exited", "stopped", "dead")


def wait_stopped(container: ContainerModel, timeout: float, poll: float = 0.1) -> int | None:
    """Poll ``inspect`` until the container's process has ended; its exit code, or None
    after ``timeout`` seconds.

    Not the API's wait: rootless Podman 4.3 answers it 20 s after a quick command ended
    (measured: ``inspect`` says "stopped" at once, ``wait`` returns 20.0 s later).
    """
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        state = container.attrs.get("State") or {}
        if str(state.get("Status", "")).lower() in STOPPED_STATES:
            code = state.get("ExitCode")
            return int(code) if isinstance(code, int) else -1
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll)


def ensure_cache_volume(
    client: EngineClient, name: str, image: str, subdirs: Sequence[str]
) -> None:
    """Create the named volume ``name`` once, with world-writable ``subdirs`` in it.

    A fresh named volume belongs to root; the shell runs as the calling user, so the
    first use prepares it in a short root helper container (no network).
    """
    try:
        client.volumes.get(name)
        return
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        raise Unavailable(f"cannot inspect volume {name}: {api_message(exc)}") from None
    client.volumes.create(name=name, labels={ROLE_LABEL: "cache"})
    script = " && ".join(
        ["chmod 1777 /v"] + [f"mkdir -p /v/{d} && chmod 1777 /v/{d}" for d in subdirs]
    )
    code, output = run_capture(
        client,
        image,
        ["/bin/sh", "-c", script],
        user="0:0",
        mounts=[docker.types.Mount("/v", name, type="volume")],
    )
    if code != 0:
        client.volumes.get(name).remove(force=True)
        raise Unavailable(f"cannot prepare cache volume {name}: {first_line(output)}")


def remove_by_name(client: EngineClient, name: str) -> None:
    """Remove the container called ``name`` if it exists (a create whose reply was lost)."""
    with sigint_deferred():
        try:
            container = client.containers.get(name)
        except docker.errors.NotFound:
            return
        except TRANSPORT_ERRORS:
            return
        remove_container(container)


def unique_name(role: str) -> str:
    return f"envforge-{role}-{secrets.token_hex(6)}"


def sweep_containers(client: EngineClient) -> list[str]:
    """Remove the containers whose envforge is gone; their names. Best effort: an engine
    that does not answer the listing is left alone."""
    here = this_process()
    if here is None:
        return []
    try:
        listed = client.api.containers(all=True, filters={"label": OWNER_LABEL})
    except TRANSPORT_ERRORS:  # the SDK's errors included
        return []
    removed: list[str] = []
    for item in listed:
        labels = item.get("Labels") or {}
        names = item.get("Names") or []
        if not isinstance(labels, dict) or not names or not isinstance(names[0], str):
            continue
        if stale(str(labels.get(OWNER_LABEL, "")), here):
            name = names[0].lstrip("/")
            remove_by_name(client, name)
            removed.append(name)
    return removed


def sweep(client: EngineClient) -> None:
    """What killed envforges left: their containers on this engine, their build contexts."""
    sweep_containers(client)
    sweep_contexts()
