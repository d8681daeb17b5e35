"""What ``knowledge refresh`` and ``knowledge status`` found, as values that print
themselves (text lines, JSON): findings, per-root counts, problems (what could not be
checked) and the proposed overlay rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from envforge.knowledge.companions import Row, row_yaml
from envforge.knowledge.listing import IndexProblem


@dataclass(frozen=True)
class Watched:
    """One watched package on one index: the newest release the table has a row for, the
    newest final release listed, and those newer than the table's."""

    package: str
    known: str
    listed: str
    newer: tuple[str, ...]
    url: str
    #: why the page could not be read (None when it was)
    problem: IndexProblem | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "known": self.known,
            "listed": self.listed,
            "newer": list(self.newer),
            "url": self.url,
            "problem": None if self.problem is None else self.problem.one_line(),
        }

    def line(self) -> str:
        if self.problem is not None:
            return (
                f"{self.package}: table {self.known}, index NOT checked "
                f"({self.problem.kind}: {self.problem.reason})"
            )
        listed = self.listed or "(not listed)"
        newer = f"; newer than the table: {', '.join(self.newer)}" if self.newer else ""
        return f"{self.package}: table {self.known}, index {listed}{newer}"


@dataclass(frozen=True)
class Finding:
    """One difference between an index and the table.

    kind: new-release, missing-release, yanked, python-range, default-build,
    new-variant, missing-variant, numpy-new, numpy-python, numpy-yanked, companion-new.
    ``new`` is True when the index lists something the table lacks.
    """

    kind: str
    subject: str
    message: str
    url: str
    new: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "message": self.message,
            "url": self.url,
            "new": self.new,
        }


@dataclass(frozen=True)
class RootSummary:
    root: str
    role: str  # "index" or "pytorch-index"
    asked: int
    answered: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "role": self.role,
            "asked": self.asked,
            "answered": self.answered,
        }


@dataclass(frozen=True)
class RefreshReport:
    date: str
    roots: tuple[RootSummary, ...]
    findings: tuple[Finding, ...]
    problems: tuple[IndexProblem, ...]
    #: notes that are no difference (e.g. a default build the metadata cannot tell)
    notes: tuple[str, ...]
    #: torch versions the package index(es) list, oldest first
    torch_versions: tuple[str, ...]
    proposed: tuple[dict[str, Any], ...]
    seconds: float
    requests: dict[str, int] = field(default_factory=dict)
    #: companion rows proposed from new releases' metadata (for companions.yaml)
    companions: tuple[Row, ...] = ()

    @property
    def new(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.new)

    @property
    def complete(self) -> bool:
        """Every listing and every metadata file asked for answered."""
        return not self.problems

    @property
    def answered(self) -> bool:
        """At least one listing answered."""
        return any(r.answered for r in self.roots)

    def summary(self) -> str:
        """One line naming what could not be checked (for exit 4)."""
        asked = sum(r.asked for r in self.roots)
        unanswered = asked - sum(r.answered for r in self.roots)
        lines = problem_lines(self.problems)
        shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
        return (
            f"the check is partial: {unanswered} of {asked} listing(s) and "
            f"{len(self.problems) - unanswered} other request(s) could not be checked: "
            f"{shown}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "complete": self.complete,
            "roots": [r.to_dict() for r in self.roots],
            "findings": [f.to_dict() for f in self.findings],
            "problems": [
                {"url": p.url, "kind": p.kind, "reason": p.reason, "status": p.status}
                for p in self.problems
            ],
            "notes": list(self.notes),
            "torch_versions": list(self.torch_versions),
            "proposed": list(self.proposed),
            "proposed_companions": [_row_dict(r) for r in self.companions],
            "seconds": round(self.seconds, 3),
            "requests": dict(self.requests),
        }

    def lines(self) -> list[str]:
        out = []
        for r in self.roots:
            what = "answered" if r.answered == r.asked else f"{r.answered} of {r.asked} answered"
            if r.answered == 0:
                what = "did not answer (skipped)"
            out.append(f"{r.role} {r.root}: {r.asked} listing(s), {what}")
        new = [f for f in self.findings if f.new]
        other = [f for f in self.findings if not f.new]
        if new:
            out.append("new on the index (not in the table):")
            out.extend(f"  {f.subject}: {f.message} ({f.url})" for f in new)
        if other:
            out.append("different from the table:")
            out.extend(f"  {f.subject}: {f.message} ({f.url})" for f in other)
        if not self.findings:
            out.append(
                "the table matches every listing that answered"
                if self.complete
                else "the table matches every listing that answered; the others were "
                "NOT checked (problems below)"
            )
        out.extend(f"note: {n}" for n in self.notes)
        out.extend(f"problem: {line}" for line in problem_lines(self.problems))
        if self.companions:
            out.append(f"proposed companion rows ({COMPANIONS_FILE}, review before use):")
            out.extend(row_yaml(r) for r in self.companions)
        req = self.requests
        out.append(
            f"{len(self.torch_versions)} torch versions listed; {req.get('network', 0)} "
            f"request(s), {req.get('revalidated', 0)} revalidated, {req.get('cache', 0)} from "
            f"cache, {req.get('failed', 0)} failed; {self.seconds:.2f} s"
        )
        return out

    def overlay_yaml(self) -> str:
        head = (
            f"# envforge knowledge refresh {self.date}: proposed rows (review before use).\n"
            "# Every fact here comes from an index listing and is confidence: uncertain.\n"
        )
        body = {"schema": 1, "releases": list(self.proposed)}
        tail = ""
        if self.companions:
            tail = (
                f"# proposed companion rows: review, then add them to {COMPANIONS_FILE}'s "
                "rows:\n" + "".join(f"# {row_yaml(r)}\n" for r in self.companions)
            )
        return head + yaml.safe_dump(body, sort_keys=False, width=100) + tail


#: where companion rows live (they are no overlay rows: the overlay is compat.yaml's schema)
COMPANIONS_FILE = "envforge/data/companions.yaml"


def _row_dict(row: Row) -> dict[str, Any]:
    out: dict[str, Any] = {
        "package": row.package,
        "version": row.version,
        "torch": row.torch,
        "requires": row.requires,
        "source": row.source,
        "checked": row.checked,
        "confidence": row.confidence,
    }
    if row.note:
        out["note"] = row.note
    return out


def problem_lines(problems: Sequence[IndexProblem]) -> list[str]:
    """One line per problem; problems of one kind and reason under one root are merged
    and shown under the URL they share (``http://host/whl/... (33 listings)``)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for p in problems:
        root = p.url.rstrip("/").rsplit("/", 2)[0]
        groups.setdefault((root, p.kind, p.reason), []).append(p.url)
    out = []
    for (_root, kind, reason), urls in groups.items():
        if len(urls) == 1:
            out.append(f"{urls[0]}: {kind}: {reason}")
        else:
            shared = _shared_folder(urls)
            out.append(f"{shared}... ({len(urls)} listings): {kind}: {reason}")
    return out


def _shared_folder(urls: Sequence[str]) -> str:
    """The longest ``.../`` that every URL starts with."""
    parts = [u.split("/") for u in urls]
    same = []
    for column in zip(*parts):
        if len(set(column)) != 1:
            break
        same.append(column[0])
    return "/".join(same) + "/"


@dataclass(frozen=True)
class StatusReport:
    index: str
    date: str
    newest_known: str
    newest_listed: str
    #: releases the index lists and the table lacks (from the table's oldest on)
    missing: tuple[str, ...]
    #: (series, checked date or "never") of rows not checked for more than ``stale_days``
    stale: tuple[tuple[str, str], ...]
    stale_days: int
    #: the companions and extensions watched on the index (envforge.knowledge.watch)
    packages: tuple[Watched, ...] = ()

    @property
    def current(self) -> bool:
        """The index lists no torch release and no watched package release the table lacks."""
        return not self.missing and not any(w.newer for w in self.packages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "date": self.date,
            "current": self.current,
            "newest_known": self.newest_known,
            "newest_listed": self.newest_listed,
            "missing": list(self.missing),
            "stale": [{"series": s, "checked": c} for s, c in self.stale],
            "stale_days": self.stale_days,
            "packages": [w.to_dict() for w in self.packages],
        }

    def lines(self) -> list[str]:
        out = [
            f"index {self.index} ({self.date})",
            f"newest torch release: table {self.newest_known}, index {self.newest_listed}",
        ]
        if self.missing:
            out.append(f"missing from the table: {', '.join(self.missing)}")
        else:
            out.append("missing from the table: none")
        if self.stale:
            rows = ", ".join(f"{s} ({c})" for s, c in self.stale)
            out.append(f"rows not checked for more than {self.stale_days} days: {rows}")
        else:
            out.append(f"rows not checked for more than {self.stale_days} days: none")
        if self.packages:
            out.append(
                "companions, extensions and the CUDA toolkit (newest row of the table, "
                "newest release on the index):"
            )
            out.extend(f"  {w.line()}" for w in self.packages)
        out.append(
            "current"
            if self.current
            else "NOT current: run `envforge knowledge refresh -o FILE` and review the rows"
        )
        return out
