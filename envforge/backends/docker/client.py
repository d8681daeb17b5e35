"""The slice of the docker SDK's client that envforge uses, as Protocols (no SDK import).

Every engine-facing function in this package takes an :class:`EngineClient`. The real one
is ``docker.DockerClient`` (made by :func:`envforge.backends.docker.engine.connect`);
unit tests pass the fake in ``tests/helpers/fake_engine.py``, which implements these
Protocols and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol


class ImageModel(Protocol):
    """``docker.models.images.Image``: only its inspect data."""

    @property
    def attrs(self) -> dict[str, Any]: ...


class Images(Protocol):
    """``client.images``."""

    def get(self, name: str) -> ImageModel: ...


class ContainerModel(Protocol):
    """``docker.models.containers.Container``."""

    @property
    def id(self) -> str | None: ...

    @property
    def short_id(self) -> str: ...

    @property
    def attrs(self) -> dict[str, Any]: ...

    def put_archive(self, path: str, data: bytes) -> bool: ...

    def start(self) -> None: ...

    def wait(self, *, timeout: float | None = None) -> Mapping[str, Any]: ...

    def logs(self, *, stdout: bool = True, stderr: bool = True) -> bytes: ...

    def kill(self) -> None: ...

    def reload(self) -> None: ...

    def remove(self, *, force: bool = False, v: bool = False) -> None: ...


class Containers(Protocol):
    """``client.containers``."""

    def create(self, image: str, command: list[str], **kwargs: Any) -> ContainerModel: ...

    def get(self, container_id: str) -> ContainerModel: ...


class VolumeModel(Protocol):
    def remove(self, force: bool = False) -> None: ...


class Volumes(Protocol):
    """``client.volumes``."""

    def get(self, volume_id: str) -> VolumeModel: ...

    def create(self, name: str, *, labels: Mapping[str, str]) -> VolumeModel: ...


class LowLevelApi(Protocol):
    """``client.api``: the calls that stream (builds, pushes, pulls, attach)."""

    timeout: float

    def build(self, **kwargs: Any) -> Iterable[dict[str, Any]]: ...

    def tag(
        self, image: str, repository: str, tag: str | None = None, force: bool = False
    ) -> bool: ...

    def push(
        self, repository: str, tag: str | None = None, *, stream: bool, decode: bool
    ) -> Iterable[dict[str, Any]]: ...

    def pull(
        self, repository: str, tag: str | None = None, *, stream: bool, decode: bool
    ) -> Iterable[dict[str, Any]]: ...

    def remove_image(self, image: str, force: bool = False, noprune: bool = False) -> object: ...

    def containers(
        self, *, all: bool = False, filters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]: ...

    def version(self) -> dict[str, Any]: ...

    def info(self) -> dict[str, Any]: ...

    def attach(
        self,
        container: str,
        *,
        stdout: bool,
        stderr: bool,
        stream: bool,
        logs: bool,
        demux: bool,
    ) -> Iterator[tuple[bytes | None, bytes | None]]: ...


class EngineClient(Protocol):
    """``docker.DockerClient`` as envforge uses it."""

    @property
    def images(self) -> Images: ...

    @property
    def containers(self) -> Containers: ...

    @property
    def volumes(self) -> Volumes: ...

    @property
    def api(self) -> LowLevelApi: ...

    def close(self) -> None: ...
