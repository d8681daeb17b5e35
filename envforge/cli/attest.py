"""``attest verify`` and the ``--attest FILE`` of ``build`` and ``certify``: signed in-toto
attestations of certifications (formats: :mod:`envforge.publish.attestation`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from envforge.backends.venv.attesting import attestations_file, certified
from envforge.cli.common import (
    echo_json,
    json_option,
    load_signer,
    note,
    say,
    trust_option,
    trusted_files,
)
from envforge.core import paths
from envforge.core.fsutil import check_file_target
from envforge.core.jsonlimits import loads
from envforge.core.lazy import LazyModule
from envforge.errors import CertificationFailed, InvalidInput
from envforge.evidence.redact import Redactor
from envforge.publish import attestation as at
from envforge.publish.attest_verify import check_envelope, check_file, describe, tally
from envforge.publish.attestation import append, manifest_subject
from envforge.publish.referrers import attach, envelopes_of, pinned
from envforge.publish.registry import remote_image
from envforge.publish.signing import load_trust
from envforge.stack import stack_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from envforge.publish.attest_verify import Checked, Tally
    from envforge.publish.attestation import Subject
    from envforge.publish.dsse import Envelope
    from envforge.publish.signing import SigningKey
    from envforge.recipe.model import Recipe

F = TypeVar("F", bound=Callable[..., Any])

#: Only ``attest check --image`` asks the engine: a venv build loads no Docker SDK.
_docker_engine = LazyModule("envforge.backends.docker.engine")
_docker_images = LazyModule("envforge.backends.docker.images")


def attest_option(func: F) -> F:
    """``--attest FILE``: also append each certification's attestation to FILE."""
    return click.option(
        "--attest",
        "attest_file",
        type=click.Path(path_type=Path),
        metavar="FILE",
        default=None,
        help="Also append each certification's signed in-toto attestation to FILE "
        "(.intoto.jsonl; needs --signing-key).",
    )(func)


def attach_option(func: F) -> F:
    """``certify IMAGE --attach``: attach the attestation to the image's registry digest."""
    return click.option(
        "--attach",
        is_flag=True,
        help="Attach each certification's signed attestation to the image's digest in its "
        "registry, as an OCI referrer (IMAGE refs of a registry; needs --signing-key).",
    )(func)


def check_attest(attest_file: Path | None, signing_key: Path | None, attach: bool = False) -> None:
    """Before any work: ``--attest`` and ``--attach`` need a key, and FILE must be a file
    one can write."""
    if attest_file is None and not attach:
        return
    if signing_key is None or not str(signing_key):
        what = f"--attest {attest_file}" if attest_file is not None else "--attach"
        raise InvalidInput(
            f"{what}: an attestation is signed, and no signing key is given",
            hint="add --signing-key KEY (or set ENVFORGE_SIGNING_KEY); "
            "envforge keys generate -o DIR makes one",
        )
    if attest_file is not None:
        check_file_target(attest_file, setting="--attest")


def _docker_envelope(
    certified: Any, key: SigningKey, *, probed: bool = False, also: Sequence[Subject] = ()
) -> tuple[Envelope, Path]:
    """The attestation of a Docker certification, and the store file it goes to; its
    subject is the certified image (the probed one with its certificate label), or with
    ``probed`` the image the probe ran in as it was (a pulled image, its registry digest
    unchanged)."""
    cert = certified.outcome.certificate
    candidate = cert.candidate
    image = candidate if probed else certified.outcome.certified_image or candidate
    subject = at.image_subject(certified.certified_tag, image)
    pred = at.predicate(
        report=cert.report,
        backend="docker",
        recipe={"name": cert.recipe_name, "hash": cert.recipe_hash, "stack_tag": cert.stack_tag},
        stack=cert.data.get("stack"),
        certificate=cert.digest,
        redact=Redactor.for_this_host(),
    )
    envelope = at.attest(subject, pred, key, also)
    target = at.store_path(paths.state_dir() / "attestations", subject)
    at.append(target, envelope, setting="the attestation store")
    return envelope, target


def _venv_envelope(venv: Path, recipe: Recipe, key: SigningKey) -> tuple[Envelope, Path]:
    """The attestation of a venv's certification, kept in its ``.envforge`` folder."""
    subject, cert = certified(venv)
    pred = at.predicate(
        report=cert.get("report") or {},
        backend="venv",
        recipe={
            "name": str(cert.get("recipe")),
            "hash": str(cert.get("recipe_hash")),
            "stack_tag": recipe.stack_tag,
        },
        stack=stack_of(recipe).to_dict(),
        redact=Redactor.for_this_host(),
    )
    envelope = at.attest(subject, pred, key)
    target = attestations_file(venv)
    at.keep_for_subject(target, envelope, subject)
    return envelope, target


def attest_result(
    result: Any,
    recipe: Recipe,
    signing_key: Path | None,
    attest_file: Path | None,
    *,
    attach_to: str | None = None,
) -> None:
    """Sign the attestation of a build's or certify's result (a signing key configured);
    it goes to the store (Docker) or the venv's ``.envforge`` folder, and to
    ``attest_file``; with ``attach_to`` (a registry image that was certified), to that
    image's digest as a referrer. Nothing without a key or a certification."""
    if signing_key is None or not str(signing_key):
        return

    key = load_signer(signing_key)
    if key is None:
        return
    certified = getattr(result, "certification", result)  # a DockerBuildResult holds one
    if certified is not None and hasattr(certified, "outcome"):
        registry_names: list[Subject] = []
        if attach_to is not None:  # the registry's manifest digest is named too
            attach_to = pinned(attach_to)
            registry_names.append(manifest_subject(attach_to))
        envelope, kept = _docker_envelope(
            certified, key, probed=attach_to is not None, also=registry_names
        )
        if attach_to is not None:
            attach_certified(attach_to, envelope)
    elif hasattr(result, "interpreter") and result.certified and result.report is not None:
        envelope, kept = _venv_envelope(Path(result.path), recipe, key)
    else:  # nothing certified now (a venv up to date keeps the attestations it has)
        return
    if attest_file is not None:
        append(attest_file, envelope)
    also = f" and {attest_file}" if attest_file is not None else ""
    say(f"attestation signed by {key.public.label}: {kept}{also}")


# --------------------------------------------------------------------------- attest verify


@click.group()
def attest() -> None:
    """Signed in-toto attestations of certifications: check them (signature, subject)."""


def _image_id(ref: str) -> str:
    client = _docker_engine.connect()
    try:
        info = _docker_images.inspect_image(client, ref)
    finally:
        client.close()
    if info is None:
        raise InvalidInput(
            f"--image {ref}: no such image on this engine",
            hint="pull or build it first, or give --subject sha256:HEX",
        )
    return str(info.id)


def _expected(subject: str | None, image: str | None) -> str | None:
    if subject and image:
        raise InvalidInput("--subject and --image exclude each other", hint="give one")
    if image:
        return _image_id(image)
    if subject is None:
        return None
    value = subject.split(":", 1)[-1]
    if len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value):
        raise InvalidInput(
            f"--subject {subject}: not a sha256 digest",
            hint="give sha256:<64 hex digits>, e.g. the image ID",
        )
    return "sha256:" + value


def _looks_like_ref(path: Path) -> bool:
    """``HOST[:PORT]/REPO…`` (no such file here): a registry host first, or a digest."""
    text = str(path)
    host = text.split("/", 1)[0]
    hosty = ":" in host or host == "localhost" or ("." in host and not host.startswith("."))
    return "/" in text and (hosty or "@" in text) and not path.exists()


def _registry_checks(ref: str, trust: Any, expected: str | None) -> list[Checked]:
    """Every attestation attached to ``ref``'s digest in its registry; the subject they
    must name is the image's ID there (its config digest) unless given."""
    where = pinned(ref)
    subject = expected or remote_image(where).id
    found = envelopes_of(where)
    if not found:
        raise CertificationFailed(
            f"{where}: no attestation is attached to this digest",
            hint="publish from a host that attested it (--signing-key)",
        )
    return [
        check_envelope(raw, trust, subject, source=f"{where} #{number}")
        for number, raw in enumerate(found, 1)
    ]


def _checks(path: Path, trust: Any, expected: str | None) -> list[Checked]:
    if _looks_like_ref(path):
        return _registry_checks(str(path), trust, expected)
    if path.is_dir():
        subject, _cert = certified(path)
        return check_file(attestations_file(path), trust, subject.digest)
    if expected is None:
        raise InvalidInput(
            f"{path}: which image the attestations must be about is not given",
            hint="add --subject sha256:HEX (the image ID) or --image REF",
        )
    return check_file(path, trust, expected)


@attest.command("verify")
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="FILE|VENV|REF..."
)
@trust_option("Trust file of envforge.pub lines (repeatable; default: $ENVFORGE_TRUSTED_KEYS).")
@click.option(
    "--subject",
    metavar="sha256:HEX",
    default=None,
    help="The image ID a FILE's attestations must name as their subject.",
)
@click.option(
    "--image", metavar="REF", default=None, help="As --subject, the ID of this image on the engine."
)
@click.option(
    "--arch",
    metavar="ARCH",
    default=None,
    help="Admission: exit 0 when one verified attestation passed on ARCH (cpu: "
    "no GPU); refused ones are listed but do not count.",
)
@json_option
def verify_cmd(  # noqa: PLR0917 - click passes options positionally by name
    paths: tuple[Path, ...],
    trust: tuple[Path, ...],
    subject: str | None,
    image: str | None,
    arch: str | None,
    as_json: bool,
) -> None:
    """Check attestation files (or a venv's) against trusted keys, subject and schema.

    REF (HOST[:PORT]/REPO:TAG or @sha256:...): every attestation attached to the image's
    digest in its registry, about the image's ID there. Lists each attestation (pass/FAIL,
    recipe, arch, host, signer; REFUSED with why), then how many, from how many hosts and
    archs, and what passed. Exit 1 when one is refused (no trusted signature, another
    subject, a predicate outside the schema) or none records a pass; with --arch, when
    none passed on that arch.
    """
    files, setting = trusted_files(trust)
    if not files:
        raise InvalidInput(
            "attest verify needs trusted keys to check signatures against",
            hint="add --trust envforge.pub (or set ENVFORGE_TRUSTED_KEYS)",
        )
    trusted = load_trust(files, setting=setting)
    expected = _expected(subject, image)
    checks = [c for path in paths for c in _checks(path, trusted, expected)]
    counts = tally(checks)
    if as_json:
        echo_json({"attestations": [c.to_dict() for c in checks], "summary": counts.to_dict()})
    else:
        for check in checks:
            click.echo(describe(check))
        note(counts.line())
    _verdict(checks, counts, arch)


def _verdict(checks: Sequence[Checked], counts: Tally, arch: str | None) -> None:
    """Exit 1 (:class:`CertificationFailed`) unless the attestations say yes: all verified
    and one passed; with ``arch``, one verified pass on that arch."""
    if arch is not None:
        if any(c.passed and arch in c.archs for c in checks):
            return
        seen = sorted({a for c in checks if c.passed for a in c.archs})
        raise CertificationFailed(
            f"none of {counts.total} attestation(s) is a trusted pass on {arch}"
            + (f" (passes on: {', '.join(seen)})" if seen else ""),
            hint="certify the image on a host with that GPU (certify REF --attach)",
        )
    refused = counts.total - counts.verified
    if refused or not counts.passed:
        raise CertificationFailed(
            f"{refused} of {counts.total} attestation(s) refused"
            if refused
            else f"none of {counts.total} attestation(s) records a pass",
            hint="see the lines above; only attestations signed by a --trust key count",
        )


def attach_published(
    pinned_ref: str, image_id: str, key: SigningKey | None = None
) -> dict[str, Any] | None:
    """After ``publish``: the attestations this host made of the image (the store's
    file for its image ID) attached to the pushed digest as OCI referrers; None when
    there are none. With ``key``, each statement names the pushed manifest digest too
    and is signed again with it (what cosign-style verifiers compare); without, they go
    as they were made (about the image ID)."""
    try:
        subject = at.image_subject("", image_id)
    except ValueError:
        return None
    raw = at.read_raw(at.store_path(paths.state_dir() / "attestations", subject), missing_ok=True)
    if not raw:
        return None
    if key is not None:
        extra = at.manifest_subject(pinned_ref)
        raw = [
            r if e is None else e.to_dict()
            for r, e in ((r, at.resigned(r, extra, key)) for r in raw)
        ]
    envelopes = [json.dumps(r, separators=(",", ":"), sort_keys=True).encode() for r in raw]
    done = attach(pinned_ref, envelopes)
    how = (
        "the registry's referrers API"
        if done.via == "api"
        else f"the referrers tag {done.tag[:19]}…"
    )
    say(f"attached {len(done.digests)} attestation(s) to {pinned_ref} ({how})")
    return {
        "attached": len(done.digests),
        "via": done.via,
        "tag": done.tag,
        "manifests": list(done.digests),
    }


def attach_certified(ref: str, envelope: Envelope) -> dict[str, Any]:
    """``certify REF --attach``: ``envelope`` (about the image certified here) attached
    to REF's digest in its registry, once the registry's image is known to be that one
    (its config digest is the attestation's subject)."""
    where = pinned(ref)
    there = remote_image(where).id
    subjects = at.subjects_of(loads(envelope.payload))
    if there.split(":", 1)[-1] not in (s.sha256 for s in subjects):
        raise InvalidInput(
            f"{ref}: the registry's image ({there[:19]}) is not the one certified here "
            f"({subjects[0].digest[:19]}); nothing was attached",
            hint="pull REF again and certify what it names now",
        )
    done = attach(where, [at.envelope_line(envelope).strip().encode()])
    how = "the registry's referrers API" if done.via == "api" else f"the tag {done.tag[:19]}…"
    say(f"attached the attestation to {where} ({how})")
    return {"attached": len(done.digests), "via": done.via, "tag": done.tag}
