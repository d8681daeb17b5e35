"""Sources as links a user can open: URLs and ``owner/repo#N`` references in a source text.

A source is a URL, a GitHub reference (``owner/repo#N``, ``owner/repo PR #N``,
``RFC owner/repo#N``; ``owner/repo#1, #2`` continues the list) or a named public document
(``PyPI's torch wheels``, ``Debian and Ubuntu release notes``). A bare ``#N`` belongs to a
repository only when it continues such a list: ``pytorch/pytorch RFC #190355`` names
pytorch/pytorch, never another repository named earlier. :func:`source_problem` says why a
text is not an openable source (a path to internal notes, no reference at all).
"""

from __future__ import annotations

import re

_REPO = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
#: ``owner/repo#N``, ``owner/repo PR #N``, ``owner/repo RFC #N``, ``owner/repo issue #N``.
_GH_REF = re.compile(
    r"(?<![\w/.-])(" + _REPO + r")(?:#| (?:PR|RFC|issue|pull) #)(\d+)"
    r"((?:\s*(?:,|and|/)\s*#\d+)*)"
)
_MORE = re.compile(r"#(\d+)")
_URL = re.compile(r"https?://[^\s;,)\]]+")

#: Texts that point at internal notes, not at something a user can open.
_INTERNAL = re.compile(
    r"(?:\.\./|shared/knowledge|knowledge/[\w.-]+\.md|\bAUDIT\b|\bmatrix \d)", re.IGNORECASE
)
#: Named public documents a source may cite without a URL (the package indexes are
#: named, never their hosts: see the project's rules).
NAMED_DOCUMENTS = (
    "PyPI",
    "Debian and Ubuntu release notes",
    "named public document",
)


def evidence_links(source: str) -> list[str]:
    """URLs and GitHub references in a source text, as URLs (issue URLs for ``#N``)."""
    links: list[str] = [m.group(0).rstrip(".") for m in _URL.finditer(source)]
    for m in _GH_REF.finditer(source):
        repo = m.group(1)
        numbers = [m.group(2), *_MORE.findall(m.group(3) or "")]
        links.extend(f"https://github.com/{repo}/issues/{n}" for n in numbers)
    return list(dict.fromkeys(links))


def source_problem(text: str) -> str | None:
    """Why ``text`` is not a source a user can open, or None when it is one."""
    internal = _INTERNAL.search(text)
    if internal:
        return f"points at internal notes ({internal.group(0)!r})"
    if evidence_links(text) or any(name in text for name in NAMED_DOCUMENTS):
        return None
    return "names no URL, GitHub reference (owner/repo#N) or named public document"
