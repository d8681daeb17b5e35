"""The packages a recipe takes from an index of their own (``{name: REQ, index: URL}``):
what uv and pip are given so that each comes from that index only."""

from __future__ import annotations

import json
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envforge.core.mirror import Mirrors, mirrors_from_env, rewrite
from envforge.render.quoting import shell_quote
from envforge.stack import Stack

#: The file uv reads the per-package indexes from (``-r``): uv pins a dependency of a
#: pyproject.toml to an index with ``[tool.uv.sources]`` and an ``explicit`` index, which
#: no other package is looked up on.
SOURCES_FILE = "pyproject.toml"


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def index_sources(stack: Stack, mirrors: Mirrors | None = None) -> tuple[str, ...]:
    """The lines of a pyproject.toml that pins each of the stack's packages from their own
    index to that index, for ``uv pip install -r pyproject.toml`` (() without any). The
    indexes are ``explicit``: uv looks up only the packages pinned to them there, and
    those packages nowhere else; ``ENVFORGE_INDEX_MIRROR`` applies to them too."""
    pinned = stack.indexed_lines()
    if not pinned:
        return ()
    mirrors = mirrors_from_env() if mirrors is None else mirrors
    urls = list(dict.fromkeys(rewrite(url, mirrors) for _line, url in pinned))
    lines = [
        "[project]",
        'name = "envforge-package-indexes"',
        'version = "0"',
        "dependencies = [" + ", ".join(_toml(line) for line, _url in pinned) + "]",
        "[tool.uv.sources]",
    ]
    for line, url in pinned:
        name = Requirement(line).name
        index = f"envforge-{urls.index(rewrite(url, mirrors))}"
        lines.append(f"{_toml(name)} = {{ index = {_toml(index)} }}")
    for i, url in enumerate(urls):
        lines += [
            "[[tool.uv.index]]",
            f'name = "envforge-{i}"',
            f"url = {_toml(url)}",
            "explicit = true",
        ]
    return tuple(lines)


@dataclass(frozen=True)
class PipIndexed:
    """A package from its own index, for pip (which cannot pin a package to an index):
    ``pip download --no-deps --index-url URL`` fetches it alone, then the install names
    the downloaded file (``name @ file://...``), so that pip never looks it up elsewhere.
    Every field is already a shell word."""

    requirement: str
    url: str
    name: str


def pip_indexed(stack: Stack, mirrors: Mirrors | None = None) -> tuple[PipIndexed, ...]:
    mirrors = mirrors_from_env() if mirrors is None else mirrors
    return tuple(
        PipIndexed(
            shell_quote(line),
            shell_quote(rewrite(url, mirrors)),
            shell_quote(canonicalize_name(Requirement(line).name)),
        )
        for line, url in stack.indexed_lines()
    )
