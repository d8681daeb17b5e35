"""The certified-on matrix: evidence aggregated by GPU arch × recipe, and its static site.

:func:`aggregate` turns :class:`envforge.evidence.records.Evidence` records into a :class:`Matrix`:

* **rows**: GPU archs (``vendor:arch``; ``none:cpu`` for hosts without a GPU), each with
  the product names seen, most frequent first;
* **columns**: recipes (a report that names none is filed under its stack, e.g.
  ``torch2.13.0-cpu-py3.11``), each with the stacks seen;
* **cells**: for each (row, column) with evidence, the count of each outcome (pass, fail,
  hang, crash, oom, no-device), a verdict (``pass``: all passed, ``fail``: none did,
  ``mixed``), the newest run's time, the lowest and highest driver seen (natural version
  order), per-step timings over all runs (median and maximum seconds, outcomes), the
  newest :data:`RUNS_PER_CELL` runs with their steps and the newest
  :data:`FAILURES_PER_CELL` runs that did not pass, with the failing step's detail;
* **groups** (``by``: :data:`BY`, what ``matrix --by site|node`` asks): each cell's
  counts per site, or per site and node, the groups with the most runs that did not pass
  first (a red cell names the node to drain), and the same over the whole matrix; each
  run names its site (and node). Without ``by`` neither appears: the default
  ``matrix.json`` names no node (:mod:`envforge.core.sharing`).

:func:`write_site` renders ``templates/matrix/index.html.j2`` (autoescaped; the data is
embedded as JSON in a ``<script type="application/json">`` block with ``<``, ``>``, ``&``
and ``'`` escaped, so a report's text can never close the block) and writes ``index.html``
and ``matrix.json`` together: both or neither (see :func:`write_files`).

The local evidence store's matrix is the same :class:`Matrix`, aggregated in its database
(:mod:`envforge.evidence.matrix_db`); :func:`aggregate` serves the files ``--evidence``
names and a fleet's reports.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from envforge.core import fsutil
from envforge.core.resources import templates_dir
from envforge.errors import Unavailable
from envforge.evidence.by_node import Tallied
from envforge.evidence.records import OUTCOMES, VENDORS, Evidence, EvidenceSet, Problem
from envforge.version import __version__

SCHEMA = "envforge.matrix/1"
RUNS_PER_CELL = 10
FAILURES_PER_CELL = 5
INDEX_NAME = "index.html"
DATA_NAME = "matrix.json"
TEMPLATE = "matrix/index.html.j2"
#: What runs may be grouped by within a cell.
BY = ("site", "node")


@dataclass(frozen=True)
class Row:
    key: str
    vendor: str
    arch: str
    products: tuple[str, ...]
    reports: int


@dataclass(frozen=True)
class Column:
    key: str
    stacks: tuple[str, ...]
    reports: int


@dataclass(frozen=True)
class StepStat:
    name: str
    runs: int
    median: float
    max: float
    outcomes: Mapping[str, int]


@dataclass(frozen=True)
class Group(Tallied):
    """A site's runs (``by="site"``: node "") or a node's (``by="node"``) in a cell, or in
    the whole matrix: the count of each outcome. "" is a run that names none."""

    site: str
    node: str
    counts: Mapping[str, int]

    def to_dict(self, by: str) -> dict[str, Any]:
        return {
            "site": self.site,
            **({"node": self.node} if by == "node" else {}),
            "counts": self.count_dict(),
            "total": self.total,
            "verdict": self.verdict,
        }


def groups_of(counts: Mapping[tuple[str, str], Mapping[str, int]]) -> tuple[Group, ...]:
    """(site, node) -> outcome counts as groups: the most runs that did not pass first,
    then the most runs, then by name."""
    found = [Group(site, node, dict(c)) for (site, node), c in counts.items()]
    return tuple(
        sorted(found, key=lambda g: (-g.bad, -g.total, natural_key(g.site), natural_key(g.node)))
    )


def group_key(record: Evidence, by: str) -> tuple[str, str]:
    """The group of ``record`` when grouping ``by`` (see :data:`BY`)."""
    return record.site, record.node if by == "node" else ""


@dataclass(frozen=True)
class Cell(Tallied):
    row: str
    column: str
    counts: Mapping[str, int]
    newest: datetime
    drivers: tuple[str, str] | None
    products: tuple[str, ...]
    stacks: tuple[str, ...]
    steps: tuple[StepStat, ...]
    runs: tuple[Evidence, ...]
    failures: tuple[Evidence, ...]
    #: Its runs by site or node (:data:`BY`); () when the matrix is not grouped.
    groups: tuple[Group, ...] = ()


@dataclass(frozen=True)
class Matrix:
    rows: tuple[Row, ...]
    columns: tuple[Column, ...]
    cells: tuple[Cell, ...]
    duplicates: int = 0
    problems: tuple[Problem, ...] = ()
    #: What each cell's runs are grouped by ("", "site" or "node"), and the groups over
    #: the whole matrix.
    by: str = ""
    groups: tuple[Group, ...] = ()

    @property
    def reports(self) -> int:
        return sum(c.total for c in self.cells)

    def cell(self, row: str, column: str) -> Cell | None:
        return next((c for c in self.cells if c.row == row and c.column == column), None)

    def to_dict(
        self, generated: datetime | None = None, signers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The ``matrix.json`` form (also embedded in the page). No paths, no host names
        (node names only when grouped ``by`` node).

        ``signers``: key fingerprint -> name (from trust files), shown beside each signed
        report's fingerprint.
        """
        when = generated or datetime.now(timezone.utc)
        names = dict(signers or {})
        data = {
            "schema": SCHEMA,
            "generated": _iso(when),
            "envforge_version": __version__,
            "outcomes": list(OUTCOMES),
            "reports": self.reports,
            "duplicates": self.duplicates,
            "skipped": len(self.problems),
            "rows": [
                {
                    "key": r.key,
                    "vendor": r.vendor,
                    "arch": r.arch,
                    "products": list(r.products),
                    "reports": r.reports,
                }
                for r in self.rows
            ],
            "columns": [
                {"key": c.key, "stacks": list(c.stacks), "reports": c.reports} for c in self.columns
            ],
            "cells": [_cell_dict(c, names, self.by) for c in self.cells],
        }
        if self.by:
            data["by"] = self.by
            data["groups"] = [g.to_dict(self.by) for g in self.groups]
        return data


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _run_dict(run: Evidence, names: Mapping[str, str], by: str = "") -> dict[str, Any]:
    problem = run.first_problem
    where: dict[str, str] = {}
    if by:
        where["site"] = run.site
    if by == "node":
        where["node"] = run.node
    return {
        **where,
        "created": _iso(run.created),
        "outcome": run.outcome,
        "recipe": run.recipe,
        "stack": run.stack,
        "level": run.level,
        "product": run.gpu.product,
        "gpus": run.gpu_count,
        "driver": run.driver,
        "kernel": run.kernel,
        "torch": run.torch,
        "runtime": run.runtime,
        "python": run.python,
        "envforge_version": run.envforge_version,
        "seconds": run.seconds,
        "source": run.kind,
        "certificate": run.certificate,
        "signer": run.signer,
        "signer_name": names.get(run.signer, "") if run.signer else "",
        "failing_step": None
        if problem is None
        else {"name": problem.name, "status": problem.status, "detail": problem.detail},
        "steps": [s.to_dict() for s in run.steps],
    }


def _cell_dict(cell: Cell, names: Mapping[str, str], by: str) -> dict[str, Any]:
    grouped = {"groups": [g.to_dict(by) for g in cell.groups]} if by else {}
    return {
        "row": cell.row,
        "column": cell.column,
        "counts": cell.count_dict(),
        "total": cell.total,
        "verdict": cell.verdict,
        "newest": _iso(cell.newest),
        "drivers": list(cell.drivers) if cell.drivers else [],
        "products": list(cell.products),
        "stacks": list(cell.stacks),
        "steps": [
            {
                "name": s.name,
                "runs": s.runs,
                "median": s.median,
                "max": s.max,
                "outcomes": dict(s.outcomes),
            }
            for s in cell.steps
        ],
        "runs": [_run_dict(r, names, by) for r in cell.runs],
        "failures": [_run_dict(r, names, by) for r in cell.failures],
        **grouped,
    }


# --------------------------------------------------------------------------- aggregation

_NUMBER = re.compile(r"(\d+)")
STEP_ORDER = (OUTCOMES[0], "warn", *OUTCOMES[1:], "skip")  # warn: a pass worth a look


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """``nvidia 580.9`` < ``nvidia 580.65.06``; ``gfx90a`` < ``gfx1010`` (digits as numbers)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part.lower())
        for part in _NUMBER.split(text)
        if part
    )


def _by_frequency(values: Iterable[str]) -> tuple[str, ...]:
    counts = Counter(v for v in values if v)
    return tuple(sorted(counts, key=lambda v: (-counts[v], v)))


def _step_stats(runs: Sequence[Evidence]) -> tuple[StepStat, ...]:
    seconds: dict[str, list[float]] = defaultdict(list)
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    for run in runs:  # newest first: the newest run's step order wins
        for step in run.steps:
            seconds[step.name].append(step.seconds)
            outcomes[step.name][step.status] += 1
    return tuple(
        StepStat(
            name=name,
            runs=len(values),
            median=round(statistics.median(values), 3),
            max=round(max(values), 3),
            outcomes={k: outcomes[name][k] for k in STEP_ORDER if outcomes[name][k]},
        )
        for name, values in seconds.items()
    )


def _cell(row: str, column: str, runs: Sequence[Evidence], by: str) -> Cell:
    ordered = sorted(runs, key=lambda r: (r.created, r.key), reverse=True)
    drivers = sorted({r.driver for r in ordered if r.driver}, key=natural_key)
    return Cell(
        row=row,
        column=column,
        counts=dict(Counter(r.outcome for r in ordered)),
        newest=ordered[0].created,
        drivers=(drivers[0], drivers[-1]) if drivers else None,
        products=_by_frequency(r.gpu.product for r in ordered),
        stacks=_by_frequency(r.stack for r in ordered),
        steps=_step_stats(ordered),
        runs=tuple(ordered[:RUNS_PER_CELL]),
        failures=tuple([r for r in ordered if r.outcome != "pass"][:FAILURES_PER_CELL]),
        groups=_grouped(ordered, by),
    )


def _grouped(records: Iterable[Evidence], by: str) -> tuple[Group, ...]:
    if not by:
        return ()
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for record in records:
        counts[group_key(record, by)][record.outcome] += 1
    return groups_of(counts)


def check_by(by: str) -> str:
    if by and by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, not {by!r}")
    return by


def row_order(key: str) -> tuple[int, tuple[tuple[int, int | str], ...]]:
    vendor, _, arch = key.partition(":")
    rank = VENDORS.index(vendor) if vendor in VENDORS else len(VENDORS)
    return rank, natural_key(arch)


def aggregate(evidence: EvidenceSet | Iterable[Evidence], by: str = "") -> Matrix:
    """Group records by (GPU arch, recipe), and within a cell ``by`` site or node (see
    the module docstring)."""
    check_by(by)
    if isinstance(evidence, EvidenceSet):
        records: Sequence[Evidence] = evidence.records
        duplicates, problems = evidence.duplicates, evidence.problems
    else:
        records, duplicates, problems = tuple(evidence), 0, ()
    groups: dict[tuple[str, str], list[Evidence]] = defaultdict(list)
    by_row: dict[str, list[Evidence]] = defaultdict(list)
    by_column: dict[str, list[Evidence]] = defaultdict(list)
    for record in records:
        row, column = record.gpu.row_key, record.column
        groups[(row, column)].append(record)
        by_row[row].append(record)
        by_column[column].append(record)
    rows = tuple(
        Row(
            key=key,
            vendor=key.partition(":")[0],
            arch=key.partition(":")[2],
            products=_by_frequency(r.gpu.product for r in by_row[key]),
            reports=len(by_row[key]),
        )
        for key in sorted(by_row, key=row_order)
    )
    columns = tuple(
        Column(
            key=key,
            stacks=_by_frequency(r.stack for r in by_column[key]),
            reports=len(by_column[key]),
        )
        for key in sorted(by_column, key=natural_key)
    )
    row_index = {r.key: i for i, r in enumerate(rows)}
    column_index = {c.key: i for i, c in enumerate(columns)}
    cells = tuple(
        _cell(row, column, runs, by)
        for (row, column), runs in sorted(
            groups.items(), key=lambda kv: (row_index[kv[0][0]], column_index[kv[0][1]])
        )
    )
    return Matrix(rows, columns, cells, duplicates, problems, by, _grouped(records, by))


# --------------------------------------------------------------------------- the site


def script_json(data: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">``: ASCII only, and ``<``, ``>``,
    ``&``, ``'`` written as ``\\u00XX`` escapes, so no text can end the element."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=False)
    text = (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("'", "\\u0027")
    )
    return Markup(text)


@lru_cache(maxsize=2)
def _environment(folder: Path) -> jinja2.Environment:
    """An HTML environment: autoescaping on, StrictUndefined, and ``csp_hash`` (the
    ``sha256-…`` source expression that lets exactly one inline script run)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        keep_trailing_newline=True,
    )
    env.filters["csp_hash"] = csp_hash
    return env


def csp_hash(text: str) -> str:
    digest = hashlib.sha256(str(text).encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def render_page(data: Mapping[str, Any], folder: Path | None = None) -> str:
    root = folder or templates_dir()
    try:
        template = _environment(root).get_template(TEMPLATE)
    except jinja2.TemplateNotFound:
        raise Unavailable(
            f"template {TEMPLATE} not found under {root}",
            hint="reinstall envforge (the templates ship inside the package)",
        ) from None
    return template.render(
        title="envforge: certified-on matrix",
        generated=data.get("generated", ""),
        reports=data.get("reports", 0),
        by=data.get("by", ""),
        data=script_json(data),
    )


def write_files(out: Path, files: Mapping[str, str]) -> list[Path]:
    """Write ``files`` (name → text) into the folder ``out``: all of them or none
    (:func:`envforge.core.fsutil.write_files`: temporary files renamed into place, what was
    replaced put back on a failure, a folder this call created removed again).
    :class:`InvalidInput` (exit 2) when ``out`` or a parent is a file, device or FIFO, or a
    target is a device, FIFO or socket (:func:`envforge.core.fsutil.check_folder_target`);
    :class:`Unavailable` (exit 4) when the folder cannot be written.
    """
    fsutil.check_folder_target(out, setting="-o", files=files)
    targets = [(out / name, text, 0o644) for name, text in files.items()]
    fsutil.write_files(targets, setting="-o")
    return [path for path, _text, _mode in targets]


@dataclass(frozen=True)
class Site:
    index: Path
    data: Path
    matrix: Matrix


def write_site(
    matrix: Matrix,
    out: Path,
    generated: datetime | None = None,
    signers: Mapping[str, str] | None = None,
) -> Site:
    """Write ``out/index.html`` and ``out/matrix.json`` (both or neither)."""
    data = matrix.to_dict(generated, signers)
    page = render_page(data)
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    index, data_path = write_files(out, {INDEX_NAME: page, DATA_NAME: text})
    return Site(index, data_path, matrix)
