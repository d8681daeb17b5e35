"""Images on the engine: inspect, build (context and output parsing), label, tag, push, pull."""

from __future__ import annotations

import io
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import docker.errors

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.engine import TRANSPORT_ERRORS, api_message, first_line
from envforge.backends.docker.refs import ImageInfo, split_ref
from envforge.errors import BuildFailed, InvalidInput, PublishRefused, Unavailable


def inspect_image(client: EngineClient, ref: str) -> ImageInfo | None:
    """The local image named ``ref`` (tag or ID), or None when there is none."""
    try:
        return ImageInfo.from_attrs(client.images.get(ref).attrs)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
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


def build_image(
    client: EngineClient,
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
        raise BuildFailed(f"the engine refused the build: {api_message(exc)}") from None
    except TRANSPORT_ERRORS as exc:
        raise BuildFailed(f"build failed: {first_line(str(exc))}") from None
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
            f"{failing} failed: {first_line(error or 'no image was produced')}", hint=hint
        )
    if not image_id.startswith("sha256:"):
        image = inspect_image(client, image_id)
        if image is not None:
            image_id = image.id
    return BuildResult(image_id, time.monotonic() - start, tuple(steps), tuple(log))


def label_image(
    client: EngineClient, image_id: str, labels: Mapping[str, str]
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


def push(
    client: EngineClient, ref: str, *, on_line: Callable[[str], None] = lambda _l: None
) -> PushResult:
    """Push ``ref`` (REGISTRY/REPO:TAG); returns the manifest digest the registry reported."""
    repo, tag = split_ref(ref)
    digest: str | None = None
    try:
        for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise PublishRefused(
                    f"push of {ref} failed: {first_line(str(chunk['error']))}",
                    hint="check that the registry answers and accepts pushes",
                )
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
            status = chunk.get("status")
            if digest is None and isinstance(status, str):
                digest = digest_in_status(status)
            if status:
                on_line(f"{chunk.get('id', '')} {status}".strip())
    except TRANSPORT_ERRORS as exc:
        raise PublishRefused(f"push of {ref} failed: {first_line(str(exc))}") from None
    if digest is None:
        raise PublishRefused(f"push of {ref} reported no digest")
    return PushResult(ref, digest)


def pull(client: EngineClient, ref: str) -> ImageInfo:
    """Pull ``ref`` (tag or ``@sha256:`` digest) and return the local image."""
    repo, tag = split_ref(ref)
    try:
        if "@" in repo:
            client.api.pull(repo)
        else:
            client.api.pull(repo, tag=tag or "latest")
    except docker.errors.APIError as exc:
        raise Unavailable(
            f"cannot pull {ref}: {api_message(exc)}", hint="check the reference and the registry"
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise Unavailable(f"cannot pull {ref}: {first_line(str(exc))}") from None
    info = inspect_image(client, ref)
    if info is None:
        raise Unavailable(f"pulled {ref} but the engine does not show it")
    return info
