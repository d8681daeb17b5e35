"""The Docker backend: engine connection, device flags, builds, labels, tags, pushes.

This is the only module that imports the ``docker`` SDK. Everything else in envforge
talks to the engine through the functions and classes here, which turn SDK errors into
:mod:`envforge.errors` (no engine: :class:`Unavailable`, exit 4; a failed build:
:class:`BuildFailed`, exit 3).

Engine selection follows the docker CLI: ``DOCKER_HOST`` (with ``DOCKER_TLS_VERIFY`` and
``DOCKER_CERT_PATH``) first, then ``DOCKER_CONTEXT``, then the CLI's current context, then
the local socket. ``envforge shell`` runs the ``docker`` CLI itself with the same
environment, so it resolves the same engine.
"""

from __future__ import annotations

import collections
import io
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.context import ContextAPI
from docker.models.containers import Container
from docker.models.images import Image
from docker.types import DeviceRequest

from envforge.errors import BuildFailed, InvalidInput, PublishRefused, Unavailable
from envforge.probe.runner import LineQueue, container_exit_status

#: Label every container envforge creates carries (probe, shell, helpers), so that
#: leftovers can be found: ``docker ps -a --filter label=io.envforge.role``.
ROLE_LABEL = "io.envforge.role"
#: Where a certified image carries its certificate (compact JSON).
CERTIFICATE_LABEL = "io.envforge.certificate"
#: Repository prefix of certified tags: ``envforge/<recipe>:<stack tag>``.
CERTIFIED_REPOSITORY_PREFIX = "envforge"

_CONNECT_TIMEOUT = 10
_STREAM_TIMEOUT = 6 * 3600
#: API version for the reachability ping only (every engine since Docker 1.12 speaks it).
_PING_API_VERSION = "1.24"

#: The SDK's client type, for annotations in modules that must not import the SDK.
Client = docker.DockerClient


# --------------------------------------------------------------------------- engine


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


def connect(environ: Mapping[str, str] | None = None) -> docker.DockerClient:
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
            f"no Docker engine answers ({address.source}): {host[len('unix://'):]} does not exist",
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
        detail = _first_line(str(exc))
        hint = "start the engine (dockerd), or point DOCKER_HOST / docker context at one"
        if "paramiko" in detail:
            hint = "pip install paramiko (the docker SDK needs it for ssh:// engines)"
        raise Unavailable(
            f"no Docker engine answers ({address.source}): {detail}", hint=hint
        ) from None
    # Builds and pushes stream for minutes: a long read timeout after the quick ping.
    client.api.timeout = _STREAM_TIMEOUT
    return client


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[0] if lines else text.strip()
    return line[:300]


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class DeviceFlags:
    """How a container sees this host's GPUs (the same for probe and shell)."""

    vendor: str = "none"
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc_mode: str | None = None
    gpu_request: bool = False
    gpu_count: int = 0

    def sdk_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``containers.create``."""
        kwargs: dict[str, Any] = {}
        if self.devices:
            kwargs["devices"] = [f"{d}:{d}:rwm" for d in self.devices]
        if self.group_add:
            kwargs["group_add"] = list(self.group_add)
        if self.security_opt:
            kwargs["security_opt"] = list(self.security_opt)
        if self.ipc_mode:
            kwargs["ipc_mode"] = self.ipc_mode
        if self.gpu_request:
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return kwargs

    def cli_args(self) -> list[str]:
        """The same flags for ``docker run``."""
        args: list[str] = []
        for d in self.devices:
            args += ["--device", d]
        for g in self.group_add:
            args += ["--group-add", g]
        for s in self.security_opt:
            args += ["--security-opt", s]
        if self.ipc_mode:
            args += [f"--ipc={self.ipc_mode}"]
        if self.gpu_request:
            args += ["--gpus", "all"]
        return args


def device_flags(
    vendor: str,
    *,
    dev_root: Path = Path("/dev"),
    proc_root: Path = Path("/proc"),
) -> DeviceFlags:
    """Device flags for a recipe of ``vendor`` on this host (roots are parameters for tests).

    AMD (``/dev/kfd`` present): ``/dev/kfd`` and ``/dev/dri``, the ``video`` group and the
    numeric group owning ``/dev/dri/renderD*``, seccomp unconfined, host IPC. NVIDIA
    (``/dev/nvidiactl`` or ``/proc/driver/nvidia``): a request for all GPUs. A ``none``
    recipe, or a host without that vendor's devices, gets no flags (the probe then
    reports ``no-device`` for a GPU recipe).
    """
    if vendor == "amd" and (dev_root / "kfd").exists():
        dri = dev_root / "dri"
        render_nodes = sorted(dri.glob("renderD*")) if dri.is_dir() else []
        gids: list[str] = []
        for node in render_nodes:
            try:
                gid = str(node.stat().st_gid)
            except OSError:
                continue
            if gid not in gids:
                gids.append(gid)
        devices = [str(dev_root / "kfd")]
        if dri.is_dir():
            devices.append(str(dri))
        return DeviceFlags(
            vendor="amd",
            devices=tuple(devices),
            group_add=("video", *gids),
            security_opt=("seccomp=unconfined",),
            ipc_mode="host",
            gpu_count=len(render_nodes),
        )
    if vendor == "nvidia" and (
        (dev_root / "nvidiactl").exists() or (proc_root / "driver" / "nvidia").exists()
    ):
        gpus_dir = proc_root / "driver" / "nvidia" / "gpus"
        count = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
        if count == 0:
            count = sum(1 for p in dev_root.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))
        return DeviceFlags(vendor="nvidia", gpu_request=True, gpu_count=count)
    return DeviceFlags()


# --------------------------------------------------------------------------- naming


def certified_repository(recipe_name: str) -> str:
    return f"{CERTIFIED_REPOSITORY_PREFIX}/{recipe_name}"


def certified_ref(recipe_name: str, stack_tag: str) -> str:
    """``envforge/<recipe>:<stack tag>``, e.g. ``envforge/gfx1010:torch1.13.1-rocm5.2-py3.10``."""
    return f"{certified_repository(recipe_name)}:{stack_tag}"


_REGISTRY_RE = re.compile(
    r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\])(?::(?P<port>\d{1,5}))?"
    r"(?P<ns>(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)$"
)


def registry_ref(registry: str, recipe_name: str, stack_tag: str) -> str:
    """``REGISTRY/<recipe>:<stack tag>`` for ``HOST[:PORT][/NAMESPACE]``; refuses bad input."""
    reg = registry.strip().rstrip("/")
    for scheme in ("https://", "http://"):
        if reg.startswith(scheme):
            reg = reg[len(scheme) :]
    if not _REGISTRY_RE.match(reg):
        raise InvalidInput(
            f"--registry {registry!r} is not HOST[:PORT][/NAMESPACE]",
            hint="e.g. --registry 127.0.0.1:5000/team",
        )
    return f"{reg}/{recipe_name}:{stack_tag}"


def split_ref(ref: str) -> tuple[str, str | None]:
    """``repo[:tag]`` -> (repo, tag); a ``@digest`` stays in the repository part's suffix."""
    if "@" in ref or ref.startswith("sha256:"):
        return ref, None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, None


# --------------------------------------------------------------------------- images


@dataclass(frozen=True)
class ImageInfo:
    """What envforge needs to know about a local image."""

    id: str
    layers: tuple[str, ...]
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    config: Mapping[str, Any]
    repo_digests: tuple[str, ...] = ()
    size: int = 0


def _image_info(image: Image) -> ImageInfo:
    attrs = image.attrs
    config = attrs.get("Config") or {}
    return ImageInfo(
        id=str(attrs["Id"]),
        layers=tuple(str(x) for x in (attrs.get("RootFS") or {}).get("Layers") or ()),
        tags=tuple(str(t) for t in attrs.get("RepoTags") or ()),
        labels=dict(config.get("Labels") or {}),
        config=dict(config),
        repo_digests=tuple(str(d) for d in attrs.get("RepoDigests") or ()),
        size=int(attrs.get("Size") or 0),
    )


def inspect_image(client: docker.DockerClient, ref: str) -> ImageInfo | None:
    """The local image named ``ref`` (tag or ID), or None when there is none."""
    try:
        return _image_info(client.images.get(ref))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
        raise Unavailable(f"cannot inspect image {ref}: {_api_message(exc)}") from None


def tag_image(client: docker.DockerClient, image_id: str, ref: str) -> None:
    repo, tag = split_ref(ref)
    try:
        ok = client.api.tag(image_id, repo, tag or "latest", force=True)
    except docker.errors.APIError as exc:
        raise InvalidInput(f"cannot tag {image_id[:19]} as {ref}: {_api_message(exc)}") from None
    if not ok:
        raise InvalidInput(f"cannot tag {image_id[:19]} as {ref}")


def untag(client: docker.DockerClient, ref: str) -> None:
    """Remove the tag ``ref`` only (never the image's layers while other tags hold them)."""
    try:
        client.api.remove_image(ref, noprune=True)
    except docker.errors.APIError as exc:
        if exc.status_code != 404:
            raise


def _api_message(exc: docker.errors.APIError) -> str:
    explanation = getattr(exc, "explanation", None)
    return _first_line(str(explanation or exc))


def config_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of an image config that change what runs, minus envforge's own label.

    Bound into certificates next to the layer diff IDs: an image with the same files but
    other env vars, entrypoint or user is not the image that was probed.
    """
    return {
        "Env": list(config.get("Env") or []),
        "Entrypoint": config.get("Entrypoint"),
        "Cmd": config.get("Cmd"),
        "WorkingDir": config.get("WorkingDir") or "",
        "User": config.get("User") or "",
    }


# --------------------------------------------------------------------------- builds


@dataclass(frozen=True)
class BuildStep:
    number: int
    instruction: str
    cached: bool


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    seconds: float
    steps: tuple[BuildStep, ...]
    log: tuple[str, ...] = field(default=(), repr=False)

    @property
    def rebuilt(self) -> tuple[BuildStep, ...]:
        """Steps that made a new layer or config (not ``Using cache``), FROM excluded."""
        return tuple(s for s in self.steps if not s.cached and not s.instruction.startswith("FROM"))


_STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


def assemble_context(
    dest: Path,
    dockerfile: str,
    *,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
) -> None:
    """Write a build context: ``Dockerfile``, ``wheelhouse/*.whl``, ``ca-bundle.pem``.

    Wheels are hard-linked where the file system allows (a torch wheel is ~200 MB),
    copied otherwise. The rendered Dockerfile's final stage holds none of them.
    """
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    if wheelhouse is not None:
        if not wheelhouse.is_dir():
            raise InvalidInput(
                f"--wheelhouse {wheelhouse}: not a directory", hint="name a folder of .whl files"
            )
        wheels = sorted(p for p in wheelhouse.iterdir() if p.suffix == ".whl" and p.is_file())
        if not wheels:
            raise InvalidInput(
                f"--wheelhouse {wheelhouse}: no .whl files in it",
                hint="name a folder of .whl files",
            )
        target = dest / "wheelhouse"
        target.mkdir()
        for wheel in wheels:
            _link_or_copy(wheel, target / wheel.name)
    if ca_bundle is not None:
        if not ca_bundle.is_file():
            raise InvalidInput(
                f"--ca-bundle {ca_bundle}: not a file", hint="name a PEM file of CA certificates"
            )
        shutil.copyfile(ca_bundle, dest / "ca-bundle.pem")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def build_image(
    client: docker.DockerClient,
    context_dir: Path,
    *,
    on_line: Callable[[str], None] = lambda _line: None,
    nocache: bool = False,
) -> BuildResult:
    """Build ``context_dir`` with the engine's (legacy) builder on the host network.

    Streams every output line to ``on_line``; returns the image ID (untagged: envforge
    tags only after certification). Raises :class:`BuildFailed` naming the failing step.
    Intermediate containers are removed in every outcome (``forcerm``).
    """
    start = time.monotonic()
    steps: list[BuildStep] = []
    log: list[str] = []
    pending: tuple[int, str] | None = None
    image_id: str | None = None
    error: str | None = None
    try:
        stream = client.api.build(
            path=str(context_dir),
            dockerfile="Dockerfile",
            rm=True,
            forcerm=True,
            pull=False,
            nocache=nocache,
            network_mode="host",
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                error = str(chunk.get("error") or "").strip()
                detail = chunk.get("errorDetail") or {}
                if not error and isinstance(detail, dict):
                    error = str(detail.get("message") or "")
                for line in error.splitlines():
                    log.append(line)
                    on_line(line)
                continue
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = str(aux["ID"])
            text = chunk.get("stream")
            if text is None and chunk.get("status"):
                text = str(chunk["status"]) + (
                    " " + str(chunk["progress"]) if chunk.get("progress") else ""
                )
            if not text:
                continue
            for raw in str(text).splitlines():
                line = raw.rstrip()
                if not line:
                    continue
                log.append(line)
                on_line(line)
                m = _STEP_RE.match(line)
                if m:
                    if pending is not None:
                        steps.append(BuildStep(pending[0], pending[1], cached=False))
                    pending = (int(m.group(1)), m.group(3))
                elif pending is not None and line.strip() == "---> Using cache":
                    steps.append(BuildStep(pending[0], pending[1], cached=True))
                    pending = None
                elif line.startswith("Successfully built ") and image_id is None:
                    image_id = line.split()[-1]
    except docker.errors.APIError as exc:
        raise BuildFailed(f"the engine refused the build: {_api_message(exc)}") from None
    except docker.errors.DockerException as exc:
        raise BuildFailed(f"build failed: {_first_line(str(exc))}") from None
    if pending is not None:
        steps.append(BuildStep(pending[0], pending[1], cached=False))
    if error is not None or image_id is None:
        failing = (
            f"step {steps[-1].number} ({steps[-1].instruction[:80]})" if steps else "the build"
        )
        hint = "see the build output above"
        if steps and steps[-1].instruction.upper().startswith("FROM "):
            hint = "the base image is neither local nor pullable; pass --base-image REF"
        raise BuildFailed(
            f"{failing} failed: {_first_line(error or 'no image was produced')}", hint=hint
        )
    if not image_id.startswith("sha256:"):
        image = inspect_image(client, image_id)
        if image is not None:
            image_id = image.id
    return BuildResult(image_id, time.monotonic() - start, tuple(steps), tuple(log))


def label_image(
    client: docker.DockerClient, image_id: str, labels: Mapping[str, str]
) -> str:
    """A new image ``FROM image_id`` that only adds ``labels``: metadata, same layers.

    Built with the engine's builder from a one-line Dockerfile and the build API's
    ``labels`` parameter, so no label value is ever parsed as a Dockerfile instruction.
    The result's layer diff IDs equal ``image_id``'s.
    """
    dockerfile = f"FROM {image_id}\n".encode()
    image: str | None = None
    error: str | None = None
    try:
        for chunk in client.api.build(
            fileobj=io.BytesIO(dockerfile),
            rm=True,
            forcerm=True,
            pull=False,
            network_mode="none",
            labels=dict(labels),
            decode=True,
        ):
            if "error" in chunk:
                error = str(chunk["error"])
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image = str(aux["ID"])
            text = str(chunk.get("stream") or "")
            if text.startswith("Successfully built ") and image is None:
                image = text.rsplit(maxsplit=1)[-1]
    except docker.errors.DockerException as exc:
        raise BuildFailed(f"cannot label image {image_id[:19]}: {_first_line(str(exc))}") from None
    if error is not None or image is None:
        raise BuildFailed(f"cannot label image {image_id[:19]}: {_first_line(error or 'no image')}")
    info = inspect_image(client, image)
    if info is None:
        raise BuildFailed(f"labelled image {image} vanished")
    return info.id


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class PushResult:
    ref: str
    digest: str


def push(
    client: docker.DockerClient, ref: str, *, on_line: Callable[[str], None] = lambda _l: None
) -> PushResult:
    """Push ``ref`` (REGISTRY/REPO:TAG); returns the manifest digest the registry reported."""
    repo, tag = split_ref(ref)
    digest: str | None = None
    try:
        for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise PublishRefused(
                    f"push of {ref} failed: {_first_line(str(chunk['error']))}",
                    hint="check that the registry answers and accepts pushes",
                )
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
            status = chunk.get("status")
            if status:
                on_line(f"{chunk.get('id', '')} {status}".strip())
    except docker.errors.DockerException as exc:
        raise PublishRefused(f"push of {ref} failed: {_first_line(str(exc))}") from None
    if digest is None:
        raise PublishRefused(f"push of {ref} reported no digest")
    return PushResult(ref, digest)


def pull(client: docker.DockerClient, ref: str) -> ImageInfo:
    """Pull ``ref`` (tag or ``@sha256:`` digest) and return the local image."""
    repo, tag = split_ref(ref)
    try:
        if "@" in repo:
            client.api.pull(repo)
        else:
            client.api.pull(repo, tag=tag or "latest")
    except docker.errors.APIError as exc:
        raise Unavailable(
            f"cannot pull {ref}: {_api_message(exc)}", hint="check the reference and the registry"
        ) from None
    except docker.errors.DockerException as exc:
        raise Unavailable(f"cannot pull {ref}: {_first_line(str(exc))}") from None
    info = inspect_image(client, ref)
    if info is None:
        raise Unavailable(f"pulled {ref} but the engine does not show it")
    return info


# --------------------------------------------------------------------------- containers


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while cleaning up, so a second Ctrl-C cannot skip a removal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def remove_container(container: Container) -> None:
    """Kill and remove ``container``; quiet when it is already gone. Never raises."""
    with _sigint_deferred():
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
            except docker.errors.DockerException:
                time.sleep(0.5)


def container_kwargs(
    *,
    env: Mapping[str, str],
    flags: DeviceFlags,
    network: bool = False,
    role: str = "probe",
) -> dict[str, Any]:
    """Common ``containers.create`` arguments: env, devices, no network, envforge label."""
    kwargs: dict[str, Any] = {
        "environment": dict(env),
        "labels": {ROLE_LABEL: role},
        "detach": True,
        "stdin_open": False,
        "tty": False,
    }
    if not network:
        kwargs["network_mode"] = "none"
    kwargs.update(flags.sdk_kwargs())
    return kwargs


def create_container(
    client: docker.DockerClient, image: str, command: Sequence[str], **kwargs: Any
) -> Container:
    try:
        return client.containers.create(image, list(command), **kwargs)
    except docker.errors.ImageNotFound:
        raise InvalidInput(f"image {image} not found on this engine") from None
    except docker.errors.APIError as exc:
        raise Unavailable(f"cannot create a container from {image}: {_api_message(exc)}") from None


def put_file(
    container: Container, directory: str, name: str, data: bytes, mode: int = 0o644
) -> None:
    """Copy one file into a (created, not yet started) container."""
    import tarfile

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
    client: docker.DockerClient,
    image: str,
    command: Sequence[str],
    *,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[int, str]:
    """Run ``command`` in a throwaway container (no network); (exit code, output). Removed after."""
    kwargs = container_kwargs(env=env or {}, flags=DeviceFlags(), role="helper")
    if user is not None:
        kwargs["user"] = user
    if volumes:
        kwargs["volumes"] = {k: dict(v) for k, v in volumes.items()}
    container = create_container(client, image, command, **kwargs)
    try:
        container.start()
        try:
            result = container.wait(timeout=timeout)
        except Exception as exc:  # requests' ReadTimeout and friends
            raise Unavailable(f"{' '.join(command)[:60]} did not finish in {timeout:g}s") from exc
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return int(result.get("StatusCode", -1)), output
    finally:
        remove_container(container)


def list_role_containers(client: docker.DockerClient) -> list[str]:
    """IDs of every container (any state) carrying envforge's role label."""
    return [c.id or "" for c in client.containers.list(all=True, filters={"label": ROLE_LABEL})]


# --------------------------------------------------------------------------- volumes


def ensure_cache_volume(
    client: docker.DockerClient, name: str, image: str, subdirs: Sequence[str]
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
        raise Unavailable(f"cannot inspect volume {name}: {_api_message(exc)}") from None
    client.volumes.create(name=name, labels={ROLE_LABEL: "cache"})
    script = " && ".join(
        ["chmod 1777 /v"] + [f"mkdir -p /v/{d} && chmod 1777 /v/{d}" for d in subdirs]
    )
    code, output = run_capture(
        client,
        image,
        ["/bin/sh", "-c", script],
        user="0:0",
        volumes={name: {"bind": "/v", "mode": "rw"}},
    )
    if code != 0:
        client.volumes.get(name).remove(force=True)
        raise Unavailable(f"cannot prepare cache volume {name}: {_first_line(output)}")


def _remove_by_name(client: docker.DockerClient, name: str) -> None:
    """Remove the container called ``name`` if it exists (a create whose reply was lost)."""
    with _sigint_deferred():
        try:
            container = client.containers.get(name)
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException:
            return
        remove_container(container)


def unique_name(role: str) -> str:
    return f"envforge-{role}-{secrets.token_hex(6)}"


# --------------------------------------------------------------------------- probe target

#: Where the probe worker and its spec are copied into the candidate container.
_PROBE_DIR = "/tmp"
_PROBE_WORKER = "envforge_probe_worker.py"
_PROBE_SPEC = "envforge_probe_spec.json"
_STDERR_KEEP = 200
_EXIT_WAIT = 5.0


class ContainerHandle:
    """A running probe container, seen as the runner's ``WorkerHandle``.

    A pump thread reads the attached (demultiplexed) stdout/stderr: stdout is split into
    lines for :meth:`read_line`, stderr is kept as a tail for :meth:`stderr_tail`.
    """

    def __init__(self, client: docker.DockerClient, container: Container) -> None:
        self._client = client
        self._container = container
        self._lines = LineQueue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_KEEP)
        self._stopped = False
        self._status: tuple[int | None, str | None] | None = None
        self.oom_killed = False
        self._stream = client.api.attach(
            str(container.id), stdout=True, stderr=True, stream=True, logs=True, demux=True
        )
        self._thread = threading.Thread(target=self._pump, name="probe-attach", daemon=True)

    def begin(self) -> None:
        self._thread.start()

    def _pump(self) -> None:
        out_buf = b""
        err_buf = b""
        try:
            for frame in self._stream:
                out, err = frame if isinstance(frame, tuple) else (frame, None)
                if out:
                    out_buf += out
                    *lines, out_buf = out_buf.split(b"\n")
                    for raw in lines:
                        self._lines.put(raw.decode("utf-8", errors="replace").rstrip("\r"))
                if err:
                    err_buf += err
                    *lines, err_buf = err_buf.split(b"\n")
                    for raw in lines:
                        self._stderr.append(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except Exception:  # the stream ends with the container, however it ends
            pass
        finally:
            if out_buf:
                self._lines.put(out_buf.decode("utf-8", errors="replace"))
            if err_buf:
                self._stderr.append(err_buf.decode("utf-8", errors="replace"))
            self._lines.close()

    def read_line(self, timeout: float) -> str | None:
        return self._lines.read_line(timeout)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            with _sigint_deferred(), suppress(docker.errors.DockerException):
                self._container.kill()
        self._thread.join(timeout=5.0)

    def exit_status(self) -> tuple[int | None, str | None]:
        if self._status is not None:
            return self._status
        code: int | None = None
        try:
            result = self._container.wait(timeout=_EXIT_WAIT)
            code = int(result.get("StatusCode", -1))
        except Exception:  # requests' ReadTimeout: it did not exit in time
            self.stop()
            try:
                code = int(self._container.wait(timeout=_EXIT_WAIT).get("StatusCode", -1))
            except Exception:
                code = None
        try:
            self._container.reload()
            self.oom_killed = bool(self._container.attrs.get("State", {}).get("OOMKilled"))
        except docker.errors.DockerException:
            pass
        self._thread.join(timeout=2.0)
        self._status = container_exit_status(code)
        return self._status

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self._stderr)[-lines:])


@dataclass(frozen=True)
class DockerTarget:
    """The probe runner's target for a container of ``image`` (see envforge.probe.runner).

    The container has no network, the recipe's env vars (passed in by the runner) and
    this host's device flags. The worker and its spec are copied in with ``put_archive``
    before start. Leaving :meth:`start` by any route kills and removes the container.
    """

    client: docker.DockerClient
    image: str
    flags: DeviceFlags = field(default_factory=DeviceFlags)
    python: str = "python"

    @property
    def description(self) -> str:
        return f"docker image {self.image}"

    @contextmanager
    def start(
        self, worker_source: str, spec_json: str, env: Mapping[str, str]
    ) -> Iterator[ContainerHandle]:
        name = unique_name("probe")
        command = [self.python, f"{_PROBE_DIR}/{_PROBE_WORKER}", f"{_PROBE_DIR}/{_PROBE_SPEC}"]
        kwargs = container_kwargs(env=env, flags=self.flags, role="probe")
        kwargs["name"] = name
        container: Container | None = None
        try:
            container = create_container(self.client, self.image, command, **kwargs)
            put_file(container, _PROBE_DIR, _PROBE_WORKER, worker_source.encode())
            put_file(container, _PROBE_DIR, _PROBE_SPEC, spec_json.encode())
            handle = ContainerHandle(self.client, container)
            try:
                container.start()
            except docker.errors.APIError as exc:
                raise Unavailable(
                    f"cannot start a probe container from {self.image[:19]}: {_api_message(exc)}",
                    hint="check the device flags this host needs (envforge doctor)",
                ) from None
            handle.begin()
            try:
                yield handle
            finally:
                handle.stop()
        finally:
            if container is not None:
                remove_container(container)
            _remove_by_name(self.client, name)


# --------------------------------------------------------------------------- shell

#: Fixed paths inside a shell container.
SHELL_WORKDIR = "/workspace"
SHELL_HOME = "/home/envforge"
CACHE_ROOT = "/var/cache/envforge"


@dataclass(frozen=True)
class CacheVolume:
    name: str
    mount: str
    subdirs: tuple[str, ...]


def cache_volumes(recipe_name: str, stack_tag: str) -> tuple[CacheVolume, ...]:
    """Named volumes that keep kernel caches between shells (one set per recipe and stack)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"envforge-{recipe_name}-{stack_tag}")
    return (
        CacheVolume(f"{stem}-miopen", f"{CACHE_ROOT}/miopen", ("db", "cache")),
        CacheVolume(f"{stem}-torch", f"{CACHE_ROOT}/torch", ("inductor", "triton", "kernels")),
    )


def cache_env() -> dict[str, str]:
    """Env vars pointing MIOpen, TorchInductor, Triton and torch's kernel cache at the volumes."""
    return {
        "MIOPEN_USER_DB_PATH": f"{CACHE_ROOT}/miopen/db",
        "MIOPEN_CUSTOM_CACHE_DIR": f"{CACHE_ROOT}/miopen/cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_ROOT}/torch/inductor",
        "TRITON_CACHE_DIR": f"{CACHE_ROOT}/torch/triton",
        "PYTORCH_KERNEL_CACHE_PATH": f"{CACHE_ROOT}/torch/kernels",
    }


def shell_env(recipe_env: Mapping[str, str], flags: DeviceFlags) -> dict[str, str]:
    """The shell's env: cache locations and HOME, then the recipe's (which win), NPROC_PER_NODE."""
    env = cache_env()
    env["HOME"] = SHELL_HOME
    env.update(recipe_env)
    env["NPROC_PER_NODE"] = str(max(flags.gpu_count, 1))
    return env


def shell_argv(
    *,
    image: str,
    command: Sequence[str],
    name: str,
    env: Mapping[str, str],
    flags: DeviceFlags,
    cwd: Path,
    volumes: Sequence[CacheVolume],
    user: str,
    tty: bool,
    docker_cli: str = "docker",
) -> list[str]:
    """``docker run --rm ...`` for :func:`run_shell` (pure; unit-tested)."""
    argv = [docker_cli, "run", "--rm", "--name", name, "--label", f"{ROLE_LABEL}=shell", "-i"]
    if tty:
        argv.append("-t")
    argv += ["--user", user, "--network", "host", "--workdir", SHELL_WORKDIR]
    argv += ["--mount", f"type=bind,source={cwd},target={SHELL_WORKDIR}"]
    argv += ["--tmpfs", f"{SHELL_HOME}:rw,exec,mode=1777"]
    for vol in volumes:
        argv += ["--mount", f"type=volume,source={vol.name},target={vol.mount}"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += flags.cli_args()
    argv.append(image)
    argv += list(command)
    return argv


#: Signals envforge passes on to the ``docker run`` client, which passes them on to the
#: container (its --sig-proxy); SIGWINCH lets a TTY follow the terminal's size.
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


def run_shell(
    client: docker.DockerClient,
    *,
    image: str,
    command: Sequence[str],
    recipe_name: str,
    stack_tag: str,
    env: Mapping[str, str],
    flags: DeviceFlags,
    cwd: Path,
) -> int:
    """Run ``command`` in ``image`` through the ``docker`` CLI; return its exit code.

    The docker CLI does what the SDK makes hard: a real TTY (raw mode, resizes) and
    signal proxying. It reads DOCKER_HOST / DOCKER_CONTEXT / the current context the same
    way :func:`connect` does, and it runs with this process's environment. The container
    has a unique name and is removed afterwards in every outcome (``--rm``, then by name).
    """
    from envforge.proc import spawn

    cli = shutil.which("docker")
    if cli is None:
        raise Unavailable(
            "the docker CLI is not on PATH (envforge shell runs it for TTY and signals)",
            hint="install docker.io (or docker-ce-cli)",
        )
    volumes = cache_volumes(recipe_name, stack_tag)
    for vol in volumes:
        ensure_cache_volume(client, vol.name, image, vol.subdirs)
    name = unique_name("shell")
    argv = shell_argv(
        image=image,
        command=command,
        name=name,
        env=shell_env(env, flags),
        flags=flags,
        cwd=cwd,
        volumes=volumes,
        user=f"{os.getuid()}:{os.getgid()}",
        tty=sys.stdin.isatty(),
        docker_cli=cli,
    )
    handlers: dict[int, Any] = {}
    try:
        with spawn(argv, stdin=None, stdout=None, stderr=None, grace=10.0) as proc:

            def forward(signum: int, _frame: object) -> None:
                with suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

            for sig_name in _FORWARDED:
                sig = getattr(signal, sig_name, None)
                if sig is not None:
                    handlers[int(sig)] = signal.signal(sig, forward)
            code = proc.wait()
    finally:
        for signum, old in handlers.items():
            signal.signal(signum, old)
        _remove_by_name(client, name)
    return code if code >= 0 else 128 - code
