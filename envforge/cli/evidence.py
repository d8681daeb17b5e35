"""``envforge evidence import|export``: move certification evidence between hosts.

``import PATH|REF...`` reads report folders, report files, ``*.jsonl`` bundles and images
in a registry (their certificate label, read from the image config through the registry's
HTTP API without pulling layers: :mod:`envforge.publish.registry`, and every signed
attestation attached to their digest: :mod:`envforge.evidence.attested`) into the local store
(:mod:`envforge.evidence.evidence_store`). ``export [--recipe R] -o FILE`` writes the store as a
redacted JSON-lines bundle that ``import`` and ``matrix --evidence`` read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envforge.cli.common import (
    OutputPath,
    echo_json,
    json_option,
    note,
    require_signed_option,
    say,
    signed_policy,
    trust_option,
    trusted_keys,
)
from envforge.container.refs import CERTIFICATE_LABEL
from envforge.core.fsutil import check_file_target, write_atomically
from envforge.core.jsonlimits import BadJSON, loads
from envforge.core.net import Deadline, NotAnswered, deadline_seconds
from envforge.core.sharing import sharing
from envforge.errors import EnvforgeError, InvalidInput, Unavailable
from envforge.evidence.attested import fetch, without_same_run
from envforge.evidence.evidence_store import export_lines, import_documents, read_store
from envforge.evidence.records import Problem, documents
from envforge.publish.registry import image_labels
from envforge.publish.signing import TrustList


@click.group("evidence")
def evidence() -> None:
    """Certification evidence: import reports and registry images, export bundles."""


def _is_ref(text: str) -> bool:
    """An image in a registry: not a path here, and its first part names a registry host
    (``HOST.DOMAIN``, ``HOST:PORT`` or ``localhost``), so that a mistyped folder never
    becomes a request to a public registry."""
    if Path(text).exists() or "/" not in text:
        return False
    host = text.split("/", 1)[0]
    return "." in host or ":" in host or host == "localhost"


def _registry_documents(
    source: str, budget: Deadline, trusted: TrustList, problems: list[Problem]
) -> tuple[list[tuple[str, Any]], Unavailable | None]:
    """An image's certificate (its label) and every attestation of its digest
    (:mod:`envforge.evidence.attested`), a run both record once; what could not be read
    is added to ``problems``, with the registry's failure when it did not answer."""
    try:
        label = image_labels(source, deadline=budget).get(CERTIFICATE_LABEL)
    except EnvforgeError as exc:
        problems.append(Problem(source, exc.one_line()))
        return [], exc if isinstance(exc, Unavailable) else None
    certificate: tuple[str, Any] | None = None
    if label:
        try:
            certificate = (source, loads(label))
        except BadJSON as exc:
            problems.append(Problem(source, f"its certificate label is not JSON: {exc}"))
    try:
        found = fetch(source, trusted, deadline=budget)
    except EnvforgeError as exc:
        said = f"its attestations could not be listed: {exc.one_line()}"
        if certificate is not None:  # the image is read: its certificate
            say(f"warning: {source}: {said}")
        elif problems and problems[-1].source == source:  # one line per image
            problems[-1] = Problem(source, f"{problems[-1].message}; {said}")
        else:
            problems.append(Problem(source, said))
        return ([certificate] if certificate else []), None
    problems.extend(found.problems)
    if not label and not found.documents and not found.problems:
        problems.append(
            Problem(source, f"carries no certificate ({CERTIFICATE_LABEL}) and no attestation")
        )
    return without_same_run(certificate, found.documents), None


@evidence.command("import")
@click.argument("sources", nargs=-1, required=True, metavar="PATH|REF...")
@click.option(
    "--deadline",
    type=click.FloatRange(min=0.1, max=86400),
    default=None,
    help="Seconds all registry reads together may take (default: $ENVFORGE_NET_DEADLINE, "
    "else 45); a registry that has not answered by then is skipped, named.",
)
@require_signed_option
@trust_option("Public key file of signers to trust (repeatable; default: $ENVFORGE_TRUSTED_KEYS).")
@json_option
def import_cmd(
    sources: tuple[str, ...],
    deadline: float | None,
    require_signed: bool,
    trust: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Add reports (folders, files, .jsonl bundles) and registry images' certificates
    and attestations (every one attached to the digest, each signature checked against
    the trusted keys) to the local evidence store. Exit 2 when nothing could be read
    (4: a registry did not answer, or answered what cannot be used: a redirect or token
    service elsewhere, too large, malformed). With --require-signed (or
    ENVFORGE_REQUIRE_SIGNED=1) only records signed by a trusted key are added; the rest
    are skipped, named. Without it each record says how it is signed (unsigned ones:
    unsigned)."""
    policy = signed_policy(require_signed, trust)
    try:
        budget = Deadline.start(deadline_seconds(deadline))
    except ValueError as exc:
        raise InvalidInput(str(exc), hint="pass --deadline SECONDS") from None
    problems: list[Problem] = []
    docs: list[tuple[str, object]] = []
    #: the first registry that did not answer, or answered what cannot be used (refused,
    #: too large, malformed): exit 4 naming it when nothing was read
    network: tuple[str, Unavailable] | None = None
    trusted = trusted_keys(trust) if any(_is_ref(s) for s in sources) else None
    for source in sources:
        if _is_ref(source):
            assert trusted is not None
            got, failed = _registry_documents(source, budget, trusted, problems)
            docs.extend(got)
            if failed is not None and network is None:
                network = (source, failed)
        elif Path(source).exists():
            docs.extend(documents([Path(source)], problems))
        else:
            problems.append(
                Problem(
                    source,
                    "no such file or folder, nor an image reference with a registry host "
                    "(HOST[:PORT]/REPO:TAG)",
                )
            )
    result = import_documents(
        docs,
        problems,
        refuse=lambda r: None if policy.counts(r.signer) else policy.refusal(r.signer),
    )
    for problem in result.problems:
        note(f"envforge: skipped {problem.line()}")
    if as_json:
        echo_json(
            {
                "added": len(result.added),
                "known": result.known,
                "skipped": [p.line() for p in result.problems],
                "records": [
                    {**r.to_export(), "signed": policy.label(r.signer)} for r in result.added
                ],
            }
        )
    else:
        for record in result.added:
            click.echo(
                f"added  {record.recipe or record.stack or '?'}  {record.outcome}  "
                f"{record.gpu.product or 'no GPU'}  {record.date}  {policy.label(record.signer)}"
            )
        note(
            f"{len(result.added)} added, {result.known} already in the store, "
            f"{len(result.problems)} skipped"
        )
    if not result.added and not result.known and network is not None:
        where, first = network
        said = "did not answer" if isinstance(first, NotAnswered) else "gave no usable answer"
        raise Unavailable(
            f"no evidence could be read; a registry {said}: {where}: {first.message}",
            hint=first.hint or "check the registry, or raise --deadline",
        )
    if not result.added and not result.known:
        raise InvalidInput(
            "no evidence could be read from " + ", ".join(sources),
            hint="name report folders, probe.json/certificate files, .jsonl bundles or "
            "images in a registry (HOST[:PORT]/REPO:TAG)",
        )


@evidence.command("export")
@click.option("--recipe", "recipe", metavar="RECIPE", default=None, help="Only this recipe.")
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    metavar="FILE",
    type=OutputPath(),
    help="The bundle to write (JSON lines, envforge.evidence/1), replaced atomically.",
)
@json_option
def export_cmd(recipe: str | None, out: Path, as_json: bool) -> None:
    """Write the local store's evidence as a shareable, redacted JSON-lines bundle.

    Node names are left out unless the site shares them (share_node_names)."""
    check_file_target(out, setting="-o")
    shared = sharing().node_names
    found = read_store()
    lines = list(export_lines(found.records, recipe=recipe, node=shared))
    write_atomically(out, "".join(line + "\n" for line in lines), setting="-o")
    if as_json:
        echo_json({"file": str(out), "records": len(lines), "recipe": recipe, "node_names": shared})
        return
    click.echo(f"wrote {out}: {len(lines)} record{'' if len(lines) == 1 else 's'}")
