"""Index mirrors: ``ENVFORGE_INDEX_MIRROR`` rewrites package index URLs at render and
build time, so recipes keep naming the original index (and keep their hash).

The variable holds ``ORIGINAL=MIRROR`` pairs separated by spaces; an index URL equal to
``ORIGINAL`` or below it (``ORIGINAL/cu126``) is rewritten to the same place below
``MIRROR``. The longest matching ``ORIGINAL`` wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from envforge.errors import InvalidInput

MIRROR_ENV = "ENVFORGE_INDEX_MIRROR"

#: (original, mirror) pairs, longest original first; both without a trailing slash.
Mirrors = tuple[tuple[str, str], ...]

_PAIR_RE = re.compile(r"^(https?://[^\s=]+)=(https?://\S+)\Z", re.ASCII)


def parse_mirrors(text: str, setting: str = MIRROR_ENV) -> Mirrors:
    """``"https://a/whl=https://m/whl https://b=https://n"`` → the pairs (InvalidInput,
    exit 2, naming ``setting`` and the bad item otherwise)."""
    pairs: list[tuple[str, str]] = []
    for item in text.split():
        match = _PAIR_RE.match(item)
        if match is None:
            raise InvalidInput(
                f"{setting}: {item!r} is not ORIGINAL=MIRROR (two http(s) URLs)",
                hint=f"e.g. {MIRROR_ENV}='https://index.example/whl=http://127.0.0.1:8080/whl'",
            )
        original, mirror = (u.rstrip("/") for u in match.groups())
        if any(o == original for o, _ in pairs):
            raise InvalidInput(
                f"{setting}: {original} is given twice", hint="keep one mirror per index"
            )
        pairs.append((original, mirror))
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def mirrors_from_env(environ: Mapping[str, str] | None = None) -> Mirrors:
    """``ENVFORGE_INDEX_MIRROR``, else ``index_mirror`` of the user's settings file
    (:mod:`envforge.core.settings`, read only when the variable is unset)."""
    env = os.environ if environ is None else environ
    if env.get(MIRROR_ENV):
        return parse_mirrors(env[MIRROR_ENV])
    from envforge.core.settings import config_path, read_user  # noqa: PLC0415 - when unset

    text = read_user(env).get("index_mirror")
    if not isinstance(text, str):
        return ()
    return parse_mirrors(text, setting=f"{config_path(env)}: index_mirror")


def rewrite(url: str, mirrors: Mirrors) -> str:
    """``url`` on its mirror when one covers it, else ``url`` unchanged."""
    for original, mirror in mirrors:
        if url == original or url.startswith(original + "/"):
            return mirror + url[len(original) :]
    return url
