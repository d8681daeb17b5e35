"""Which direct references (``name @ URL``) are pinned by content.

Only an archive (a wheel, an sdist ``.tar.gz`` or a ``.zip``) fetched over https (http
only to 127.0.0.1, a local server) whose URL ends in ``#sha256=<64 lowercase hex>`` is:
the installers (uv and pip alike) hash the downloaded file and refuse another one. A VCS
reference (``git+``, ``hg+``, ``svn+``, ``bzr+``) names a checkout, which no file hash
pins (uv and pip never check a ``#sha256=`` on it, and its ``setup.py`` runs at install),
and a local path (``file:``) names whatever is on this disk then. The project reader and
the lock checker use this one definition.
"""

from __future__ import annotations

import re

#: Archive file names the installers hash: a wheel, an sdist, a zip.
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".zip")
VCS_SCHEMES = ("git+", "hg+", "svn+", "bzr+")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: https to any host, http only to 127.0.0.1; no user info, query, spaces or fragment.
_ADDRESS_RE = re.compile(
    r"(?:https://[A-Za-z0-9.-]+(?::\d{1,5})?|http://127\.0\.0\.1(?::\d{1,5})?)/[^\s?#@]+"
)
#: How an archive reference is written (the fix in every refusal).
ARCHIVE_FORM = "NAME @ https://HOST/PATH/NAME-VERSION.tar.gz#sha256=<64 hex> (or .whl/.zip)"


def url_kind(url: str) -> str:
    """What a direct reference names, in words: a VCS checkout, a local path, a URL."""
    lowered = url.lower()
    if lowered.startswith(VCS_SCHEMES):
        return f"a {lowered.split('+', 1)[0]} checkout"
    if lowered.startswith("file:") or "://" not in lowered:
        return "a local path"
    return "a URL"


def archive_problem(url: str) -> str | None:
    """Why ``url`` is not an archive pinned by its sha256 (a short phrase), or None.

    The phrase never quotes the URL (it may carry a token: ``https://TOKEN@host``).
    """
    kind = url_kind(url)
    if kind != "a URL":
        return f"{kind}, which no sha256 pins (its build script runs at install)"
    address, hashed, digest = url.partition("#sha256=")
    if not hashed or not _SHA256_RE.fullmatch(digest):
        return "a URL without #sha256=<the file's 64 lowercase hex digits> at its end"
    if not _ADDRESS_RE.fullmatch(address):
        return (
            "a URL that is not https:// (http:// only to 127.0.0.1), or that has a user,"
            " a query or a space"
        )
    if not address.lower().endswith(ARCHIVE_SUFFIXES):
        return "a URL that names no archive (.whl, .tar.gz or .zip)"
    return None
