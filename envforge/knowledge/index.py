"""A small client for Python package indexes: PEP 691 (JSON), PEP 503 (HTML), PEP 658.

Used by ``envforge knowledge refresh`` / ``status`` to read what an index lists. Only the
standard library talks to the network (urllib); nothing here raises on a bad answer:
every request either gives a :class:`Response` or an :class:`IndexProblem` naming the URL
and what went wrong (unreachable, timeout, HTTP status, malformed listing).

- :meth:`IndexClient.listing` fetches ``ROOT/<project>/`` asking for the PEP 691 JSON form
  and falls back to PEP 503 HTML (content negotiation: whatever the server sends is parsed
  by its content type).
- :meth:`IndexClient.metadata` reads a wheel's PEP 658 ``.metadata`` file.
- Responses are cached under ``$ENVFORGE_HOME/cache/index`` with their ETag /
  Last-Modified: within ``max_age`` seconds the cached copy is used without a request,
  later it is revalidated (``If-None-Match`` / ``If-Modified-Since``; a 304 keeps it).
  Wheel metadata never changes, so it is cached without expiry.
- :meth:`IndexClient.map` runs requests concurrently (a thread pool), each with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import HeaderParser
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal, TypeVar

from packaging.utils import (
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from envforge.fsutil import write_atomically
from envforge.jsonlimits import load_file, loads
from envforge.paths import state_dir

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
PEP691_HTML = "application/vnd.pypi.simple.v1+html"
#: Ask for the JSON form, accept HTML (PEP 691 content negotiation).
LISTING_ACCEPT = f"{PEP691_JSON}, {PEP691_HTML};q=0.2, text/html;q=0.01"
USER_AGENT = "envforge-knowledge-refresh"

Form = Literal["json", "html"]
ProblemKind = Literal["unreachable", "timeout", "http", "malformed"]
T = TypeVar("T")
R = TypeVar("R")

_CP_RE = re.compile(r"^cp(\d)(\d+)$")


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class IndexProblem:
    """A request that gave no usable answer: ``kind`` is unreachable/timeout/http/malformed."""

    url: str
    kind: ProblemKind
    reason: str
    status: int | None = None

    def one_line(self) -> str:
        return f"{self.url}: {self.kind}: {self.reason}"


@dataclass(frozen=True)
class Response:
    url: str
    body: bytes
    content_type: str
    #: "network" (fetched), "revalidated" (304 on a cached copy) or "cache" (no request)
    origin: str


@dataclass(frozen=True)
class IndexFile:
    """One distribution file of a project listing."""

    filename: str
    url: str
    #: public version (``2.13.0``) and local label (``cu130``) or None
    version: str
    local: str | None
    #: CPython versions (``3.11``) of the file's non-free-threaded cpXY tags
    pythons: tuple[str, ...]
    #: CPython versions of free-threaded (``cp314t``) tags
    pythons_t: tuple[str, ...]
    linux_x86_64: bool
    yanked: bool
    yanked_reason: str
    requires_python: str
    #: the listing announced PEP 658 metadata (True/False), or said nothing (None)
    has_metadata: bool | None

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class Listing:
    """A project page (``ROOT/<project>/``) as parsed."""

    url: str
    project: str
    form: Form
    files: tuple[IndexFile, ...]
    origin: str
    #: file names that are no distribution file envforge can read (skipped)
    skipped: tuple[str, ...] = ()

    def versions(self) -> tuple[str, ...]:
        """Final public versions with at least one file, oldest first."""
        found = {f.version for f in self.files if not Version(f.version).is_prerelease}
        return tuple(sorted(found, key=Version))

    def files_of(self, version: str, local: str | None = None) -> tuple[IndexFile, ...]:
        return tuple(f for f in self.files if f.version == version and f.local == local)

    def yanked_versions(self) -> tuple[str, ...]:
        """Versions whose every file is yanked."""
        out = []
        for v in self.versions():
            files = [f for f in self.files if f.version == v]
            if files and all(f.yanked for f in files):
                out.append(v)
        return tuple(out)


# --------------------------------------------------------------------------- parsing


def parse_listing(
    body: bytes, content_type: str, url: str, project: str, origin: str = "network"
) -> Listing | IndexProblem:
    """A PEP 691 JSON or PEP 503 HTML project page → :class:`Listing`, or the problem."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return IndexProblem(url, "malformed", f"not UTF-8 ({exc.reason} at byte {exc.start})")
    if ctype in (PEP691_JSON, "application/json"):
        return _parse_json(text, url, project, origin)
    if ctype in (PEP691_HTML, "text/html", ""):
        return _parse_html(text, url, project, origin)
    return IndexProblem(url, "malformed", f"unexpected content type {ctype!r}")


def _parse_json(text: str, url: str, project: str, origin: str) -> Listing | IndexProblem:
    try:
        data = loads(text, max_bytes=MAX_JSON_BYTES)
    except ValueError as exc:
        return IndexProblem(url, "malformed", f"invalid JSON ({exc})")
    if not isinstance(data, dict):
        return IndexProblem(url, "malformed", "the JSON page is not an object")
    meta = data.get("meta")
    api = meta.get("api-version") if isinstance(meta, dict) else None
    if not isinstance(api, str) or not api.startswith("1."):
        return IndexProblem(url, "malformed", f"meta.api-version is {api!r}, not 1.x (PEP 691)")
    files = data.get("files")
    if not isinstance(files, list):
        return IndexProblem(url, "malformed", "no 'files' list (PEP 691)")
    out: list[IndexFile] = []
    skipped: list[str] = []
    for i, item in enumerate(files):
        if not isinstance(item, dict):
            return IndexProblem(url, "malformed", f"files[{i}] is not an object")
        name, href = item.get("filename"), item.get("url")
        if not isinstance(name, str) or not isinstance(href, str):
            return IndexProblem(url, "malformed", f"files[{i}] lacks a filename or url")
        yanked = item.get("yanked", False)
        meta_flag = item.get("core-metadata", item.get("data-dist-info-metadata"))
        rp = item.get("requires-python")
        entry = _file(
            name,
            urllib.parse.urljoin(url, href),
            yanked=bool(yanked),
            yanked_reason=yanked if isinstance(yanked, str) else "",
            requires_python=rp if isinstance(rp, str) else "",
            has_metadata=None if meta_flag is None else bool(meta_flag),
        )
        if entry is None:
            skipped.append(name)
        else:
            out.append(entry)
    return Listing(url, project, "json", tuple(out), origin, tuple(skipped))


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self.tags = 0
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags += 1
        if tag == "a":
            self._open = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def _parse_html(text: str, url: str, project: str, origin: str) -> Listing | IndexProblem:
    parser = _Anchors()
    try:
        parser.feed(text)
        parser.close()
    except Exception as exc:  # html.parser is lenient; anything it raises is malformed input
        return IndexProblem(url, "malformed", f"unparseable HTML ({exc})")
    if parser.tags == 0:
        return IndexProblem(url, "malformed", "not an HTML page (no tags)")
    out: list[IndexFile] = []
    skipped: list[str] = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        target = urllib.parse.urljoin(url, href)
        name = label or urllib.parse.unquote(urllib.parse.urlsplit(target).path.rsplit("/", 1)[-1])
        yanked = "data-yanked" in attrs
        meta_attr = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        has_meta: bool | None
        if "data-core-metadata" in attrs or "data-dist-info-metadata" in attrs:
            has_meta = meta_attr != "false"
        else:
            has_meta = None
        entry = _file(
            name,
            target.split("#", 1)[0],
            yanked=yanked,
            yanked_reason=attrs.get("data-yanked") or "",
            requires_python=attrs.get("data-requires-python") or "",
            has_metadata=has_meta,
        )
        if entry is None:
            skipped.append(name)
        else:
            out.append(entry)
    return Listing(url, project, "html", tuple(out), origin, tuple(skipped))


#: The JSON decoder's ceiling for index pages and cached answers (envforge.jsonlimits:
#: depth and number limits; the network layer bounds what it reads).
MAX_JSON_BYTES = 256 * 1024 * 1024
#: Characters a listed file name may have (real wheel names have fewer than 200).
MAX_FILE_NAME = 512


def _file(
    name: str,
    url: str,
    *,
    yanked: bool,
    yanked_reason: str,
    requires_python: str,
    has_metadata: bool | None,
) -> IndexFile | None:
    """One listed file; None for names that are no wheel or sdist of a valid version, and
    for hostile entries: a name longer than :data:`MAX_FILE_NAME` (a 5,000-digit version
    would cost quadratic time to convert), a URL with a control character or a space."""
    if len(name) > MAX_FILE_NAME or any(not ch.isprintable() or ch.isspace() for ch in url):
        return None
    pythons: set[str] = set()
    pythons_t: set[str] = set()
    linux = False
    try:
        if name.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(name)
            for tag in tags:
                m = _CP_RE.match(tag.interpreter)
                if "linux" in tag.platform and tag.platform.endswith("_x86_64"):
                    linux = True
                if m is None:
                    continue
                py = f"{m.group(1)}.{m.group(2)}"
                (pythons_t if tag.abi.endswith("t") else pythons).add(py)
        elif name.endswith((".tar.gz", ".zip")):
            _, version = parse_sdist_filename(name)
        else:
            return None
    except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, too many digits
        return None
    return IndexFile(
        filename=name,
        url=url,
        version=version.public,
        local=version.local,
        pythons=tuple(sorted(pythons, key=_py_key)),
        pythons_t=tuple(sorted(pythons_t, key=_py_key)),
        linux_x86_64=linux,
        yanked=yanked,
        yanked_reason=yanked_reason,
        requires_python=requires_python,
        has_metadata=has_metadata,
    )


def _py_key(py: str) -> tuple[int, ...]:
    return tuple(int(p) for p in py.split("."))


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


def _ssl_context(environ: Mapping[str, str]) -> ssl.SSLContext:
    cafile = environ.get("PIP_CERT") or environ.get("SSL_CERT_FILE") or None
    if cafile and not Path(cafile).is_file():
        cafile = None
    return ssl.create_default_context(cafile=cafile)


@dataclass
class _Stats:
    network: int = 0
    revalidated: int = 0
    cache: int = 0
    failed: int = 0


@dataclass
class IndexClient:
    """Fetches index pages concurrently, with a timeout and an ETag/Last-Modified cache."""

    cache_dir: Path | None = None
    timeout: float = 10.0
    workers: int = 16
    #: seconds a cached page is used without asking the server again
    max_age: float = 600.0
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    stats: _Stats = field(default_factory=_Stats)

    def __post_init__(self) -> None:
        self._ssl = _ssl_context(self.environ)
        #: hosts whose name did not resolve or that refused the connection: later
        #: requests to them fail at once with the same reason
        self._down: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ requests

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    def get(
        self, url: str, accept: str = "*/*", *, immutable: bool = False
    ) -> Response | IndexProblem:
        """GET ``url`` through the cache; never raises for network or HTTP errors."""
        cached = self._load(url, accept)
        now = time.time()
        fresh = cached is not None and now - float(cached["stored"]) < self.max_age
        if cached is not None and cached.get("status") == 404:
            if fresh:  # a remembered 404 (wheel metadata the index does not serve)
                self._count("cache")
                return IndexProblem(url, "http", "HTTP 404 Not Found (cached)", 404)
            cached = None
        elif cached is not None and (immutable or fresh):
            self._count("cache")
            return Response(url, _body(cached), str(cached["content_type"]), "cache")
        host = urllib.parse.urlsplit(url).netloc
        with self._lock:
            down = self._down.get(host)
        if down is not None:
            self._count("failed")
            return IndexProblem(url, "unreachable", down)
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        if cached is not None:
            if cached.get("etag"):
                headers["If-None-Match"] = str(cached["etag"])
            if cached.get("last_modified"):
                headers["If-Modified-Since"] = str(cached["last_modified"])
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as resp:
                body = resp.read()
                ctype = resp.headers.get("Content-Type", "")
                etag = resp.headers.get("ETag")
                modified = resp.headers.get("Last-Modified")
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 304 and cached is not None:
                cached["stored"] = now
                self._save(url, accept, cached)
                self._count("revalidated")
                return Response(url, _body(cached), str(cached["content_type"]), "revalidated")
            self._count("failed")
            if exc.code == 404 and immutable and self.max_age > 0:
                self._save(url, accept, {"url": url, "stored": now, "status": 404, "body": ""})
            return IndexProblem(url, "http", f"HTTP {exc.code} {exc.reason}", exc.code)
        except (TimeoutError, socket.timeout):
            self._count("failed")
            return IndexProblem(url, "timeout", f"no answer within {self.timeout:g} s")
        except urllib.error.URLError as exc:
            self._count("failed")
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                return IndexProblem(url, "timeout", f"no answer within {self.timeout:g} s")
            if isinstance(exc.reason, (socket.gaierror, ConnectionRefusedError)):
                with self._lock:
                    self._down.setdefault(host, str(exc.reason))
            return IndexProblem(url, "unreachable", str(exc.reason))
        except (OSError, ValueError) as exc:  # connection reset, bad URL, ssl errors
            self._count("failed")
            return IndexProblem(url, "unreachable", str(exc) or type(exc).__name__)
        self._count("network")
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
                    "body": body.decode("utf-8", "surrogateescape"),
                },
            )
        return Response(url, body, ctype, "network")

    def listing(self, root: str, project: str) -> Listing | IndexProblem:
        """``ROOT/<project>/``: PEP 691 JSON if the server offers it, else PEP 503 HTML."""
        url = f"{root.rstrip('/')}/{project}/"
        got = self.get(url, LISTING_ACCEPT)
        if isinstance(got, IndexProblem):
            return got
        return parse_listing(got.body, got.content_type, url, project, got.origin)

    def metadata(self, file: IndexFile) -> str | IndexProblem:
        """The PEP 658 core metadata of a wheel (``<file url>.metadata``)."""
        got = self.get(file.url + ".metadata", immutable=True)
        if isinstance(got, IndexProblem):
            return got
        return got.body.decode("utf-8", "replace")

    def json(self, url: str) -> Any | IndexProblem:
        got = self.get(url, "application/json")
        if isinstance(got, IndexProblem):
            return got
        try:
            return loads(got.body, max_bytes=MAX_JSON_BYTES)
        except ValueError as exc:
            return IndexProblem(url, "malformed", f"invalid JSON ({exc})")

    def map(self, func: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``func`` over ``items`` on up to ``workers`` threads, results in order."""
        if len(items) <= 1:
            return [func(i) for i in items]
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(items)))) as pool:
            return list(pool.map(func, items))

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
            data = load_file(path, max_bytes=MAX_JSON_BYTES)
        except (OSError, ValueError):  # a FIFO or device in the cache is never read
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
        except OSError:
            return  # a cache that cannot be written only costs time


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
