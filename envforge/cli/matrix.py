"""``envforge matrix``: the certified-on matrix as a static site (``index.html`` + ``matrix.json``).

Evidence comes from ``--evidence PATH`` (repeatable: folders, searched recursively, report
files, ``*.jsonl`` bundles), by default from the local evidence store (certificates and
reports, :mod:`envforge.evidence.evidence_store`). Files that are not readable evidence are named
on stderr, one line each, and skipped; so is a certificate whose signature does not match.
Each signed report shows its signer's key fingerprint, and the key's name when a trust file
(``--trust``, ``ENVFORGE_TRUSTED_KEYS``) lists it.
"""

from __future__ import annotations

from pathlib import Path

import click

from envforge.cli.common import OutputPath, echo_json, json_option, trust_option, trusted_files
from envforge.errors import InvalidInput
from envforge.evidence.local_store import opened
from envforge.evidence.matrix import Matrix, aggregate, write_site
from envforge.evidence.matrix_db import store_matrix
from envforge.evidence.records import missing_paths, read_evidence
from envforge.publish.signing import load_trust


def _store_matrix() -> Matrix:
    """The local store's matrix, aggregated in its database (:mod:`envforge.evidence.matrix_db`)."""
    with opened() as (conn, problems):
        return store_matrix(conn, problems)


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
@trust_option("Public key file naming signers (repeatable; default: $ENVFORGE_TRUSTED_KEYS).")
@json_option
def matrix(evidence: tuple[Path, ...], out: Path, trust: tuple[Path, ...], as_json: bool) -> None:
    """Write the certified-on matrix (GPU arch x recipe) as a static site."""
    sources = list(evidence)
    if evidence:
        missing = missing_paths(sources)
        if missing:
            raise InvalidInput(
                f"--evidence {missing[0]}: no such file or folder",
                hint="name a report folder, a probe.json/certificate file or a .jsonl bundle",
            )
    signers: dict[str, str] = {}
    files, setting = trusted_files(trust)
    if files:
        keys = load_trust(files, setting=setting)
        signers = {fp: key.name for fp, key in keys.keys.items()}
    if evidence:
        found = read_evidence((p for p in sources if p.exists()), signatures=True)
        result, read = aggregate(found), found.files
    else:
        result, read = _store_matrix(), 0
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
    }
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
