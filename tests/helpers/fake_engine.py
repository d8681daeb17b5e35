"""A fake Docker engine for unit tests, typed against ``EngineClient``.

It implements the Protocols of :mod:`envforge.backends.docker.client` (images, tags,
builds, pushes, pulls; containers and volumes only as far as creation goes) and keeps
what happened in plain lists for asserts. Errors are the SDK's own exception classes,
which is what the backend catches.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import docker.errors

from envforge.backends.docker.client import ContainerModel, VolumeModel

DEFAULT_LAYERS = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
DEFAULT_CONFIG: dict[str, Any] = {"Env": ["PATH=/opt/venv/bin:/usr/bin"], "Cmd": ["bash"]}


def image_attrs(
    image_id: str,
    *,
    layers: Iterable[str] = DEFAULT_LAYERS,
    config: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    tags: Iterable[str] = (),
) -> dict[str, Any]:
    """Inspect data as the engine returns it (``Image.attrs``)."""
    return {
        "Id": image_id,
        "RootFS": {"Layers": list(layers)},
        "Config": {
            **(config if config is not None else DEFAULT_CONFIG),
            "Labels": dict(labels or {}),
        },
        "RepoTags": list(tags),
    }


class FakeImage:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs


class FakeImages:
    """``client.images``: ``by_ref`` maps IDs and ``repo:tag`` names to inspect data."""

    def __init__(self) -> None:
        self.by_ref: dict[str, dict[str, Any]] = {}

    def add(self, attrs: dict[str, Any], *refs: str) -> None:
        for ref in (attrs["Id"], *refs):
            self.by_ref[ref] = attrs

    def get(self, name: str) -> FakeImage:
        if name not in self.by_ref:
            raise docker.errors.ImageNotFound(name)
        return FakeImage(self.by_ref[name])


class FakeApi:
    """``client.api``: records tags and pushes; ``build`` replays ``build_chunks``."""

    def __init__(self, images: FakeImages) -> None:
        self.images = images
        self.timeout: float = 60.0
        self.tags: list[tuple[str, str, str]] = []
        self.pushed: list[tuple[str, str | None]] = []
        self.pulled: list[tuple[str, str | None]] = []
        self.removed: list[str] = []
        self.builds: list[dict[str, Any]] = []
        self.build_chunks: list[dict[str, Any]] = []

    def tag(self, image: str, repository: str, tag: str | None = None, force: bool = False) -> bool:
        self.tags.append((image, repository, tag or "latest"))
        if image in self.images.by_ref:
            self.images.by_ref[f"{repository}:{tag or 'latest'}"] = self.images.by_ref[image]
        return True

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.builds.append(kwargs)
        fileobj = kwargs.get("fileobj")
        if fileobj is None or kwargs.get("custom_context"):  # a build of a context tar
            yield from self.build_chunks
            return
        # A label build: ``FROM <id>`` plus labels makes a new image with the same layers.
        base_id = re.sub(r"^FROM\s+", "", fileobj.read().decode().strip())
        base = self.images.by_ref[base_id]
        labels = dict(kwargs.get("labels") or {})
        seed = (base_id + repr(sorted(labels.items()))).encode()
        new_id = "sha256:" + hashlib.sha256(seed).hexdigest()
        config = {**base["Config"], "Labels": {**base["Config"].get("Labels", {}), **labels}}
        self.images.add({**base, "Id": new_id, "Config": config, "RepoTags": []})
        yield {"aux": {"ID": new_id}}

    def push(
        self, repository: str, tag: str | None = None, *, stream: bool, decode: bool
    ) -> Iterator[dict[str, Any]]:
        self.pushed.append((repository, tag))
        yield {"status": "Pushed", "id": "abc"}
        yield {"aux": {"Tag": tag, "Digest": "sha256:" + "9" * 64, "Size": 1}}

    def remove_image(self, image: str, force: bool = False, noprune: bool = False) -> object:
        self.removed.append(image)
        self.images.by_ref.pop(image, None)
        return None

    def pull(
        self, repository: str, tag: str | None = None, *, stream: bool, decode: bool
    ) -> Iterator[dict[str, Any]]:
        self.pulled.append((repository, tag))
        yield {"status": f"Pulling from {repository}"}

    def containers(
        self, *, all: bool = False, filters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The engine's container list: none (the fake keeps no containers listed)."""
        del all, filters
        return []

    def version(self) -> dict[str, Any]:
        """Docker 20.10 as far as identification goes, but an API without BuildKit (1.38),
        so builds take the classic path."""
        return {
            "ApiVersion": "1.38",
            "Os": "linux",
            "Components": [{"Name": "Engine", "Version": "20.10.24"}],
            "Version": "20.10.24",
        }

    def info(self) -> dict[str, Any]:
        return {"SecurityOptions": ["name=seccomp,profile=default"]}

    def attach(
        self,
        container: str,
        *,
        stdout: bool,
        stderr: bool,
        stream: bool,
        logs: bool,
        demux: bool,
    ) -> Iterator[tuple[bytes | None, bytes | None]]:
        return iter(())


class FakeContainers:
    """``client.containers``: nothing runs here; ``create`` refuses (tests fake the probe)."""

    def create(self, image: str, command: list[str], **kwargs: Any) -> ContainerModel:
        raise docker.errors.APIError("the fake engine runs no containers")

    def get(self, container_id: str) -> ContainerModel:
        raise docker.errors.NotFound(container_id)


class FakeVolume:
    def remove(self, force: bool = False) -> None:
        pass


class FakeVolumes:
    def __init__(self) -> None:
        self.names: list[str] = []

    def get(self, volume_id: str) -> VolumeModel:
        if volume_id not in self.names:
            raise docker.errors.NotFound(volume_id)
        return FakeVolume()

    def create(self, name: str, *, labels: Mapping[str, str]) -> VolumeModel:
        self.names.append(name)
        return FakeVolume()


class FakeEngine:
    """The fake ``DockerClient``: an ``EngineClient`` (mypy checks it where tests pass it)."""

    def __init__(self) -> None:
        self.images = FakeImages()
        self.api = FakeApi(self.images)
        self.containers = FakeContainers()
        self.volumes = FakeVolumes()
        self.closed = False

    def close(self) -> None:
        self.closed = True
