"""The Docker backend: recipe -> Dockerfile -> image -> certified tag; shells in containers.

It implements :class:`envforge.backends.Backend` with module-level functions:

* :func:`build`: render the Dockerfile, assemble a temporary build context, build, then
  (unless ``certify=False``) :func:`.pipeline.certify_and_tag`; returns a
  :class:`DockerBuildResult`;
* :func:`certify`: probe an existing image again (by default the recipe's certified tag);
* :func:`check`: the quick probe ``envforge shell --fallback`` runs before choosing;
* :func:`run`: a command in the recipe's certified image (``envforge shell``);
* :func:`serves` and :func:`describe`: can this engine run the recipe now, and where.

The pure values it works with (image references, device flags, cache volumes, CDI specs,
engine identity) live in :mod:`envforge.container`, shared with render and doctor.
:mod:`.client` declares the slice of the SDK client envforge uses as Protocols.
:mod:`.engine` (connect), :mod:`.images`, :mod:`.containers`, :mod:`.probe_target`,
:mod:`.shell` and :mod:`.certification` talk to the engine through the ``docker`` SDK.
This ``__init__`` is the backend's face: it imports none of them, so that importing it
does not load the SDK. Its functions delegate to :mod:`.pipeline` (which imports them
at its top), imported once, when the first of them runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envforge.backends.base import HostCheck, LineSink, Options
from envforge.backends.docker.options import DockerOptions, docker_options
from envforge.backends.docker.results import Certified, DockerBuildResult
from envforge.backends.flags.docker import CLI_OPTIONS, cli_options
from envforge.container.refs import certified_ref, split_ref
from envforge.core.lazy import LazyModule
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    from envforge.backends.docker.certification import Prober
    from envforge.backends.docker.client import EngineClient
    from envforge.host.detect import HostInfo
    from envforge.host.doctor import Finding

#: Imported when first used (it loads the ``docker`` SDK).
_pipeline = LazyModule("envforge.backends.docker.pipeline")
#: Imported for ``envforge doctor`` only.
_doctor = LazyModule("envforge.backends.docker.doctor")

#: The options of a call that gives none.
DEFAULT_OPTIONS = DockerOptions()


def build(
    recipe: Recipe,
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    client: EngineClient | None = None,
    prober: Prober | None = None,
) -> DockerBuildResult:
    """Render, build and (unless ``options.certify`` is False) certify and tag ``recipe``.

    The image is tagged ``envforge/RECIPE:STACK`` only when the probe passed. A failed
    probe is a result (``certified`` False; :meth:`Certified.failure` is the error to
    raise); a failed build raises :class:`BuildFailed`, a missing engine
    :class:`Unavailable`.
    """
    result: DockerBuildResult = _pipeline.build(recipe, options, client=client, prober=prober)
    return result


def certify(
    recipe: Recipe,
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    image: str | None = None,
    retag: Sequence[str] = (),
    client: EngineClient | None = None,
    prober: Prober | None = None,
) -> Certified:
    """Probe ``image`` (default: the recipe's certified tag) again; retag it on a pass.

    Every verdict goes to the evidence store (:func:`envforge.evidence.evidence_store.record`).
    Returns the verdict (a failed probe is a result, not an error: see
    :meth:`Certified.failure`).
    """
    certified: Certified = _pipeline.certify(
        recipe, options, image=image, retag=retag, client=client, prober=prober
    )
    return certified


def serves(recipe: Recipe, options: Options | DockerOptions = DEFAULT_OPTIONS) -> tuple[bool, str]:
    """Whether this backend can run ``recipe`` now: an engine answers and has its image."""
    answer: tuple[bool, str] = _pipeline.serves(recipe, options)
    return answer


def check(
    recipe: Recipe,
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    step_timeout: float = 30.0,
) -> str | None:
    """Quick probe of the recipe's certified image now; None on a pass, else why not."""
    problem: str | None = _pipeline.check(recipe, options, step_timeout=step_timeout)
    return problem


def run(
    recipe: Recipe,
    argv: Sequence[str],
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    client: EngineClient | None = None,
) -> int:
    """Run ``argv`` (default: bash) in the recipe's certified image (or ``options.image``).

    GPUs, the recipe's env and the cache volumes are passed in; the current directory is
    mounted at /workspace; the command's exit code is returned.
    """
    code: int = _pipeline.run(recipe, argv, options, client=client)
    return code


def runs_images() -> bool:
    """Yes: the environment is an image (a fleet plan names it per task)."""
    return True


def describe(recipe: Recipe) -> str:
    """The recipe's environment on this backend: its certified image."""
    return f"docker image {certified_ref(recipe.name, recipe.stack_tag)}"


def retag_for(ref: str) -> list[str]:
    """A tag given by name follows a new certificate; an ID or digest cannot."""
    return [ref] if split_ref(ref)[1] is not None else []


def findings(recipe: Recipe | None, host: HostInfo, check: HostCheck) -> list[Finding]:
    """What this backend needs of the host: an engine that answers, and a way for the
    recipe's GPUs into its containers (:mod:`.doctor`)."""
    del host  # the engine and the device path are read from check.root
    found: list[Finding] = _doctor.host_findings(recipe, check)
    return found


def disk_need(vendor: str) -> tuple[int, Path]:
    """Bytes an image build for ``vendor`` takes (ROCm base images are large), and the
    engine's data folder (this host's ``/var/lib/docker`` when there is one)."""
    need: tuple[int, Path] = _doctor.disk_need(vendor)
    return need


__all__ = [
    "CLI_OPTIONS",
    "Certified",
    "DockerBuildResult",
    "DockerOptions",
    "LineSink",
    "build",
    "certify",
    "check",
    "cli_options",
    "describe",
    "disk_need",
    "docker_options",
    "findings",
    "retag_for",
    "run",
    "runs_images",
    "serves",
]
