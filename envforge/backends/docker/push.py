"""Publish certified images to a registry, and verify published ones.

``publish`` pushes ``envforge/<recipe>:<stack tag>`` as ``REGISTRY/<recipe>:<stack tag>``
only when all of these hold (else :class:`PublishRefused`, exit 5):

* the image carries a certificate label that parses and whose digest matches its content;
* that certificate passed and names exactly the image's layer diff IDs and config (the
  whole config but the certificate label: :func:`image_binding`), and is of the current
  format (a format 1 certificate, which binds only the run config, is refused: certify
  again);
* this host's local certificate store holds a certificate for those layers and the newest
  one passed (so an image that a later ``envforge certify`` failed is not published);
* the certificate was issued for the recipe as it is now (same recipe hash);
* with ``require_signed``: the certificate is signed and the signature matches the key
  it names (:func:`envforge.publish.signing.check_signature`; *which* keys are trusted is the
  business of ``verify --trust``).

``verify`` pulls a reference and checks its certificate label against the pulled content.

Only the pure :mod:`envforge.container.refs` is imported at the top: the functions
that talk to the engine load :mod:`envforge.backends.docker.images` (and the SDK) when
they run (:func:`_images`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envforge.container.identity import engine_kind
from envforge.container.refs import (
    CERTIFICATE_LABEL,
    ImageInfo,
    bound_config,
    certified_ref,
    registry_ref,
    split_ref,
)
from envforge.core.lazy import LazyModule
from envforge.core.net import DEADLINE_ENV, Deadline, deadline_seconds
from envforge.errors import CertificationFailed, InvalidInput, PublishRefused
from envforge.publish.certificate import V1_PARTIAL, Certificate, CertificateStore, binding_problems
from envforge.publish.registry import remote_image
from envforge.publish.signing import check_signature
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    from envforge.backends.docker.client import EngineClient

#: Imported when an engine is talked to (it loads the ``docker`` SDK).
_images = LazyModule("envforge.backends.docker.images")


@dataclass(frozen=True)
class Published:
    ref: str
    digest: str
    certificate: str
    image_id: str
    signed_by: str | None = None

    @property
    def pinned_ref(self) -> str:
        """``REGISTRY/REPO@sha256:...``: the pushed manifest, immutable."""
        repo, _tag = split_ref(self.ref)
        return f"{repo}@{self.digest}"


@dataclass(frozen=True)
class Verified:
    ref: str
    image_id: str
    certificate: Certificate


def certificate_of(info: ImageInfo, *, what: str) -> Certificate:
    """The certificate a local image carries; :class:`CertificationFailed` when none is valid."""
    text = info.labels.get(CERTIFICATE_LABEL)
    if not text:
        raise CertificationFailed(
            f"{what} carries no certificate (label {CERTIFICATE_LABEL})",
            hint="only images made by envforge build/certify carry one",
        )
    return Certificate.from_json(text, source=f"the certificate of {what}")


def image_binding(cert: Certificate, info: ImageInfo) -> list[str]:
    """Why ``cert`` does not certify the image ``info`` (empty: it does): the one check
    ``publish``, ``verify`` and the Docker backend's every use of a certified image
    (:mod:`envforge.backends.docker.certified`) make."""
    return binding_problems(cert, info.layers, bound_config(info.config, cert.format))


def recipe_mismatch(cert: Certificate, recipe: Recipe, what: str) -> str | None:
    """The one line saying that ``cert`` certifies another recipe or stack than ``recipe``
    (None: it certifies this one): another recipe's certified image re-tagged over this
    one's tag matches its own certificate, and is still not this recipe's image."""
    if (cert.recipe_name, cert.stack_tag) == (recipe.name, recipe.stack_tag):
        return None
    return (
        f"{what} is certified for {cert.recipe_name} {cert.stack_tag}, "
        f"not {recipe.name} {recipe.stack_tag}"
    )


def other_version(cert: Certificate, recipe: Recipe, what: str) -> str | None:
    """The one line saying that ``cert`` was issued for another version of ``recipe``
    (its file or envforge's data changed since; None: the same version)."""
    if cert.recipe_hash == recipe.hash:
        return None
    return (
        f"{what} was certified for another version of recipe {recipe.name} "
        f"({cert.recipe_hash[:19]}, now {recipe.hash[:19]})"
    )


def older_format(cert: Certificate, what: str) -> str | None:
    """The one line that says ``cert`` binds only part of the image (None: it binds all)."""
    if cert.full_binding:
        return None
    return f"{what}: {V1_PARTIAL}"


def publishable(
    client: EngineClient, recipe: Recipe, store: CertificateStore, *, require_signed: bool = False
) -> tuple[ImageInfo, Certificate]:
    """The local certified image of ``recipe`` and its certificate, or :class:`PublishRefused`."""
    ref = certified_ref(recipe.name, recipe.stack_tag)
    hint = f"envforge build {recipe.name}"
    info = _images.inspect_image(client, ref)
    if info is None:
        raise PublishRefused(f"no certified image {ref} on this engine", hint=hint)
    try:
        cert = certificate_of(info, what=ref)
    except CertificationFailed as exc:
        raise PublishRefused(exc.message, hint=hint) from None
    problems = image_binding(cert, info)
    if problems:
        raise PublishRefused(f"{ref}: {problems[0]}", hint=hint)
    partial = older_format(cert, ref)
    if partial is not None:
        raise PublishRefused(partial, hint=f"envforge certify {recipe.name}")
    stale = recipe_mismatch(cert, recipe, ref) or other_version(cert, recipe, ref)
    if stale is not None:
        raise PublishRefused(stale, hint=hint)
    latest = store.latest_for(info.layers, recipe_name=recipe.name, recipe_hash=recipe.hash)
    if latest is None:
        raise PublishRefused(
            f"{ref}: no certificate for its content in this host's store ({store.root})",
            hint=f"envforge certify {recipe.name}",
        )
    if not latest.passed:
        raise PublishRefused(
            f"{ref}: the latest probe of this content on this host failed: "
            f"{latest.failing_step or 'probe'}",
            hint=f"fix the cause, then envforge certify {recipe.name}",
        )
    if require_signed:
        check = check_signature(cert.data)
        if check.state == "unsigned":
            raise PublishRefused(
                f"{ref}: its certificate is not signed (--require-signed)",
                hint=f"envforge certify {recipe.name} --signing-key PATH "
                "(or set ENVFORGE_SIGNING_KEY)",
            )
        if check.state == "invalid":
            raise PublishRefused(
                f"{ref}: its certificate's signature is not valid: {check.reason}",
                hint=f"envforge certify {recipe.name} --signing-key PATH",
            )
    return info, cert


def publish(
    client: EngineClient,
    recipe: Recipe,
    registry: str,
    *,
    store: CertificateStore | None = None,
    on_line: Callable[[str], None] = lambda _l: None,
    require_signed: bool = False,
    stall: float | None = None,
) -> Published:
    """Push ``recipe``'s certified image to ``registry``; the push ends (exit 4) when the
    engine reports no progress for ``stall`` seconds (default: ``ENVFORGE_NET_DEADLINE``,
    else 45)."""
    target = registry_ref(registry, recipe.name, recipe.stack_tag)
    info, cert = publishable(
        client, recipe, store or CertificateStore(), require_signed=require_signed
    )
    before = _images.inspect_image(client, target)
    _images.tag_image(client, info.id, target)
    try:
        result = _images.push(client, target, on_line=on_line, stall=_push_stall(client, stall))
    except BaseException:
        # a failed (or interrupted) push leaves the local registry tag as it was
        if before is not None and before.id != info.id:
            _images.tag_image(client, before.id, target)
        elif before is None:
            _images.untag(client, target)
        raise
    return Published(
        ref=target,
        digest=result.digest,
        certificate=cert.digest,
        image_id=info.id,
        signed_by=cert.signed_by,
    )


def verify_local(info: ImageInfo, ref: str) -> Verified:
    """Check a local image's certificate against its content; :class:`CertificationFailed`."""
    cert = certificate_of(info, what=ref)
    problems = image_binding(cert, info)
    if problems:
        raise CertificationFailed(f"{ref}: {'; '.join(problems)}")
    return Verified(ref=ref, image_id=info.id, certificate=cert)


def verify_remote(ref: str, *, deadline: float | None = None) -> Verified:
    """Verify ``ref`` where it is, with no engine: the registry's manifest and config blob
    (the certificate label, the layers' diff IDs, the config) through its HTTP API, all
    within ``deadline`` seconds (default: ``ENVFORGE_NET_DEADLINE``, else 45)."""
    return verify_local(remote_image(ref, deadline=Deadline.start(_stall(deadline))), ref)


#: Podman's Docker API says nothing while it compresses a layer before sending it (seen:
#: 45 s with no line for the cpu stack's torch layer on a loaded 2-core machine), where
#: Docker reports bytes as they go: its push may be silent this many times as long.
PODMAN_PUSH_STALL_FACTOR = 4.0


def _push_stall(client: EngineClient, given: float | None) -> float:
    """The push's no-progress deadline: :func:`_stall`, longer on Podman."""
    seconds = _stall(given)
    try:
        podman = engine_kind(client.api.version()) == "podman"
    except Exception:  # no version: the push itself then says what is wrong
        podman = False
    return seconds * PODMAN_PUSH_STALL_FACTOR if podman else seconds


def _stall(given: float | None) -> float:
    """Seconds: ``given``, else ``ENVFORGE_NET_DEADLINE``, else the default; a bad
    variable is exit 2 naming it."""
    try:
        return deadline_seconds(given)
    except ValueError as exc:
        raise InvalidInput(str(exc), hint=f"unset {DEADLINE_ENV} or pass --deadline") from None


def adopt(client: EngineClient, verified: Verified, recipe: Recipe) -> str:
    """Tag a pulled, verified image as ``recipe``'s certified image (so ``shell`` and
    ``certify`` use it by name); its tag. Refused (:class:`CertificationFailed`) when the
    certificate is for another recipe or another version of it."""
    cert = verified.certificate
    if cert.recipe_name != recipe.name or cert.recipe_hash != recipe.hash:
        raise CertificationFailed(
            f"{verified.ref} certifies recipe {cert.recipe_name} ({cert.recipe_hash[:19]}),"
            f" not this host's {recipe.name} ({recipe.hash[:19]})",
            hint=f"`envforge shell {recipe.name} --image {verified.ref}` runs it anyway",
        )
    target = certified_ref(recipe.name, recipe.stack_tag)
    _images.tag_image(client, verified.image_id, target)
    return target


def verify(
    client: EngineClient, ref: str, *, pull: bool = True, stall: float | None = None
) -> Verified:
    """Pull ``ref`` (unless ``pull`` is False) and verify it; the pull ends (exit 4) when
    the engine reports no progress for ``stall`` seconds (default as :func:`publish`)."""
    if pull:
        info = _images.pull(client, ref, stall=_stall(stall))
    else:
        found = _images.inspect_image(client, ref)
        if found is None:
            raise CertificationFailed(f"no image {ref} on this engine", hint="drop --no-pull")
        info = found
    return verify_local(info, ref)
