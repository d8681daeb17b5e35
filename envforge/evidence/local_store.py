"""The local evidence store's database opened for reading: its folders' new files read in
first (:func:`opened`), and ``show``'s "certified on" line (:func:`store_certified_on`).

Kept apart from :mod:`envforge.evidence.evidence_store` (what is stored, import, export),
so that ``show`` imports neither the record parser nor the probe's modules unless a
folder holds files not read before (see :func:`envforge.evidence.evidence_db.sync_folder`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from envforge.core import paths
from envforge.core.lazy import LazyModule
from envforge.evidence import evidence_db
from envforge.evidence.certified_on import describe, pass_row
from envforge.evidence.redact import Redactor

if TYPE_CHECKING:
    from envforge.evidence.by_node import NodeGroup
    from envforge.evidence.records import Problem
    from envforge.evidence.signed import SignedPolicy

#: ``show --by-node`` only.
_by_node = LazyModule("envforge.evidence.by_node")


def sources(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The store's folders of files (certificates first)."""
    return [paths.certificates_dir(environ), paths.reports_dir(environ)]


@contextmanager
def opened(
    environ: Mapping[str, str] | None = None,
    *,
    redact: Redactor | None = None,
) -> Iterator[tuple[sqlite3.Connection, tuple[Problem, ...]]]:
    """The store's database, with the folders' new files read in (a signed certificate's
    signature checked: one that does not match is skipped); the files skipped."""
    redactor = _this_host() if redact is None else redact
    with evidence_db.connect(evidence_db.db_path(paths.state_dir(environ))) as conn:
        problems: list[Problem] = []
        for folder in sources(environ):
            if folder.is_dir():
                # signatures always: a row is read once, whoever reads it first
                problems += evidence_db.sync_folder(conn, folder, redactor, signatures=True)
        yield conn, tuple(problems)


def _this_host() -> Callable[[str], str]:
    """:meth:`Redactor.for_this_host`, made when a new file is read: reading this host's
    names loads ``socket``, which ``show`` over a store with nothing new needs not."""
    made: list[Redactor] = []

    def redact(text: str) -> str:
        if not made:
            made.append(Redactor.for_this_host())
        return made[0](text)

    return redact


def store_certified_on(
    recipe: str,
    *,
    gpu: bool = True,
    arch: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """:func:`envforge.evidence.certified_on.certified_on` for ``recipe`` over the store, read
    from the database's indexes (no report is decoded)."""
    with opened(environ) as (conn, _problems):
        runs, passes = evidence_db.pass_rows(conn, recipe)
    return describe(runs, passes, gpu=gpu, arch=arch)


def store_by_node(
    recipe: str,
    policy: SignedPolicy | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> tuple[NodeGroup, ...]:
    """``recipe``'s runs in the store by site and node (:mod:`envforge.evidence.by_node`);
    with signed evidence required, only the runs signed by a trusted key."""
    groups: tuple[NodeGroup, ...]
    with opened(environ) as (conn, _problems):
        if policy is None or not policy.required:
            groups = _by_node.node_groups(evidence_db.node_rows(conn, recipe))
            return groups
        runs = evidence_db.records(conn, recipe)
    groups = _by_node.node_groups(_by_node.rows_of(r for r in runs if policy.counts(r.signer)))
    return groups


def signed_certified_on(
    recipe: str,
    policy: SignedPolicy,
    *,
    gpu: bool = True,
    arch: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """:func:`store_certified_on` that knows signatures: with signed evidence required,
    only runs signed by a trusted key count (the others are counted, not named); without,
    every run counts and the unsigned passes are said."""
    with opened(environ) as (conn, _problems):
        runs = evidence_db.records(conn, recipe)
    counted = [r for r in runs if policy.counts(r.signer)]
    passes = [pass_row(r) for r in counted if r.outcome == "pass"]
    line = describe(len(counted), passes, gpu=gpu, arch=arch)
    if policy.required:
        left = len(runs) - len(counted)
        return line + (
            f" (signed evidence only; {left} run{'' if left == 1 else 's'} not signed by a "
            "trusted key not counted)"
            if left
            else " (signed evidence only)"
        )
    unsigned = sum(1 for r in runs if r.outcome == "pass" and not policy.trusted_signer(r.signer))
    if unsigned:
        return line + f" ({unsigned} of {len(passes)} passing run(s) unsigned or not trusted)"
    return line
