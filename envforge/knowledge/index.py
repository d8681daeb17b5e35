"""A small client for Python package indexes: PEP 691 (JSON), PEP 503 (HTML), PEP 658.

Used by ``envforge knowledge refresh`` / ``status`` to read what an index lists. Every
request goes through the one URL opener (:mod:`envforge.core.net`: http(s) to the configured
hosts only, a shared overall deadline, bounded bodies); nothing here raises on a bad
answer: every request either gives a :class:`Response` or an :class:`IndexProblem` naming
the URL and what went wrong (refused, unreachable, timeout, HTTP status, too large,
malformed listing). Listings are parsed by :mod:`envforge.knowledge.listing`.

- :meth:`IndexClient.listing` fetches ``ROOT/<project>/`` asking for the PEP 691 JSON form
  and falls back to PEP 503 HTML (content negotiation: whatever the server sends is parsed
  by its content type).
- :meth:`IndexClient.metadata` reads a wheel's PEP 658 ``.metadata`` file.
- Responses are cached under ``$ENVFORGE_HOME/cache/index`` with their ETag /
  Last-Modified: within ``max_age`` seconds the cached copy is used without a request,
  later it is revalidated (``If-None-Match`` / ``If-Modified-Since``; a 304 keeps it).
  Wheel metadata never changes, so it is cached without expiry.
- :meth:`IndexClient.map` runs requests concurrently (daemon threads, :func:`envforge.core.net.
  run_all`), each with a timeout, all under the client's deadline.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, TypeVar

from envforge.core.fsutil import write_atomically
from envforge.core.jsonlimits import load_file
from envforge.core.net import (
    DEFAULT_DEADLINE,
    Deadline,
    NetError,
    Policy,
    Reply,
    decode_json,
    fetch,
    run_all,
    ssl_context,
)
from envforge.core.paths import state_dir
from envforge.errors import EnvforgeError
from envforge.knowledge.listing import (
    PEP691_HTML,
    PEP691_JSON,
    IndexFile,
    IndexProblem,
    Listing,
    parse_listing,
)

__all__ = [
    "PEP691_HTML",
    "PEP691_JSON",
    "IndexClient",
    "IndexFile",
    "IndexProblem",
    "Listing",
    "Response",
    "cuda_variant",
    "default_cache_dir",
    "parse_listing",
    "pip_index_url",
    "requires_dist",
]

#: Ask for the JSON form, accept HTML (PEP 691 content negotiation).
LISTING_ACCEPT = f"{PEP691_JSON}, {PEP691_HTML};q=0.2, text/html;q=0.01"
USER_AGENT = "envforge-knowledge-refresh"
#: Bytes read at most from one listing (the largest real ones are ~2 MB), one JSON API
#: document and one wheel's metadata file.
LISTING_LIMIT = 32 * 1024 * 1024
JSON_LIMIT = 16 * 1024 * 1024
METADATA_LIMIT = 1024 * 1024
#: A cache file holds one answer (escaped as JSON text: up to 6 bytes per byte).
CACHE_LIMIT = 6 * LISTING_LIMIT + 4096
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Response:
    url: str
    body: bytes
    content_type: str
    #: "network" (fetched), "revalidated" (304 on a cached copy) or "cache" (no request)
    origin: str


def requires_dist(metadata_text: str) -> tuple[str, ...]:
    """The ``Requires-Dist`` values of a core-metadata file (PEP 658 / PEP 566)."""
    message = HeaderParser().parsestr(metadata_text)
    return tuple(str(v).strip() for v in message.get_all("Requires-Dist") or ())


_CUDA_REQ = (
    # (requirement name pattern, how to read the CUDA version from it)
    re.compile(r"^nvidia-cuda-runtime-cu\d+\s*\(?\s*==\s*(\d+)\.(\d+)"),
    re.compile(r"^nvidia-cuda-nvrtc-cu\d+\s*\(?\s*==\s*(\d+)\.(\d+)"),
    re.compile(r"^cuda-toolkit(?:\[[^\]]*\])?\s*\(?\s*==\s*(\d+)\.(\d+)"),
)


def cuda_variant(requirements: Iterable[str]) -> str | None:
    """``cu130`` from a wheel's CUDA pins (``cuda-toolkit==13.0.3``,
    ``nvidia-cuda-runtime-cu12==12.4.127``); None without CUDA requirements."""
    reqs = [r.split(";", 1)[0].strip() for r in requirements]
    for pattern in _CUDA_REQ:
        for req in reqs:
            m = pattern.match(req)
            if m:
                return f"cu{m.group(1)}{m.group(2)}"
    return None


# --------------------------------------------------------------------------- client


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    return state_dir(environ) / "cache" / "index"


@dataclass
class _Stats:
    network: int = 0
    revalidated: int = 0
    cache: int = 0
    failed: int = 0


@dataclass
class IndexClient:
    """Fetches index pages concurrently, with a timeout and an ETag/Last-Modified cache,
    from the hosts of ``policy`` only, everything before ``deadline``."""

    cache_dir: Path | None = None
    timeout: float = 10.0
    workers: int = 16
    #: seconds a cached page is used without asking the server again
    max_age: float = 600.0
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    stats: _Stats = field(default_factory=_Stats)
    policy: Policy = field(default_factory=lambda: Policy(frozenset()))
    deadline: Deadline = field(default_factory=lambda: Deadline.start(DEFAULT_DEADLINE))

    def __post_init__(self) -> None:
        self._ssl = ssl_context(self.environ)
        #: hosts whose name did not resolve or that refused the connection: later
        #: requests to them fail at once with the same reason
        self._down: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ requests

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    def get(
        self,
        url: str,
        accept: str = "*/*",
        *,
        immutable: bool = False,
        limit: int = LISTING_LIMIT,
    ) -> Response | IndexProblem:
        """GET ``url`` through the cache; never raises for network or HTTP errors."""
        cached = self._load(url, accept)
        now = time.time()
        found = self._from_cache(url, cached, now, immutable=immutable)
        if found is not None:
            self._count("cache")
            return found
        if cached is not None and cached.get("status") == 404:
            cached = None
        reply = self._fetch(url, accept, cached, limit)
        if isinstance(reply, IndexProblem):
            self._count("failed")
            return reply
        if reply.status == 304 and cached is not None:
            cached["stored"] = now
            self._save(url, accept, cached)
            self._count("revalidated")
            return Response(url, _body(cached), str(cached["content_type"]), "revalidated")
        if reply.status != 200:
            self._count("failed")
            if reply.status == 404 and immutable and self.max_age > 0:
                self._save(url, accept, {"url": url, "stored": now, "status": 404, "body": ""})
            return IndexProblem(
                url, "http", f"HTTP {reply.status} {reply.reason}"[:200], reply.status
            )
        self._count("network")
        ctype = reply.header("content-type")
        etag, modified = reply.header("etag"), reply.header("last-modified")
        if etag or modified or immutable or self.max_age > 0:
            self._save(
                url,
                accept,
                {
                    "url": url,
                    "stored": now,
                    "etag": etag,
                    "last_modified": modified,
                    "content_type": ctype,
                    "body": reply.body.decode("utf-8", "surrogateescape"),
                },
            )
        return Response(url, reply.body, ctype, "network")

    def _from_cache(
        self, url: str, cached: dict[str, Any] | None, now: float, *, immutable: bool
    ) -> Response | IndexProblem | None:
        """The cached answer when it may be used without asking the server."""
        if cached is None:
            return None
        fresh = now - float(cached["stored"]) < self.max_age
        if cached.get("status") == 404:
            # a remembered 404 (wheel metadata the index does not serve)
            return IndexProblem(url, "http", "HTTP 404 Not Found (cached)", 404) if fresh else None
        if immutable or fresh:
            return Response(url, _body(cached), str(cached["content_type"]), "cache")
        return None

    def _fetch(
        self, url: str, accept: str, cached: Mapping[str, Any] | None, limit: int
    ) -> Reply | IndexProblem:
        host = url.split("://", 1)[-1].split("/", 1)[0]
        with self._lock:
            down = self._down.get(host)
        if down is not None:
            return IndexProblem(url, "unreachable", down)
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        if cached is not None:
            if cached.get("etag"):
                headers["If-None-Match"] = str(cached["etag"])
            if cached.get("last_modified"):
                headers["If-Modified-Since"] = str(cached["last_modified"])
        try:
            return fetch(
                url,
                self.policy,
                deadline=self.deadline,
                limit=limit,
                timeout=self.timeout,
                headers=headers,
                context=self._ssl,
            )
        except NetError as exc:
            if exc.lasting:
                with self._lock:
                    self._down.setdefault(host, exc.reason)
            return IndexProblem(exc.url, exc.kind, exc.reason)

    def listing(self, root: str, project: str) -> Listing | IndexProblem:
        """``ROOT/<project>/``: PEP 691 JSON if the server offers it, else PEP 503 HTML."""
        url = listing_url(root, project)
        got = self.get(url, LISTING_ACCEPT)
        if isinstance(got, IndexProblem):
            return got
        return parse_listing(got.body, got.content_type, url, project, got.origin)

    def metadata(self, file: IndexFile) -> str | IndexProblem:
        """The PEP 658 core metadata of a wheel (``<file url>.metadata``)."""
        got = self.get(file.url + ".metadata", immutable=True, limit=METADATA_LIMIT)
        if isinstance(got, IndexProblem):
            return got
        return got.body.decode("utf-8", "replace")

    def json(self, url: str) -> Any | IndexProblem:
        got = self.get(url, "application/json", limit=JSON_LIMIT)
        if isinstance(got, IndexProblem):
            return got
        try:
            return decode_json(got.body, max_bytes=JSON_LIMIT)
        except ValueError as exc:
            return IndexProblem(url, "malformed", f"invalid JSON ({exc})")

    def map(self, func: Callable[[T], R], items: Sequence[T], late: Callable[[T], R]) -> list[R]:
        """``func`` over ``items`` on up to ``workers`` threads, results in order; an
        item not done by the deadline gets ``late(item)``."""
        return run_all(func, items, deadline=self.deadline, late=late, workers=self.workers)

    def refusal(self, url: str) -> NetError | None:
        """Why the policy refuses ``url``; None when it may be read."""
        try:
            self.policy.check(url)
        except NetError as exc:
            return exc
        return None

    def late(self, url: str) -> IndexProblem:
        """The problem of a request the deadline cut."""
        with self._lock:
            self.stats.failed += 1
        return IndexProblem(url, "timeout", self.deadline.reason())

    # ------------------------------------------------------------------ cache

    def _path(self, url: str, accept: str) -> Path | None:
        if self.cache_dir is None:
            return None
        key = hashlib.sha256(f"{url}\0{accept}".encode()).hexdigest()
        return self.cache_dir / key[:2] / f"{key}.json"

    def _load(self, url: str, accept: str) -> dict[str, Any] | None:
        path = self._path(url, accept)
        if path is None:
            return None
        try:
            # bounded and regular files only: a FIFO or device in the cache is never read
            data = load_file(path, max_bytes=CACHE_LIMIT)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("url") != url or "body" not in data:
            return None
        if not isinstance(data.get("stored"), (int, float)):
            return None
        return data

    def _save(self, url: str, accept: str, data: Mapping[str, Any]) -> None:
        path = self._path(url, accept)
        if path is None:
            return
        try:
            write_atomically(path, json.dumps(dict(data)))
        except EnvforgeError:
            return  # a cache that cannot be written (fsutil's error) only costs time


def listing_url(root: str, project: str) -> str:
    return f"{root.rstrip('/')}/{project}/"


def _body(cached: Mapping[str, Any]) -> bytes:
    return str(cached["body"]).encode("utf-8", "surrogateescape")


def pip_index_url(environ: Mapping[str, str] | None = None) -> str:
    """The simple-API root pip is configured with: ``PIP_INDEX_URL``, pip's config files
    (``index-url`` in [global] or [install]), else pip's built-in default index."""
    env = os.environ if environ is None else environ
    if env.get("PIP_INDEX_URL"):
        return env["PIP_INDEX_URL"].split()[0].rstrip("/")
    try:
        from pip._internal.configuration import Configuration  # noqa: PLC0415 - pip is optional

        config = Configuration(isolated=False)
        config.load()
        for key in ("install.index-url", "global.index-url", ":env:.index-url"):
            try:
                value = config.get_value(key)
            except Exception:
                continue
            if isinstance(value, str) and value.strip():
                return value.split()[0].rstrip("/")
    except Exception:
        pass
    try:
        from pip._internal.models.index import PyPI  # noqa: PLC0415 - pip is optional

        return str(PyPI.simple_url).rstrip("/")
    except Exception:
        return ""
