"""``envforge matrix``: the certified-on matrix as a static site (``index.html`` + ``matrix.json``).

Evidence comes from ``--evidence PATH`` (repeatable: folders, searched recursively, report
files, ``*.jsonl`` bundles) and ``--from-registry REF|FILE`` (the signed attestations
attached to each image's digest in its registry: a site publishes its evidence by pushing
it; :mod:`envforge.evidence.attested`), by default from the local evidence store (certificates and
reports, :mod:`envforge.evidence.evidence_store`). Files that are not readable evidence are named
on stderr, one line each, and skipped; so is a certificate whose signature does not match.
Each signed report shows its signer's key fingerprint, and the key's name when a trust file
(``--trust``, ``ENVFORGE_TRUSTED_KEYS``) lists it. ``--require-signed`` (or
``ENVFORGE_REQUIRE_SIGNED=1``): only reports signed by a trusted key are counted; without
it the summary says how many counted reports are unsigned (the page labels each).
``--by site|node``: each cell's runs counted per site, or per site and node, the worst
first, so a failing cell names the node to drain; ``--by node`` writes node names into
the page (said on stderr when the site does not share them: keep such a page inside).
"""

from __future__ import annotations

from pathlib import Path

import click

from envforge.cli.common import (
    OutputPath,
    echo_json,
    json_option,
    require_signed_option,
    signed_policy,
    trust_option,
    trusted_keys,
)
from envforge.core.fsutil import read_limited, read_reason
from envforge.core.sharing import sharing
from envforge.errors import InvalidInput
from envforge.evidence import evidence_db
from envforge.evidence.attested import registry_evidence
from envforge.evidence.local_store import opened
from envforge.evidence.matrix import BY, Matrix, aggregate, write_site
from envforge.evidence.matrix_db import store_matrix
from envforge.evidence.model import EvidenceSet
from envforge.evidence.records import missing_paths, read_evidence
from envforge.evidence.signed import SignedPolicy

#: Bytes a --from-registry file of refs may have.
MAX_REF_LIST_BYTES = 4 * 1024 * 1024


def _store_matrix(policy: SignedPolicy, by: str = "") -> tuple[Matrix, list[str]]:
    """The local store's matrix, aggregated in its database (:mod:`envforge.evidence.matrix_db`);
    with signed evidence required, of the records signed by a trusted key. And every
    stored record's signer."""
    with opened() as (conn, problems):
        if not policy.required:
            signers = [str(s) for (s,) in conn.execute("SELECT signer FROM reports")]
            return store_matrix(conn, problems, by), signers
        records = evidence_db.records(conn)
    kept = EvidenceSet(tuple(r for r in records if policy.counts(r.signer)), problems)
    return aggregate(kept, by), [r.signer for r in records]


def _signed_line(policy: SignedPolicy, signers: list[str]) -> str:
    counted, left = policy.split(signers)
    if policy.required:
        return (
            f"signed evidence only: {counted} counted, {left} not signed by a trusted key left out"
        )
    unsigned = sum(1 for s in signers if not policy.trusted_signer(s))
    return f"{unsigned} of {len(signers)} report(s) unsigned or not trusted (counted, labelled)"


def _registry_refs(values: tuple[str, ...]) -> list[str]:
    """``--from-registry`` values: refs, and files listing refs (one a line, ``#``
    comments)."""
    refs: list[str] = []
    for value in values:
        path = Path(value)
        if not path.is_file():
            refs.append(value)
            continue
        try:
            text = read_limited(path, MAX_REF_LIST_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = read_reason(exc, path) if isinstance(exc, OSError) else "not UTF-8 text"
            raise InvalidInput(
                f"--from-registry {path}: cannot read: {why}",
                hint="name a file of image references, one a line",
            ) from None
        refs += [w for line in text.splitlines() for w in line.split("#", 1)[0].split()[:1]]
    return refs


def _gathered(
    paths: list[Path], from_registry: tuple[str, ...], trust: tuple[Path, ...]
) -> EvidenceSet:
    """The records of ``--evidence`` paths and of ``--from-registry`` images, each run once."""
    found = read_evidence(paths, signatures=True) if paths else EvidenceSet(())
    if not from_registry:
        return found
    refs = _registry_refs(from_registry)
    if not refs:
        raise InvalidInput(
            "--from-registry: no image reference given", hint="name REF or a file of refs"
        )
    remote = registry_evidence(refs, trusted_keys(trust))
    kept = {r.key: r for r in remote.records}
    merged = [*kept.values(), *(r for r in found.records if r.key not in kept)]
    return EvidenceSet(
        tuple(sorted(merged, key=lambda r: (r.created, r.key), reverse=True)),
        (*found.problems, *remote.problems),
        found.duplicates + remote.duplicates + len(found.records) + len(kept) - len(merged),
        found.files + remote.files,
    )


def register(group: click.Group) -> None:
    group.add_command(matrix)


@click.command("matrix")
@click.option(
    "--evidence",
    "evidence",
    multiple=True,
    metavar="PATH",
    type=click.Path(path_type=Path),
    help="A folder (searched recursively), report file or .jsonl bundle (repeatable; "
    "default: the local evidence store).",
)
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    metavar="DIR",
    type=OutputPath(),
    help="Folder for index.html and matrix.json (created when missing).",
)
@click.option(
    "--from-registry",
    "from_registry",
    multiple=True,
    metavar="REF|FILE",
    help="Build it from the attestations attached to this image's digest in its registry "
    "(HOST[:PORT]/REPO:TAG or @sha256:…; a FILE lists such refs, one a line; repeatable), "
    "each checked against the trusted keys; with --evidence, both.",
)
@click.option(
    "--by",
    "by",
    type=click.Choice(BY),
    default=None,
    help="Count each cell's runs per site, or per site and node (worst first), "
    "so a failing cell names the node to drain.",
)
@trust_option("Public key file naming signers (repeatable; default: $ENVFORGE_TRUSTED_KEYS).")
@require_signed_option
@json_option
def matrix(
    evidence: tuple[Path, ...],
    out: Path,
    *,
    from_registry: tuple[str, ...],
    trust: tuple[Path, ...],
    require_signed: bool,
    as_json: bool,
    by: str | None = None,
) -> None:
    """Write the certified-on matrix (GPU arch x recipe) as a static site."""
    grouping = by or ""
    sources = list(evidence)
    if evidence:
        missing = missing_paths(sources)
        if missing:
            raise InvalidInput(
                f"--evidence {missing[0]}: no such file or folder",
                hint="name a report folder, a probe.json/certificate file or a .jsonl bundle",
            )
    policy = signed_policy(require_signed, trust)
    signers = dict(policy.trusted)
    if evidence or from_registry:
        found = _gathered(sources, from_registry, trust)
        signed_by = [r.signer for r in found.records]
        kept = tuple(r for r in found.records if policy.counts(r.signer))
        result = aggregate(
            EvidenceSet(kept, found.problems, found.duplicates, found.files), grouping
        )
        read = found.files
    else:
        (result, signed_by), read = _store_matrix(policy, grouping), 0
    for problem in result.problems:
        click.echo(f"envforge: skipped {problem.line()}", err=True)
    site = write_site(result, out, signers=signers)
    summary = {
        "index": str(site.index),
        "data": str(site.data),
        "reports": result.reports,
        "duplicates": result.duplicates,
        "skipped": len(result.problems),
        "files": read,
        "rows": len(result.rows),
        "columns": len(result.columns),
        "cells": len(result.cells),
        "require_signed": policy.required,
        "signed": _signed_line(policy, signed_by),
        "by": grouping or None,
        "groups": len(result.groups),
    }
    _node_note(result)
    if as_json:
        echo_json(summary)
        return
    click.echo(
        f"wrote {site.index} and {site.data}: {result.reports} report"
        f"{'' if result.reports == 1 else 's'} ({result.duplicates} duplicate"
        f"{'' if result.duplicates == 1 else 's'} merged, {len(result.problems)} file"
        f"{'' if len(result.problems) == 1 else 's'} skipped), {len(result.rows)} GPU arch"
        f"{'' if len(result.rows) == 1 else 's'} x {len(result.columns)} recipe"
        f"{'' if len(result.columns) == 1 else 's'}"
    )
    click.echo(f"envforge: {summary['signed']}", err=True)


def _node_note(result: Matrix) -> None:
    """Say so when a ``--by node`` page names nodes and the site does not share them."""
    named = sum(1 for g in result.groups if g.node)
    if result.by == "node" and named and not sharing().node_names:
        click.echo(
            f"envforge: the page names {named} node{'' if named == 1 else 's'} and this site "
            "does not share node names (share_node_names is off): keep it inside the site",
            err=True,
        )
