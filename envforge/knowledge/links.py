"""Sources as links a user can open: URLs and ``owner/repo#N`` references in a source text.

The accepted shape (issue 20 §5), checked by :func:`source_problem` and walked over every
source of the shipped table and recipes by ``tests/unit/knowledge/test_sources.py``:

- A source text is one or more **citations** separated by ``"; "`` outside parentheses
  and brackets (``TORCH_CUDA_ARCH_LIST 3.7;5.0`` is one citation).
- Each citation holds at least one reference a user can open:

  - an ``http://`` or ``https://`` URL;
  - a GitHub reference: ``owner/repo#N``, ``owner/repo PR #N`` (``RFC``, ``issue``,
    ``pull``), ``RFC owner/repo#N``; ``owner/repo#1, #2`` continues the list. It names
    ``https://github.com/owner/repo/issues/N`` (:func:`evidence_links`). A bare ``#N``
    belongs to a repository only when it continues such a list: ``pytorch/pytorch RFC
    #190355`` names pytorch/pytorch, never another repository named earlier;
  - a **named public document**: its name followed by ``(named public document)`` or
    ``(named public documents)`` (``PyPI's torch project files (named public document)``):
    something public a user can find by that name without a URL (the package indexes are
    named, never their hosts: see the project's rules);

  or it is a **doubt**: a citation marked ``[?]`` that claims no source (``release set
  unconfirmed [?]``).
- At least one citation is a reference (a doubt alone is no source).
- Nothing points at internal notes (``../``, ``shared/knowledge``, ``knowledge/*.md``, an
  audit file or an audit row id like ``AUDIT E12``, ``matrix 1b``).

Short keys of the table's ``sources:`` are expanded (``CompatTable.cite``) before the check.
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
    r"(?:\.\./|shared/knowledge|knowledge/[\w.-]+\.md|audit-\d{4}|\bAUDIT\b|\bmatrix \d)",
    re.IGNORECASE,
)
#: The mark that names a public document without a URL.
NAMED_DOCUMENT = re.compile(r"\(named public documents?\)")
#: The mark of a doubt (a citation that says what is not known, claiming no source).
DOUBT = "[?]"


def evidence_links(source: str) -> list[str]:
    """URLs and GitHub references in a source text, as URLs (issue URLs for ``#N``)."""
    links: list[str] = [m.group(0).rstrip(".") for m in _URL.finditer(source)]
    for m in _GH_REF.finditer(source):
        repo = m.group(1)
        numbers = [m.group(2), *_MORE.findall(m.group(3) or "")]
        links.extend(f"https://github.com/{repo}/issues/{n}" for n in numbers)
    return list(dict.fromkeys(links))


def citations(text: str) -> list[str]:
    """``text`` split at ``"; "`` outside parentheses and brackets, each part stripped."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and text[i + 1 : i + 2] in (" ", ""):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def is_reference(citation: str) -> bool:
    """The citation holds a URL, a GitHub reference or a named public document."""
    return bool(evidence_links(citation)) or NAMED_DOCUMENT.search(citation) is not None


def source_problem(text: str) -> str | None:
    """Why ``text`` is not a source a user can open, or None when it is one."""
    internal = _INTERNAL.search(text)
    if internal:
        return f"points at internal notes ({internal.group(0)!r})"
    parts = citations(text)
    for part in parts:
        if not is_reference(part) and DOUBT not in part:
            return (
                f"the citation {part!r} names no URL, GitHub reference (owner/repo#N) or "
                "named public document, and is not a doubt marked [?]"
            )
    if not any(is_reference(p) for p in parts):
        return "names no URL, GitHub reference (owner/repo#N) or named public document"
    return None
