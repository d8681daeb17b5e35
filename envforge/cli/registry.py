"""``envforge verify`` and ``envforge pull``: certified images by name, on any machine.

``verify REF`` reads the image where it is, through the registry's HTTP API (manifest and
config blob: no engine needed); ``--pull`` pulls it into the engine and checks that copy;
``--no-pull`` checks the engine's local image. ``pull REF`` pulls, verifies and tags the
image as its recipe's certified image, so ``shell RECIPE`` and ``certify RECIPE`` use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.backends.docker.push import adopt, older_format, verify, verify_remote
from envforge.cli.common import (
    deadline_option,
    echo_json,
    json_option,
    load_checked,
    note,
    trust_option,
    trusted_files,
)
from envforge.core import paths
from envforge.core.net import Deadline
from envforge.errors import CertificationFailed, InvalidInput
from envforge.host.detect import detect
from envforge.publish.signing import TrustList, load_trust, require_trusted, short

if TYPE_CHECKING:
    from envforge.backends.docker.client import EngineClient
    from envforge.backends.docker.push import Verified
    from envforge.publish.admission import Admission

_DEADLINE_HELP = (
    "Seconds the registry reads may take together; a pull ends when the engine reports "
    "no progress for this long (exit 4, naming it)."
)
_TRUST_HELP = (
    "Require a signature by a key in this public key file (repeatable; default: "
    "$ENVFORGE_TRUSTED_KEYS, os.pathsep-separated)."
)


@click.command("verify")
@click.argument("ref", metavar="REF")
@click.option("--pull", "pull", is_flag=True, help="Pull REF into the engine and verify that copy.")
@click.option(
    "--no-pull",
    "local",
    is_flag=True,
    help="Verify the engine's local image REF; read no registry.",
)
@trust_option(_TRUST_HELP)
@deadline_option(_DEADLINE_HELP)
@json_option
def verify_cmd(
    ref: str,
    *,
    pull: bool,
    local: bool,
    trust: tuple[Path, ...],
    deadline: float,
    as_json: bool,
) -> None:
    """Check that REF's certificate passed and matches its content (exit 0/1).

    By default REF is read in its registry through the HTTP API (manifest and config blob,
    no layers, no engine). Content is the layers and the whole image config but the
    certificate label. A certificate of the older format 1 (it binds only the run config)
    is said to be older, and refused with trusted keys.

    With trusted keys (--trust or ENVFORGE_TRUSTED_KEYS) the certificate must also be
    signed by one of them (exit 1 when unsigned, signed by another key, or altered).
    """
    if pull and local:
        raise InvalidInput("--pull and --no-pull exclude each other", hint="give one")
    trusted = _trusted(trust)
    if pull or local:
        client = _connect()
        try:
            result = verify(client, ref, pull=pull, stall=deadline)
        finally:
            client.close()
    else:
        result = verify_remote(ref, deadline=deadline)
    _report(result, trusted, as_json)


@click.command("pull")
@click.argument("ref", metavar="REF")
@trust_option(_TRUST_HELP)
@deadline_option(_DEADLINE_HELP)
@json_option
def pull_cmd(ref: str, trust: tuple[Path, ...], deadline: float, as_json: bool) -> None:
    """Pull a certified image, verify it, and tag it as its recipe's certified image.

    The certificate (and, with trusted keys, its signature) is checked like `verify`;
    the image is then tagged envforge/RECIPE:STACK, so `shell RECIPE` and `certify
    RECIPE` use it. Refused (exit 1) when it does not verify or certifies another version
    of the recipe than this host's.

    With trusted keys the pulled digest must also carry an attestation (attached in its
    registry) signed by one of them that records a pass on this host's arch; the line
    names the one that admitted it, and the verified ones are kept for `shell`."""
    trusted = _trusted(trust)
    client = _connect()
    try:
        result = verify(client, ref, pull=True, stall=deadline)
        signature, _name = _signature(result, trusted)
        admitted = _admission(ref, result.image_id, trusted, deadline) if trusted else None
        tag = adopt(client, result, load_checked(result.certificate.recipe_name))
    finally:
        client.close()
    if admitted is not None:
        note(admitted.line())
    if as_json:
        echo_json(
            {
                "ref": ref,
                "tag": tag,
                "image": result.image_id,
                "certificate": result.certificate.digest,
                "signature": signature,
                "admitted_by": admitted.admitted_by.to_dict()
                if admitted is not None and admitted.admitted_by is not None
                else None,
            }
        )
        return
    note(f"{ref} verified ({signature}); tagged {tag}")
    click.echo(tag)


def _connect() -> EngineClient:
    """The engine's client (the Docker SDK is loaded here, not by ``verify REF``)."""
    from envforge.backends.docker.engine import connect  # noqa: PLC0415 - loads the SDK

    return connect()


def _admission(ref: str, image_id: str, trusted: TrustList, deadline: float) -> Admission:
    """The attestations attached to ``ref``'s digest, checked against ``image_id`` (the
    pulled image's config digest) and this host's archs; the verified ones kept."""
    from envforge.publish import admission, referrers  # noqa: PLC0415 - pull --trust only

    limit = Deadline.start(deadline)
    where = referrers.pinned(ref, deadline=limit)
    raw = referrers.envelopes_of(where, deadline=limit)
    checks = admission.check_raw(raw, trusted, image_id, source=where)
    if any(c.ok for c in checks):
        admission.keep_received(paths.state_dir(), image_id, raw, checks)
    return admission.require(where, checks, admission.host_archs(g.arch for g in detect().gpus))


def _trusted(trust: tuple[Path, ...]) -> TrustList:
    files, setting = trusted_files(trust)
    if not files:
        return TrustList()
    return load_trust(files, setting=setting)


def _signature(result: Verified, trusted: TrustList) -> tuple[str, str]:
    """How the certificate is signed, in words, and the trusted signer's name; refuses
    (exit 1) an older partial certificate or a missing/untrusted signature with keys."""
    cert = result.certificate
    partial = older_format(cert, result.ref)
    if partial is not None and trusted:
        raise CertificationFailed(
            f"{partial}: a trusted signature over it does not vouch for the rest",
            hint="ask its publisher to certify it again with this envforge",
        )
    if partial is not None:
        note(f"note: {partial}; certify it again for a full binding")
    if trusted:
        key = require_trusted(cert.data, trusted, what=result.ref)
        return f"signed by {key.label} (trusted)", key.name
    if cert.signed_by:
        return f"signed by {short(cert.signed_by)} (not checked: no trusted keys given)", ""
    return "unsigned", ""


def _report(result: Verified, trusted: TrustList, as_json: bool) -> None:
    signature, signer_name = _signature(result, trusted)
    cert = result.certificate
    if as_json:
        data: dict[str, Any] = {
            "ref": result.ref,
            "ok": True,
            "image": result.image_id,
            "certificate": cert.digest,
            "recipe": cert.recipe_name,
            "stack": cert.stack_tag,
            "layers": len(cert.layers),
            "certificate_format": cert.format,
            "full_binding": cert.full_binding,
            "signed_by": cert.signed_by,
            "signer_name": signer_name or None,
            "trusted": bool(trusted) or None,
        }
        echo_json(data)
        return
    click.echo(
        f"ok  {result.ref}: certified ({cert.report.get('level', '?')} probe passed) for "
        f"{cert.recipe_name} {cert.stack_tag}; {len(cert.layers)} layers match "
        f"certificate {cert.digest[:19]}; {signature}"
    )
