"""Images on the engine: inspect, build (context and output parsing), label, tag, push, pull."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker.errors
import docker.utils.build

from envforge.backends.docker.buildkit_lines import HeldNoise, base_stopped, failure_reason, plain
from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.sdkerrors import TRANSPORT_ERRORS, api_message, first_line
from envforge.container.identity import engine_kind
from envforge.container.refs import DIGEST_RE, ImageInfo, check_digest, split_ref
from envforge.core import proc
from envforge.core.net import DEFAULT_DEADLINE, NetError, NotAnswered, follow
from envforge.errors import BuildFailed, InvalidInput, PublishRefused, Unavailable, printable


def inspect_image(client: EngineClient, ref: str) -> ImageInfo | None:
    """The local image named ``ref`` (tag or ID), or None when there is none."""
    try:
        return ImageInfo.from_attrs(client.images.get(ref).attrs)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
        if exc.status_code == 400:  # "invalid reference format": the user's input
            raise InvalidInput(
                f"{ref!r} is not an image reference: {api_message(exc)}",
                hint="REPO[:TAG], REPO@sha256:DIGEST or an image ID",
            ) from None
        raise Unavailable(f"cannot inspect image {ref}: {api_message(exc)}") from None


def tag_image(client: EngineClient, image_id: str, ref: str) -> None:
    repo, tag = split_ref(ref)
    try:
        ok = client.api.tag(image_id, repo, tag or "latest", force=True)
    except docker.errors.APIError as exc:
        raise InvalidInput(f"cannot tag {image_id[:19]} as {ref}: {api_message(exc)}") from None
    if not ok:
        raise InvalidInput(f"cannot tag {image_id[:19]} as {ref}")


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


#: The fix when the base image cannot be pulled (exit 4, like every network problem).
BASE_UNAVAILABLE = (
    "the base image is neither local nor pullable: check the network and the registry, "
    "or pass --base-image REF"
)


class _BuildOutput:
    """What the classic builder's JSON stream said: lines, steps, the image ID, the error."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.steps: list[BuildStep] = []
        self.log: list[str] = []
        self.pending: tuple[int, str] | None = None
        self.image_id: str | None = None
        self.error: str | None = None

    def feed(self, chunk: Mapping[str, Any]) -> None:
        if "error" in chunk:
            self._error(chunk)
            return
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            self.image_id = str(aux["ID"])
        text = chunk.get("stream")
        if text is None and chunk.get("status"):
            text = str(chunk["status"]) + (
                " " + str(chunk["progress"]) if chunk.get("progress") else ""
            )
        for raw in str(text or "").splitlines():
            line = raw.rstrip()
            if line:
                self._line(line)

    def _error(self, chunk: Mapping[str, Any]) -> None:
        error = str(chunk.get("error") or "").strip()
        detail = chunk.get("errorDetail") or {}
        if not error and isinstance(detail, dict):
            error = str(detail.get("message") or "")
        self.error = error
        for line in error.splitlines():
            self.log.append(line)
            self.on_line(plain(line))

    def _line(self, line: str) -> None:
        self.log.append(line)
        self.on_line(plain(line))
        m = _STEP_RE.match(line)
        if m:
            self._close_step()
            self.pending = (int(m.group(1)), m.group(3))
        elif self.pending is not None and line.strip() == "---> Using cache":
            self.steps.append(BuildStep(self.pending[0], self.pending[1], cached=True))
            self.pending = None
        elif line.startswith("Successfully built ") and self.image_id is None:
            self.image_id = line.rsplit(maxsplit=1)[-1]

    def _close_step(self) -> None:
        if self.pending is not None:
            self.steps.append(BuildStep(self.pending[0], self.pending[1], cached=False))
            self.pending = None

    def result_id(self) -> str:
        """The built image's ID; raises the failure (exit 4 when FROM failed: a network
        problem) when the build failed or produced nothing."""
        self._close_step()
        if self.error is None and self.image_id is not None:
            return self.image_id
        steps = self.steps
        failing = (
            f"step {steps[-1].number} ({steps[-1].instruction[:80]})" if steps else "the build"
        )
        message = f"{failing} failed: {first_line(self.error or 'no image was produced')}"
        if steps and steps[-1].instruction.upper().startswith("FROM "):
            raise Unavailable(message, hint=BASE_UNAVAILABLE)
        raise BuildFailed(message, hint="see the build output above")


def _context_tar(context_dir: Path) -> tuple[Path, IO[bytes]]:
    """The context's tar beside the context, under its owner-naming name (the SDK's own
    would be an anonymous TMPDIR file that a SIGKILL leaves and no sweep can tell)."""
    tarball = context_dir.parent / (context_dir.name + ".tar")
    try:
        with open(tarball, "w+b") as fh:
            docker.utils.build.tar(context_dir, fileobj=fh)
        return tarball, open(tarball, "rb")
    except OSError as exc:
        tarball.unlink(missing_ok=True)
        raise BuildFailed(f"cannot write the build context: {exc.strerror}") from None


def build_image(
    client: EngineClient,
    context_dir: Path,
    *,
    on_line: Callable[[str], None] = lambda _line: None,
    nocache: bool = False,
    platform: str | None = None,
) -> BuildResult:
    """Build ``context_dir`` with the engine's (legacy) builder on the host network, for
    ``platform`` (``linux/arm64``; None: the engine's own).

    Streams every output line to ``on_line``; returns the image ID (untagged: envforge
    tags only after certification). Raises :class:`BuildFailed` naming the failing step.
    Intermediate containers are removed in every outcome (``forcerm``).
    """
    start = time.monotonic()
    output = _BuildOutput(on_line)
    tarball, tar_file = _context_tar(context_dir)
    try:
        stream = client.api.build(
            fileobj=tar_file,
            custom_context=True,
            dockerfile="Dockerfile",
            rm=True,
            forcerm=True,
            pull=False,
            nocache=nocache,
            network_mode="host",
            decode=True,
            **({"platform": platform} if platform else {}),
        )
        for chunk in stream:
            output.feed(chunk)
    except docker.errors.APIError as exc:
        raise BuildFailed(f"the engine refused the build: {api_message(exc)}") from None
    except TRANSPORT_ERRORS as exc:
        raise BuildFailed(f"build failed: {first_line(str(exc))}") from None
    finally:
        tar_file.close()
        tarball.unlink(missing_ok=True)
    image_id = output.result_id()
    if not image_id.startswith("sha256:"):
        image = inspect_image(client, image_id)
        if image is not None:
            image_id = image.id
    return BuildResult(image_id, time.monotonic() - start, tuple(output.steps), tuple(output.log))


def label_image(client: EngineClient, image_id: str, labels: Mapping[str, str]) -> str:
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
    except TRANSPORT_ERRORS as exc:
        raise BuildFailed(f"cannot label image {image_id[:19]}: {first_line(str(exc))}") from None
    if error is not None or image is None:
        raise BuildFailed(f"cannot label image {image_id[:19]}: {first_line(error or 'no image')}")
    info = inspect_image(client, image)
    if info is None:
        raise BuildFailed(f"labelled image {image} vanished")
    return info.id


@dataclass(frozen=True)
class PushResult:
    ref: str
    digest: str


_STATUS_DIGEST = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")


def digest_in_status(status: str) -> str | None:
    """The manifest digest in a push status line (``TAG: digest: sha256:... size: N``).

    Docker also sends it as ``aux.Digest``; Podman's Docker API sends only this line.
    """
    match = _STATUS_DIGEST.search(status)
    return match.group(1) if match else None


def untag(client: EngineClient, ref: str) -> None:
    """Remove the tag ``ref`` (the image stays when other tags or IDs name it: no prune).
    Quiet when it is gone already; never raises."""
    with contextlib.suppress(*TRANSPORT_ERRORS):  # APIError included (a DockerException)
        client.api.remove_image(ref, noprune=True)


def _moved(chunk: Any) -> bool:
    """Whether an engine's pull/push line is progress: anything but the countdown of a
    retry (``Retrying in 5 seconds``: the engine got no answer either)."""
    status = chunk.get("status") if isinstance(chunk, dict) else None
    return not (isinstance(status, str) and status.startswith("Retrying in"))


def push(
    client: EngineClient,
    ref: str,
    *,
    on_line: Callable[[str], None] = lambda _l: None,
    stall: float = DEFAULT_DEADLINE,
) -> PushResult:
    """Push ``ref`` (REGISTRY/REPO:TAG); returns the manifest digest the registry reported.
    Exit 4 (:class:`NotAnswered`) when the engine reports no progress for ``stall``
    seconds (a registry that stopped answering)."""
    repo, tag = split_ref(ref)
    digest: str | None = None
    try:
        for chunk in follow(
            lambda: client.api.push(repo, tag=tag, stream=True, decode=True),
            stall=stall,
            what=f"push of {ref}",
            moved=_moved,
        ):
            if "error" in chunk:
                raise PublishRefused(
                    f"push of {ref} failed: {first_line(str(chunk['error']))}",
                    hint="check that the registry answers and accepts pushes",
                )
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
                if not DIGEST_RE.fullmatch(digest):
                    raise PublishRefused(
                        f"push of {ref}: the registry answered a malformed digest "
                        f"{printable(digest[:80])!r}",
                        hint="check the registry",
                    )
            status = chunk.get("status")
            if digest is None and isinstance(status, str):
                digest = digest_in_status(status)
            if status:
                on_line(f"{chunk.get('id', '')} {status}".strip())
    except NetError as exc:
        raise NotAnswered(
            f"push of {ref} failed: timeout: {exc.reason}",
            hint="check that the registry answers, or raise --deadline",
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise PublishRefused(f"push of {ref} failed: {first_line(str(exc))}") from None
    if digest is None:
        raise PublishRefused(f"push of {ref} reported no digest")
    return PushResult(ref, digest)


def pull(client: EngineClient, ref: str, *, stall: float = DEFAULT_DEADLINE) -> ImageInfo:
    """Pull ``ref`` (tag or ``@sha256:`` digest) and return the local image; a reference
    the engine cannot parse (a malformed digest, upper case) is the user's input, exit 2.
    Exit 4 (naming ``ref``) when the engine reports no progress for ``stall`` seconds."""
    check_digest(ref)
    repo, tag = split_ref(ref)
    named = None if "@" in repo else tag or "latest"  # a digest is in repo itself
    try:
        for chunk in follow(
            lambda: client.api.pull(repo, named, stream=True, decode=True),
            stall=stall,
            what=f"pull of {ref}",
            moved=_moved,
        ):
            if isinstance(chunk, dict) and "error" in chunk:
                raise Unavailable(
                    f"cannot pull {ref}: {first_line(str(chunk['error']))}",
                    hint="check the reference and the registry",
                )
    except NetError as exc:
        raise NotAnswered(
            f"cannot pull {ref}: timeout: {exc.reason}",
            hint="check that the registry answers, or raise --deadline",
        ) from None
    except docker.errors.APIError as exc:
        if exc.status_code == 400:  # "invalid reference format", "invalid tag format"
            raise InvalidInput(
                f"{ref!r} is not an image reference: {api_message(exc)}",
                hint="REPO[:TAG] or REPO@sha256:DIGEST",
            ) from None
        raise Unavailable(
            f"cannot pull {ref}: {api_message(exc)}", hint="check the reference and the registry"
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise Unavailable(f"cannot pull {ref}: {first_line(str(exc))}") from None
    info = inspect_image(client, ref)
    if info is None:
        raise Unavailable(f"pulled {ref} but the engine does not show it")
    return info


# --------------------------------------------------------------------------- BuildKit

#: ``auto``: BuildKit when a docker CLI here can drive it and the engine has it, else
#: the classic builder; ``buildkit`` / ``classic`` force one (``ENVFORGE_BUILDER``).
BUILDER_CHOICES = ("auto", "buildkit", "classic")
#: Debian's docker.io puts its own CLI here; a newer CLI earlier on PATH may lack buildx.
_DEBIAN_CLI = "/usr/bin/docker"
#: docker CLIs from 23.0 on build with BuildKit only through the buildx plugin.
_CLI_WITHOUT_BUILTIN_BUILDKIT = 23
_VERTEX_RE = re.compile(r"^#(\d+) \[([^\]]+)\] (.*)$")
_CACHED_RE = re.compile(r"^#(\d+) CACHED$")
_ERROR_RE = re.compile(r"^#(\d+) ERROR: (.*)$")


@dataclass(frozen=True)
class BuildKitCli:
    """How to build with BuildKit through a docker CLI: argv up to the build options."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        prefix = " ".join(f"{k}={v}" for k, v in self.env)
        return f"{prefix} {' '.join(self.argv)}".strip()


def _probe_cli(cli: str, env: Mapping[str, str]) -> BuildKitCli | None:
    try:
        buildx = proc.run([cli, "buildx", "version"], timeout=20, env=env)
        if buildx.ok:
            return BuildKitCli((cli, "buildx", "build", "--load"))
        version = proc.run([cli, "version", "--format", "{{.Client.Version}}"], timeout=20, env=env)
    except OSError:
        return None
    match = re.match(r"(\d+)\.", version.stdout.strip())
    if match and int(match.group(1)) < _CLI_WITHOUT_BUILTIN_BUILDKIT:
        return BuildKitCli((cli, "build"), (("DOCKER_BUILDKIT", "1"),))
    return None


def find_buildkit(
    client: EngineClient, environ: Mapping[str, str]
) -> tuple[BuildKitCli | None, str]:
    """A docker CLI that builds with BuildKit on this engine, or None and why not.

    The engine must have BuildKit (API 1.39+, Linux); the CLI either has the buildx plugin
    or is a CLI older than 23.0 (``DOCKER_BUILDKIT=1 docker build``), such as Debian's
    docker.io at /usr/bin/docker.
    """
    try:
        version = client.api.version()
    except docker.errors.APIError as exc:
        return None, f"the engine did not say its version: {api_message(exc)}"
    except TRANSPORT_ERRORS as exc:
        return None, f"the engine did not say its version: {first_line(str(exc))}"
    api = str(version.get("ApiVersion") or "0.0")
    try:
        major, minor = (int(x) for x in api.split(".")[:2])
    except ValueError:
        return None, f"the engine's API version {api!r} is not a version"
    if (major, minor) < (1, 39) or str(version.get("Os") or "linux") != "linux":
        return None, f"the engine (API {api}, {version.get('Os')}) has no BuildKit"
    if engine_kind(version) == "podman":
        # Podman's Docker API answers BuildKit's session upgrade with 404 ("failed to dial
        # gRPC: unable to upgrade to h2c"): its builds go through the classic API (buildah).
        return None, "Podman's Docker API has no BuildKit (it builds with buildah)"
    env = dict(environ)
    candidates: list[str] = []
    on_path = shutil.which("docker", path=env.get("PATH"))
    for cli in (on_path, _DEBIAN_CLI):
        if cli and cli not in candidates and os.access(cli, os.X_OK):
            candidates.append(cli)
    if not candidates:
        return None, "no docker CLI found (BuildKit is driven through it)"
    for cli in candidates:
        found = _probe_cli(cli, env)
        if found is not None:
            return found, ""
    return None, (
        f"no docker CLI here builds with BuildKit ({', '.join(candidates)}: no buildx plugin,"
        " and 23.0 or newer)"
    )


def _lines_then_close(stream: IO[bytes]) -> Iterator[bytes]:
    with stream:
        yield from stream


def build_image_buildkit(
    cli: BuildKitCli,
    context_dir: Path,
    environ: Mapping[str, str],
    *,
    on_line: Callable[[str], None] = lambda _line: None,
    nocache: bool = False,
    platform: str | None = None,
) -> BuildResult:
    """Build ``context_dir`` with BuildKit through ``cli`` on the host network, for
    ``platform`` (``docker build --platform``; None: the engine's own).

    Returns the image ID (untagged) read from ``--iidfile``; raises :class:`BuildFailed`
    naming the failing step. The CLI talks to the engine ``environ`` names (DOCKER_HOST).
    """
    start = time.monotonic()
    iidfile = context_dir.parent / (context_dir.name + ".iid")
    argv = [
        *cli.argv,
        "--progress=plain",
        "--network=host",
        "--iidfile",
        str(iidfile),
        "--file",
        str(context_dir / "Dockerfile"),
        *(["--no-cache"] if nocache else []),
        *(["--platform", platform] if platform else []),
        str(context_dir),
    ]
    env = {**environ, **dict(cli.env)}
    names: dict[int, str] = {}
    cached: set[int] = set()
    log: list[str] = []
    failed: tuple[int, str] | None = None
    base_vertices: set[int] = set()  # resolving the base image: "[internal] load metadata"
    noise = HeldNoise()
    try:
        with proc.spawn(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as child:
            assert child.stdout is not None
            for raw in _lines_then_close(child.stdout):
                line = raw.decode(errors="replace").rstrip()
                if not line:
                    continue
                log.append(line)
                for shown in noise.feed(line):
                    on_line(shown)
                m = _VERTEX_RE.match(line)
                if m and m.group(2).startswith("internal"):
                    if m.group(3).startswith("load metadata for "):
                        base_vertices.add(int(m.group(1)))
                elif m:
                    names.setdefault(int(m.group(1)), m.group(3))
                    continue
                m = _CACHED_RE.match(line)
                if m:
                    cached.add(int(m.group(1)))
                    continue
                m = _ERROR_RE.match(line)
                if m and failed is None:
                    failed = (int(m.group(1)), m.group(2))
            returncode = child.wait()
    except OSError as exc:
        raise BuildFailed(f"cannot run {cli.describe()}: {exc.strerror}") from None
    steps = tuple(
        BuildStep(number, instruction, cached=number in cached)
        for number, instruction in sorted(names.items())
    )
    try:
        image_id = iidfile.read_text(encoding="utf-8").strip() if returncode == 0 else ""
    except OSError:
        image_id = ""
    finally:
        iidfile.unlink(missing_ok=True)
    for shown in noise.finish(returncode == 0 and bool(image_id)):
        on_line(shown)
    if returncode != 0 or not image_id:
        if failed is not None:
            what = f"step {names.get(failed[0], '#' + str(failed[0]))[:80]}"
            reason = failed[1]
        else:
            what = "the build"
            reason = failure_reason(log)
        message = f"{what} failed (BuildKit): {first_line(reason)}"
        if base_stopped(what, failed, base_vertices, log):
            raise Unavailable(message, hint=BASE_UNAVAILABLE)  # a network problem: exit 4
        raise BuildFailed(message, hint="see the build output above")
    return BuildResult(image_id, time.monotonic() - start, steps, tuple(log))
