"""The Docker backend's options: its flags, and its view of a command's options value."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envforge.backends.base import LineSink, Options
from envforge.probe.runner import ProbeListener
from envforge.publish.signing import load_signer
from envforge.recipe.model import Level

if TYPE_CHECKING:
    from envforge.backends.base import Admit
    from envforge.container.devices import GpuPick
    from envforge.probe.spec import GpuChecks
    from envforge.project.model import Project
    from envforge.publish.certificate import Signer

Say = Callable[[str], None]


class _Discard:
    def __call__(self, line: str) -> None:
        pass

    def close(self) -> None:
        pass


def _quiet(_text: str) -> None:
    pass


@dataclass(frozen=True)
class DockerOptions:
    """How to build, certify and run (none of this is part of the recipe hash)."""

    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    level: Level | None = None
    step_timeout: float | None = None
    #: ``--require-free GIB``: the probe's memory step fails below GIB free on a GPU.
    require_free: float | None = None
    #: The probe's health and collective steps (None: neither).
    gpu_checks: GpuChecks | None = None
    #: Also tag the certified image (or, with ``certify=False``, the built one).
    tags: tuple[str, ...] = ()
    #: Build FROM this image instead of the recipe's.
    base_image: str | None = None
    #: A registry prefix the recipe's Docker Hub base image is pulled through (checked).
    base_image_mirror: str | None = None
    #: The index mirror setting's text (see :class:`~envforge.backends.base.Options`).
    index_mirror: str | None = None
    no_cache: bool = False
    #: ``auto`` (BuildKit when a docker CLI here drives it, else the classic builder),
    #: ``buildkit`` or ``classic``; None: ``ENVFORGE_BUILDER`` from ``environ``, else auto.
    builder: str | None = None
    #: ``uv`` (pip where uv cannot run in the base image) or ``pip`` only.
    installer: str = "uv"
    #: Install the recipe's lock file (hashes required) when one matches the recipe.
    use_lock: bool = True
    #: False: build only; no probe, no certified tag.
    certify: bool = True
    #: Write probe.json, probe.junit.xml and certificate.json here.
    report_dir: Path | None = None
    #: ``run``: this image instead of the recipe's certified one.
    image: str | None = None
    #: GPU containers: a private /dev/shm of this size instead of host IPC (None: host IPC).
    shm_size: str | None = None
    #: Base environment for finding the engine (DOCKER_HOST, DOCKER_CONTEXT).
    environ: Mapping[str, str] | None = None
    listener: ProbeListener | None = None
    #: Signs each certificate (:class:`envforge.publish.signing.SigningKey`); None: unsigned.
    signer: Signer | None = None
    output: LineSink = field(default_factory=_Discard)
    say: Say = field(default=_quiet)
    #: ``--gpu``: only these GPUs in the container (None: all of the recipe's vendor).
    gpus: GpuPick | None = None
    #: ``--platform``: build the image for ``linux/amd64`` / ``linux/arm64`` (the rendered
    #: Dockerfile's FROM names it); None: the engine's own platform.
    platform: str | None = None
    #: ``--project DIR``: the project's image (its lock's packages on the recipe's layers,
    #: its checks certified, tagged for the project; see :mod:`.projects`).
    project: Project | None = None
    #: ``shell`` with trusted keys: the image must be admitted (:data:`.base.Admit`).
    admit: Admit | None = None


def docker_options(options: Options | DockerOptions) -> DockerOptions:
    """This backend's view of a command's :class:`~envforge.backends.base.Options` (the
    signing key is loaded here, before any work, unless nothing is certified)."""
    if isinstance(options, DockerOptions):
        return options
    extra = options.extra
    certify = not extra.get("no_certify", False)

    return DockerOptions(
        wheelhouse=options.wheelhouse,
        ca_bundle=options.ca_bundle,
        level=options.level,
        step_timeout=options.step_timeout,
        require_free=options.require_free,
        gpu_checks=options.gpu_checks,
        tags=tuple(extra.get("tags", ())),
        base_image=extra.get("base_image"),
        base_image_mirror=extra.get("base_image_mirror"),
        index_mirror=options.index_mirror,
        no_cache=bool(extra.get("no_cache", False)),
        builder=extra.get("builder"),
        certify=certify,
        report_dir=options.report_dir,
        image=extra.get("image"),
        shm_size=extra.get("shm_size"),
        listener=options.listener,
        signer=load_signer(options.signing_key, say=options.say) if certify else None,
        environ=options.environ,
        output=options.output or _Discard(),
        say=options.note,
        gpus=options.gpus,
        platform=extra.get("platform"),
        project=options.project,
        admit=options.admit,
    )
