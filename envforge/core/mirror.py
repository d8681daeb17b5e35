"""Index mirrors: ``ENVFORGE_INDEX_MIRROR`` rewrites package index URLs at render and
build time, so recipes keep naming the original index (and keep their hash).

The variable holds ``ORIGINAL=MIRROR`` pairs separated by spaces; an index URL equal to
``ORIGINAL`` or below it (``ORIGINAL/cu126``) is rewritten to the same place below
``MIRROR``. The longest matching ``ORIGINAL`` wins. One item may be a bare URL: a
PyPI-compatible index used in place of the default index (``UV_INDEX_URL`` and
``PIP_INDEX_URL`` of the installing steps); it never replaces an index a recipe names
(PyTorch's own routes), which only a pair maps.

The base-image mirror (``base_image_mirror``) is a registry prefix for a recipe's base
image on Docker Hub: ``mirror.example:5000`` turns ``ubuntu:22.04`` into
``mirror.example:5000/library/ubuntu:22.04``; a reference naming its registry is kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envforge.errors import InvalidInput

MIRROR_ENV = "ENVFORGE_INDEX_MIRROR"

#: (original, mirror) pairs, longest original first; both without a trailing slash.
Mirrors = tuple[tuple[str, str], ...]

_PAIR_RE = re.compile(r"^(https?://[^\s=]+)=(https?://\S+)\Z", re.ASCII)
_URL_RE = re.compile(r"^https?://[^\s=/]+(?:/\S*)?\Z", re.ASCII)
#: A registry prefix: HOST[:PORT][/PATH], the host with a dot or a port, or localhost.
_REGISTRY_RE = re.compile(
    r"^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::\d+)?|[A-Za-z0-9-]+:\d+|localhost)"
    r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*\Z",
    re.ASCII,
)


@dataclass(frozen=True)
class IndexMirror:
    """An index mirror setting, parsed: the default index's mirror (None: the default
    index) and the pairs that rewrite the indexes recipes name."""

    default: str | None
    pairs: Mirrors


NO_MIRROR = IndexMirror(None, ())


def parse_index_mirror(text: str, setting: str = MIRROR_ENV) -> IndexMirror:
    """``"http://m/simple https://a/whl=https://m/whl"`` → the default index's mirror and
    the pairs (InvalidInput, exit 2, naming ``setting`` and the bad item otherwise)."""
    default: str | None = None
    rest: list[str] = []
    for item in text.split():
        if "=" in item or _URL_RE.match(item) is None:
            rest.append(item)
        elif default is not None:
            raise InvalidInput(
                f"{setting}: two default index mirrors ({default}, {item})",
                hint="keep one bare URL; map other indexes as ORIGINAL=MIRROR",
            )
        else:
            default = item
    return IndexMirror(default, parse_mirrors(" ".join(rest), setting))


def parse_mirrors(text: str, setting: str = MIRROR_ENV) -> Mirrors:
    """``"https://a/whl=https://m/whl https://b=https://n"`` → the pairs (InvalidInput,
    exit 2, naming ``setting`` and the bad item otherwise)."""
    pairs: list[tuple[str, str]] = []
    for item in text.split():
        match = _PAIR_RE.match(item)
        if match is None:
            raise InvalidInput(
                f"{setting}: {item!r} is not ORIGINAL=MIRROR (two http(s) URLs) or one index URL",
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
    """The pairs of :func:`index_mirror_from_env`."""
    return index_mirror_from_env(environ).pairs


def index_mirror_from_env(environ: Mapping[str, str] | None = None) -> IndexMirror:
    """``ENVFORGE_INDEX_MIRROR``, else ``index_mirror`` of the user's settings file
    (:mod:`envforge.core.settings`, read only when the variable is unset)."""
    env = os.environ if environ is None else environ
    if env.get(MIRROR_ENV):
        return parse_index_mirror(env[MIRROR_ENV])
    from envforge.core.settings import config_path, read_user  # noqa: PLC0415 - when unset

    text = read_user(env).get("index_mirror")
    if not isinstance(text, str):
        return NO_MIRROR
    return parse_index_mirror(text, setting=f"{config_path(env)}: index_mirror")


def index_mirror_options(text: str | None) -> dict[str, Any]:
    """``RenderOptions`` keywords for an index mirror setting's text (none: {}, the
    renderer reads ``ENVFORGE_INDEX_MIRROR``)."""
    if text is None:
        return {}
    parsed = parse_index_mirror(text, setting="index_mirror")
    return {"mirrors": parsed.pairs, "default_index": parsed.default}


def check_registry_prefix(prefix: str, setting: str) -> str:
    """A base-image mirror, checked (``HOST[:PORT][/PATH]``; a trailing / dropped)."""
    value = prefix.strip().rstrip("/")
    if not _REGISTRY_RE.match(value):
        raise InvalidInput(
            f"{setting}: {prefix!r} is not a registry prefix (HOST[:PORT][/PATH])",
            hint='e.g. base_image_mirror = "mirror.example:5000"',
        )
    return value


def mirrored_image(image: str, prefix: str | None) -> str:
    """``image`` pulled through the registry ``prefix``: an image on Docker Hub (its first
    part names no registry) gets ``PREFIX/`` (and ``library/`` when it has no
    namespace); an image that names its registry, or no prefix, stays as it is."""
    if not prefix:
        return image
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"{prefix}/{image if '/' in image else 'library/' + image}"


def rewrite(url: str, mirrors: Mirrors) -> str:
    """``url`` on its mirror when one covers it, else ``url`` unchanged."""
    for original, mirror in mirrors:
        if url == original or url.startswith(original + "/"):
            return mirror + url[len(original) :]
    return url
