"""Project pages of a Python package index as values: PEP 691 (JSON) and PEP 503 (HTML).

Parsing is linear in the page's size, whatever a hostile index sends: the HTML form is
read by a scanner that looks at each character a bounded number of times (no
``html.parser``, whose handling of unclosed constructs is quadratic), wheel names of the
usual form are split by one anchored regular expression, each distinct version string is
parsed once, and :class:`Listing` indexes its files by version once. JSON goes through the
one decoder (:func:`envforge.core.net.decode_json`: nesting is bounded).
"""

from __future__ import annotations

import functools
import html
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Literal

from packaging.tags import parse_tag
from packaging.utils import InvalidSdistFilename, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from envforge.core.net import decode_json

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
PEP691_HTML = "application/vnd.pypi.simple.v1+html"
#: Longest version string read from a file name (a 5,000-digit version is no release).
MAX_VERSION = 64
#: Longest file name read from a listing (real wheel names have fewer than 200).
MAX_NAME = 512
#: Largest page decoded (envforge.knowledge.index reads at most 32 MiB of one).
MAX_PAGE = 64 * 1024 * 1024

Form = Literal["json", "html"]
ProblemKind = Literal["unreachable", "timeout", "http", "malformed", "refused", "too-large"]
VersionKey = tuple[object, ...]

_CP_RE = re.compile(r"^cp(\d)(\d+)$")
_WHEEL_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[^-]+)"
    r"(?:-(?P<build>\d[^-]*))?-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl$"
)
#: PEP 440 versions in canonical-ish form: release, pre, post, dev, local
_VERSION_RE = re.compile(
    r"^(?P<release>(?:0|[1-9]\d{0,8})(?:\.(?:0|[1-9]\d{0,8})){0,7})(?:(?P<pre>a|b|rc)(?P<pren>0|[1-9]\d{0,8}))?"
    r"(?:\.post(?P<post>0|[1-9]\d{0,8}))?(?:\.dev(?P<dev>0|[1-9]\d{0,8}))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:\.[a-z0-9]+)*))?$"
)
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}


@dataclass(frozen=True)
class IndexProblem:
    """A request that gave no usable answer: ``kind`` is unreachable/timeout/http/
    malformed/refused/too-large."""

    url: str
    kind: ProblemKind
    reason: str
    status: int | None = None

    def one_line(self) -> str:
        return f"{self.url}: {self.kind}: {self.reason}"


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
    #: PEP 700 ``upload-time`` to the second (``2026-07-08T16:07:27``, UTC), or ""
    upload_time: str = ""

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
    _by_version: dict[tuple[str, str | None], list[IndexFile]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _public: dict[str, list[IndexFile]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _final: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in self.files:
            self._by_version.setdefault((f.version, f.local), []).append(f)
            self._public.setdefault(f.version, []).append(f)

    def versions(self) -> tuple[str, ...]:
        """Final public versions with at least one file, oldest first."""
        if not self._final:
            keys = {v: version_key(v) for v in self._public}
            final = [v for v, k in keys.items() if not k[-1]]
            self._final.extend(sorted(final, key=keys.__getitem__))
        return tuple(self._final)

    def files_of(self, version: str, local: str | None = None) -> tuple[IndexFile, ...]:
        return tuple(self._by_version.get((version, local), ()))

    def files_of_version(self, version: str) -> tuple[IndexFile, ...]:
        """Every file of a public version, whatever its local label."""
        return tuple(self._public.get(version, ()))

    def yanked_versions(self) -> tuple[str, ...]:
        """Versions whose every file is yanked."""
        return tuple(v for v in self.versions() if all(f.yanked for f in self._public[v]))


@functools.lru_cache(maxsize=1024)
def version_key(version: str) -> VersionKey:
    """A sort key ordering public versions as PEP 440 does; its last item is True for
    pre-releases and development releases. Canonical forms are read by one regular
    expression, others by ``packaging``."""
    m = _VERSION_RE.match(version)
    if m is not None:
        release = tuple(int(p) for p in m["release"].split("."))
        pre = (_PRE_ORDER[m["pre"]], int(m["pren"])) if m["pre"] else None
        post = int(m["post"]) if m["post"] is not None else None
        dev = int(m["dev"]) if m["dev"] is not None else None
    else:
        parsed = Version(version)
        release, post, dev = parsed.release, parsed.post, parsed.dev
        pre = (_PRE_ORDER[parsed.pre[0]], parsed.pre[1]) if parsed.pre else None
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    if pre is None and post is None and dev is not None:
        pre_key: tuple[int, int] = (-1, 0)
    else:
        pre_key = pre if pre is not None else (3, 0)
    return (
        release,
        pre_key,
        -1 if post is None else post,
        (0, dev) if dev is not None else (1, 0),
        pre is not None or dev is not None,
    )


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
        data = decode_json(text, max_bytes=MAX_PAGE)
    except ValueError as exc:
        return IndexProblem(url, "malformed", f"invalid JSON ({exc})")
    if not isinstance(data, dict):
        return IndexProblem(url, "malformed", "the JSON page is not an object")
    meta = data.get("meta")
    api = meta.get("api-version") if isinstance(meta, dict) else None
    if not isinstance(api, str) or not api.startswith("1."):
        return IndexProblem(url, "malformed", f"meta.api-version is {api!r:.40}, not 1.x (PEP 691)")
    files = data.get("files")
    if not isinstance(files, list):
        return IndexProblem(url, "malformed", "no 'files' list (PEP 691)")
    parser = _Files(url)
    for i, item in enumerate(files):
        if not isinstance(item, dict):
            return IndexProblem(url, "malformed", f"files[{i}] is not an object")
        name, href = item.get("filename"), item.get("url")
        if not isinstance(name, str) or not isinstance(href, str):
            return IndexProblem(url, "malformed", f"files[{i}] lacks a filename or url")
        yanked = item.get("yanked", False)
        meta_flag = item.get("core-metadata", item.get("data-dist-info-metadata"))
        rp = item.get("requires-python")
        uploaded = item.get("upload-time")
        parser.add(
            name,
            href,
            yanked=bool(yanked),
            yanked_reason=yanked if isinstance(yanked, str) else "",
            requires_python=rp if isinstance(rp, str) else "",
            has_metadata=None if meta_flag is None else bool(meta_flag),
            upload_time=_upload_time(uploaded),
        )
    return Listing(url, project, "json", tuple(parser.files), origin, tuple(parser.skipped))


def _parse_html(text: str, url: str, project: str, origin: str) -> Listing | IndexProblem:
    anchors, tags = scan_anchors(text)
    if tags == 0:
        return IndexProblem(url, "malformed", "not an HTML page (no tags)")
    parser = _Files(url)
    for attrs, label in anchors:
        href = attrs.get("href")
        if not href:
            continue
        target = parser.resolve(href)
        name = label or urllib.parse.unquote(urllib.parse.urlsplit(target).path.rsplit("/", 1)[-1])
        has_meta: bool | None = None
        for key in ("data-core-metadata", "data-dist-info-metadata"):
            if key in attrs:
                has_meta = attrs[key] != "false"
                break
        parser.add(
            name,
            href,
            yanked="data-yanked" in attrs,
            yanked_reason=attrs.get("data-yanked") or "",
            requires_python=attrs.get("data-requires-python") or "",
            has_metadata=has_meta,
        )
    return Listing(url, project, "html", tuple(parser.files), origin, tuple(parser.skipped))


_ATTR_RE = re.compile(r"""([^\s"'<>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def scan_anchors(text: str) -> tuple[list[tuple[dict[str, str], str]], int]:
    """The ``<a>`` elements of an HTML page (attributes, text) and the number of tags,
    in one left-to-right pass: each position is looked at a bounded number of times."""
    anchors: list[tuple[dict[str, str], str]] = []
    tags = 0
    pos = 0
    current: dict[str, str] | None = None
    texts: list[str] = []
    size = len(text)
    while pos < size:
        lt = text.find("<", pos)
        if lt < 0:
            lt = size
        if current is not None and lt > pos:
            texts.append(text[pos:lt])
        if lt >= size:
            break
        if text.startswith("<!--", lt):
            end = text.find("-->", lt + 4)
            pos = size if end < 0 else end + 3
            continue
        gt = text.find(">", lt + 1)
        if gt < 0:
            break
        pos = gt + 1
        body = text[lt + 1 : gt]
        closing = body.startswith("/")
        name = _NAME_RE.match(body, 1 if closing else 0)
        if name is None:
            continue
        tags += 1
        tag = name.group(0).lower()
        if tag != "a":
            continue
        if closing:
            if current is not None:
                anchors.append((current, html.unescape("".join(texts)).strip()))
                current = None
            continue
        current = {}
        for m in _ATTR_RE.finditer(body, name.end()):
            value = next((g for g in m.groups()[1:] if g is not None), "")
            current.setdefault(m.group(1).lower(), html.unescape(value))
        texts = []
    return anchors, tags


@dataclass
class _Files:
    """Builds the files of one listing; one parse per distinct version string."""

    url: str
    files: list[IndexFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    _versions: dict[str, tuple[str, str | None] | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        self._origin = f"{parts.scheme}://{parts.netloc}"

    def resolve(self, href: str) -> str:
        """``href`` against the page URL, without its fragment; the cheap common cases
        (absolute http(s) URLs, absolute paths) without ``urljoin``."""
        href = href.split("#", 1)[0].strip()
        if href.startswith(("https://", "http://")):
            return href
        if href.startswith("/") and not href.startswith("//"):
            return self._origin + href
        return urllib.parse.urljoin(self.url, href)

    def _version(self, text: str) -> tuple[str, str | None] | None:
        """(public version, local label) of a version string, parsed once."""
        if text not in self._versions:
            self._versions[text] = _split_version(text)
        return self._versions[text]

    def add(
        self,
        name: str,
        href: str,
        *,
        yanked: bool,
        yanked_reason: str,
        requires_python: str,
        has_metadata: bool | None,
        upload_time: str = "",
    ) -> None:
        found = self._read_name(name) if len(name) <= MAX_NAME and _clean(href) else None
        if found is None:
            self.skipped.append(name[:MAX_NAME])
            return
        (public, local), pythons, pythons_t, linux = found
        self.files.append(
            IndexFile(
                filename=name,
                url=self.resolve(href),
                version=public,
                local=local,
                pythons=pythons,
                pythons_t=pythons_t,
                linux_x86_64=linux,
                yanked=yanked,
                yanked_reason=yanked_reason,
                requires_python=requires_python,
                has_metadata=has_metadata,
                upload_time=upload_time,
            )
        )

    def _read_name(
        self, name: str
    ) -> tuple[tuple[str, str | None], tuple[str, ...], tuple[str, ...], bool] | None:
        """(version, CPython versions, free-threaded ones, Linux x86_64) of a wheel or
        sdist name; None for anything else."""
        if name.endswith(".whl"):
            m = _WHEEL_RE.match(name)
            version = self._version(m["version"]) if m else None
            if m is None or version is None:
                return None
            return (version, *_tag_info(m["tags"]))
        if name.endswith((".tar.gz", ".zip")):
            try:
                _, sdist_version = parse_sdist_filename(name)
            except (InvalidSdistFilename, InvalidVersion):
                return None
            return (sdist_version.public, sdist_version.local), (), (), False
        return None


_UPLOAD_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def _upload_time(value: object) -> str:
    """A PEP 700 ``upload-time`` cut to the second (UTC: fixed width, compares as text);
    "" for anything else."""
    if not isinstance(value, str):
        return ""
    m = _UPLOAD_RE.match(value)
    return m.group(0) if m is not None else ""


def _clean(href: str) -> bool:
    """No control character or space in a listed URL (an ESC would reach the terminal)."""
    return href.isprintable() and not any(ch.isspace() for ch in href)


def _split_version(text: str) -> tuple[str, str | None] | None:
    if len(text) > MAX_VERSION or not text.isascii():
        return None
    m = _VERSION_RE.match(text)
    if m is not None:
        return text.split("+", 1)[0], m["local"]
    try:
        parsed = Version(text)
    except InvalidVersion:
        return None
    return parsed.public, parsed.local


@functools.lru_cache(maxsize=1024)
def _tag_info(text: str) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(CPython versions, free-threaded ones, Linux x86_64) of a wheel's tag triple."""
    try:
        tags = parse_tag(text)
    except ValueError:
        return (), (), False
    pythons: set[str] = set()
    pythons_t: set[str] = set()
    linux = False
    for tag in tags:
        if "linux" in tag.platform and tag.platform.endswith("_x86_64"):
            linux = True
        cp = _CP_RE.match(tag.interpreter)
        if cp is not None:
            py = f"{cp.group(1)}.{cp.group(2)}"
            (pythons_t if tag.abi.endswith("t") else pythons).add(py)
    return tuple(sorted(pythons, key=_py_key)), tuple(sorted(pythons_t, key=_py_key)), linux


def _py_key(py: str) -> tuple[int, ...]:
    return tuple(int(p) for p in py.split("."))
