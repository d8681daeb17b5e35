"""Markdown summaries for CI (``--summary FILE`` on ``build``, ``certify`` and ``probe``).

GitHub Actions shows the Markdown a step appends to ``$GITHUB_STEP_SUMMARY`` on the run's
page. One summary section is::

    ### envforge certify cpu: ✅ pass
    | step | status | seconds | detail |
    |---|---|---:|---|
    | env-snapshot | ✅ pass | 0.41 | Python 3.11.2, torch 2.13.0 … |
    …
    **Failing step** conv2d (hang):

    ````text
    the step's whole detail
    ````

    | | |
    |---|---|
    | recipe | cpu |
    …

followed by the facts (recipe, stack, GPU, driver, site, certificate, signer; the node a
scheduler ran it on only when the site shares node names, :mod:`envforge.core.sharing`:
a run's page is read outside the site). Sections are
*appended* to FILE (several steps, or several images of one ``certify``, share a file as
GitHub intends); a command that fails before its probe ran still appends a section with
its one-line error.

Everything that comes from a probe (step names, details, GPU names) is escaped by
:func:`cell`: a table cell cannot be broken by ``|`` or a newline, and Markdown or HTML
in a check's message is shown as text, not rendered. The failing step's full detail goes
in a code fence longer than any run of backticks in it (:func:`fenced`).
"""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envforge.core.fsutil import append_text, check_file_target
from envforge.core.sharing import sharing
from envforge.errors import EnvforgeError

if TYPE_CHECKING:
    from envforge.probe.report import ProbeReport

ICONS = {
    "pass": "✅",
    "warn": "⚠️",
    "fail": "❌",
    "hang": "⏳",
    "crash": "💥",
    "oom": "🧠",
    "no-device": "🚫",
    "skip": "⏭️",
    "error": "❌",
}
#: Characters of one table cell that are kept.
CELL_LIMIT = 300
#: Characters of the failing step's detail that are kept.
DETAIL_LIMIT = 20_000
#: Inline Markdown that could format, link or split a cell (``<``, ``>`` and ``&`` are
#: HTML-escaped instead; block syntax such as ``#`` or ``-`` only acts at a line start,
#: and a cell or heading never starts a line).
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def cell(text: str, limit: int = CELL_LIMIT) -> str:
    """``text`` as one safe table cell: Markdown and HTML shown literally, ``|`` escaped,
    line breaks as ``<br>``, at most ``limit`` characters of the original."""
    text = str(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = _MARKDOWN.sub(r"\\\1", text)
    text = html.escape(text, quote=False)
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n")]
    return "<br>".join(line for line in lines if line) or " "


def fenced(text: str, info: str = "text") -> str:
    """A code fence that ``text`` cannot close (longer than its longest backtick run)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def section(
    title: str,
    report: ProbeReport | None,
    *,
    facts: Sequence[tuple[str, str]] = (),
    error: str | None = None,
) -> str:
    """One summary section: the status, the steps, the failing step, the facts.

    ``report`` None (nothing was probed) with ``error``: the command failed before its
    probe; a report with ``error`` (the probe passed, something after it failed) shows
    both.
    """
    if report is not None and not report.passed:
        status = "fail"
    elif error:
        status = "error"
    else:
        status = "pass" if report is not None else "error"
    heading = f"{ICONS[status]} {status}"
    problem = report.first_problem if report is not None else None
    if problem is not None:
        heading += f" at step {cell(problem.name)} ({cell(problem.status)})"
    warned = report.warnings if report is not None else ()
    if warned:
        heading += f", {ICONS['warn']} {len(warned)} warning{'s' if len(warned) > 1 else ''}"
    out = [f"### {cell(title)}: {heading}", ""]
    if error:
        out += [f"**Error:** {cell(error, 2000)}", ""]
    if report is not None and report.steps:
        out += ["| step | status | seconds | detail |", "|---|---|---:|---|"]
        for step in report.steps:
            icon = ICONS.get(step.status, "")
            out.append(
                f"| {cell(step.name)} | {icon} {cell(step.status)} | {step.seconds:.2f} "
                f"| {cell(step.detail)} |"
            )
        out.append("")
    for step in warned:  # a pass worth a look: said under the table, not only in it
        out += [f"**Warning** {cell(step.name)}: {cell(step.detail, 2000)}", ""]
    if problem is not None:
        detail = problem.detail[:DETAIL_LIMIT] or "(no detail)"
        out += [
            f"**Failing step** {cell(problem.name)} ({cell(problem.status)}):",
            "",
            fenced(detail),
            "",
        ]
    rows = [(k, v) for k, v in facts if v]
    if rows:
        out += ["| | |", "|---|---|"]
        out += [f"| {cell(k)} | {cell(v)} |" for k, v in rows]
        out.append("")
    return "\n".join(out) + "\n"


def report_facts(report: ProbeReport | None, *, node: bool = True) -> list[tuple[str, str]]:
    """The host and stack facts of a report, for :func:`section` (``node``: with the
    node's name)."""
    if report is None:
        return []
    snap = report.snapshot
    runtime = ""
    if snap.get("hip"):
        runtime = f"HIP {snap['hip']}"
    elif snap.get("cuda"):
        runtime = f"CUDA {snap['cuda']}"
    return [
        ("recipe", report.recipe_name or ""),
        ("level", report.level),
        ("GPU", ", ".join(g.name for g in report.host.gpus) or "none (CPU only)"),
        ("driver", report.host.driver or ""),
        ("kernel", report.host.kernel),
        ("site", report.host.site or ""),
        ("node", (report.host.node or "") if node else ""),
        ("granted GPUs", report.host.grant_text),
        ("torch", str(snap.get("torch") or "") + (f" ({runtime})" if runtime else "")),
        ("envforge", report.envforge_version),
        ("time", f"{report.created} ({report.seconds:.1f}s)"),
    ]


def append(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` (created when missing; a regular file only); one-line
    errors (exit 2/4)."""
    append_text(path, text, setting="--summary")


# --------------------------------------------------------------------------- --summary


@dataclass
class SummaryNotes:
    """What a command's ``--summary`` section(s) will say (filled while it runs)."""

    title: str
    sections: list[tuple[str, ProbeReport | None, list[tuple[str, str]], str | None]] = field(
        default_factory=list
    )
    #: Whether the node's name may be said (the site shares node names).
    node_names: bool = False

    def add(
        self,
        report: ProbeReport | None,
        facts: Sequence[tuple[str, str]] = (),
        *,
        title: str | None = None,
        error: str | None = None,
    ) -> None:
        shown = report_facts(report, node=self.node_names)
        self.sections.append((title or self.title, report, [*facts, *shown], error))


@contextlib.contextmanager
def summarizing(path: Path | None, title: str) -> Iterator[SummaryNotes]:
    """Append the sections noted while the block runs to ``path`` (``--summary``); an
    error that ends the block before any section was noted becomes a section itself.
    Ctrl-C writes nothing."""
    notes = SummaryNotes(title)
    if path is None:
        yield notes
        return
    check_file_target(path, setting="--summary")  # before any work: one line, exit 2
    notes.node_names = sharing().node_names
    try:
        yield notes
    except EnvforgeError as exc:
        if not notes.sections:
            notes.sections.append((title, None, [], exc.one_line()))
        append(path, "".join(section(t, r, facts=f, error=e) for t, r, f, e in notes.sections))
        raise
    append(path, "".join(section(t, r, facts=f, error=e) for t, r, f, e in notes.sections))
