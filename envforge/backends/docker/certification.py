"""Certify an image: probe it in a container, issue and store the certificate, label it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image, label_image
from envforge.backends.docker.probe_target import DockerTarget
from envforge.backends.docker.projects import ProjectProbe
from envforge.container.devices import DeviceFlags, device_flags
from envforge.container.refs import CERTIFICATE_LABEL, bound_config
from envforge.core.sharing import sharing
from envforge.errors import InvalidInput
from envforge.evidence.evidence_store import record
from envforge.lock_variants import with_locked_variant
from envforge.probe.report import ProbeReport
from envforge.probe.runner import ProbeListener, ProbeTarget, run_probe
from envforge.probe.spec import GpuChecks, ProbeSpec
from envforge.publish.certificate import Certificate, CertificateStore, Signer, issue, sign
from envforge.recipe.model import Level, Recipe
from envforge.stack import Stack, stack_of

#: Runs a probe spec against a target (``envforge.probe.runner.run_probe``; tests pass a fake).
Prober = Callable[[ProbeSpec, ProbeTarget, "ProbeListener | None"], ProbeReport]


def _run_probe(spec: ProbeSpec, target: ProbeTarget, listener: ProbeListener | None) -> ProbeReport:
    return run_probe(spec, target, listener=listener)


@dataclass(frozen=True)
class Outcome:
    """The result of certifying one image."""

    certificate: Certificate
    report: ProbeReport
    #: ID of the image that carries the certificate label (only when the probe passed).
    certified_image: str | None
    stored_at: Path

    @property
    def passed(self) -> bool:
        return self.certificate.passed


def certify_image(
    client: EngineClient,
    recipe: Recipe,
    image: str,
    *,
    level: Level | None = None,
    step_timeout: float | None = None,
    require_free: float | None = None,
    gpu_checks: GpuChecks | None = None,
    listener: ProbeListener | None = None,
    store: CertificateStore | None = None,
    flags: DeviceFlags | None = None,
    prober: Prober | None = None,
    signer: Signer | None = None,
    stack: Stack | None = None,
    project: ProjectProbe | None = None,
) -> Outcome:
    """Probe ``image`` in a container (no network, recipe env, host device flags).

    The verdict is bound to the image's layer diff IDs and config (all of it but the
    certificate label), kept as evidence (pass or fail: :func:`record`, in ``store``),
    and on a pass a labelled image carrying it is made. Tags are the
    caller's business. With ``project``: its steps run after the recipe's, its folder
    mounted read-only and its variables (``PYTHONPATH``) set. With a ``signer`` the
    certificate is signed before it is stored or labelled (the private key itself goes
    nowhere). Raises :class:`Interrupted` on
    Ctrl-C (container removed first).
    """
    info = inspect_image(client, image)
    if info is None:
        raise InvalidInput(f"no image {image} on this engine", hint="envforge build RECIPE first")
    # the wheel variant its lock installs, if any, goes into the certificate's stack
    stack = with_locked_variant(recipe, stack_of(recipe) if stack is None else stack)
    skips = project.skip_imports if project else ()
    spec = ProbeSpec.from_recipe(
        recipe,
        level=level,
        step_timeout=step_timeout,
        stack=stack,
        checks=project.checks if project else (),
        skip_imports=skips,
    )
    spec = replace(spec, require_free=require_free)
    if gpu_checks is not None:  # the health step runs on this host, beside the container
        spec = gpu_checks.applied(spec)
    target = DockerTarget(
        client,
        info.id,
        flags if flags is not None else device_flags(recipe.gpu.vendor),
        mounts=project.mounts if project else (),
        env=project.env if project else {},
    )
    report = (prober or _run_probe)(spec, target, listener)
    cert = issue(
        # a node's name leaves the site only when it shares them (envforge.core.sharing)
        report=(report if sharing().node_names else report.without_node()).to_dict(),
        recipe_name=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        layers=info.layers,
        config=bound_config(info.config),
        candidate_id=info.id,
        stack=stack.to_dict(),
        skip_imports=skips,
    )
    if signer is not None:
        cert = sign(cert, signer)
    stored_at = record(cert, store=store)
    certified: str | None = None
    if cert.passed:
        certified = label_image(client, info.id, {CERTIFICATE_LABEL: cert.to_json()})
    return Outcome(cert, report, certified, stored_at)
