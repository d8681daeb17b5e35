"""Sources as links a user can open: URLs and ``owner/repo#N`` references in a source text."""

from __future__ import annotations

import re

_GH_REF = re.compile(r"\b([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?:#| PR #)(\d+)")


def evidence_links(source: str) -> list[str]:
    """URLs and ``owner/repo#N`` references in a source text, as GitHub issue URLs."""
    links: list[str] = []
    for m in re.finditer(r"https?://\S+", source):
        links.append(m.group(0).rstrip(").,;"))
    for m in _GH_REF.finditer(source):
        links.append(f"https://github.com/{m.group(1)}/issues/{m.group(2)}")
    # "owner/repo#1, #2": the bare numbers belong to the last named repo.
    repo: str | None = None
    for token in re.finditer(
        r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?=#| PR #)|(?<![\w/])#(\d+)", source
    ):
        if token.group(1):
            repo = token.group(1)
        elif repo is not None:
            links.append(f"https://github.com/{repo}/issues/{token.group(2)}")
    return list(dict.fromkeys(links))
