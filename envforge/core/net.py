"""The one URL opener for every network read (``knowledge refresh``/``status``, registry
reads for ``evidence import``): what it may ask, for how long, and how much it takes.

- **Where**: only ``http``/``https`` URLs whose origin (scheme, host, port) is one the
  command was configured with (:class:`Policy`: the index roots, ``ENVFORGE_INDEX_MIRROR``,
  the registry given, ``ENVFORGE_ALLOW_HOSTS``). A URL a server names (a listing's file,
  a redirect, a token realm) is checked the same way; ``file://`` and every other scheme
  is refused and named. A redirect to another host or port is refused (the same host may
  upgrade to ``https``), except ``https`` → ``https`` for a registry's blob downloads
  (:attr:`Policy.hops`); never a downgrade to ``http``. Redirects on the configured hosts
  are followed up to :data:`MAX_REDIRECTS`.
- **How long**: every request has a per-request timeout and a shared :class:`Deadline`
  (default :data:`DEFAULT_DEADLINE` s, ``ENVFORGE_NET_DEADLINE`` or ``--deadline``);
  :func:`run_all` runs requests on daemon threads and stops waiting at the deadline, so a
  server that sends a byte every 2 s, or a name that never resolves, cannot hold a command,
  and Ctrl-C / SIGTERM end it at once (nothing waits for the threads). A transfer that
  cannot be bounded in advance (the engine's pull or push of an image) is bounded by its
  progress instead (:func:`follow`): nothing for that many seconds ends it.
- **How much**: bodies are read in chunks and refused as soon as they pass the caller's
  limit (a ``gzip`` body is decompressed chunk by chunk under the same limit).

Nothing here raises anything but :class:`NetError` for a request; the callers turn it
into their own problem values or :class:`~envforge.errors.Unavailable` (exit 4).
"""

from __future__ import annotations

import http.client
import os
import queue
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from envforge.core.jsonlimits import loads
from envforge.errors import Unavailable

DEFAULT_DEADLINE = 45.0
DEADLINE_ENV = "ENVFORGE_NET_DEADLINE"
ALLOW_ENV = "ENVFORGE_ALLOW_HOSTS"
MAX_REDIRECTS = 5
#: Largest JSON document decoded from the network (a listing's own limit is lower).
JSON_MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 16
_REDIRECTS = (301, 302, 303, 307, 308)

T = TypeVar("T")
R = TypeVar("R")
Kind = Literal["refused", "unreachable", "timeout", "http", "too-large", "malformed"]


class NotAnswered(Unavailable):
    """A server that did not answer (in time, or at all): exit 4, naming it. A server that
    answered something unusable is a plain :class:`~envforge.errors.Unavailable`."""


class NetError(Exception):
    """A request that gave no usable answer; ``kind`` says why."""

    def __init__(self, url: str, kind: Kind, reason: str, *, lasting: bool = False) -> None:
        super().__init__(f"{url}: {kind}: {reason}")
        self.url = url
        self.kind = kind
        self.reason = reason
        #: the host's name did not resolve or it refused the connection: the next
        #: request to it would fail the same way at once
        self.lasting = lasting


# --------------------------------------------------------------------------- policy

Origin = tuple[str, str, int]


def origin_of(url: str) -> Origin | None:
    """``(scheme, host, port)`` of an http(s) URL; None for any other URL."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def _show(origin: Origin) -> str:
    scheme, host, port = origin
    default = 443 if scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port == default else f":{port}")


@dataclass(frozen=True)
class Policy:
    """The origins a command may read from, and whether a redirect may leave them."""

    origins: frozenset[Origin]
    #: follow a redirect from https to https outside ``origins`` (a registry's blob
    #: download, which the distribution API lets a registry send to its storage); plain
    #: http never leaves ``origins``, loopback or not
    hops: bool = False

    @classmethod
    def for_urls(
        cls,
        urls: Iterable[str],
        environ: Mapping[str, str] | None = None,
        *,
        hops: bool = False,
    ) -> Policy:
        """The origins of ``urls``, of both sides of ``ENVFORGE_INDEX_MIRROR`` and of
        ``ENVFORGE_ALLOW_HOSTS`` (space-separated URLs or ``HOST[:PORT]``, meaning https)."""
        env = os.environ if environ is None else environ
        found = [origin_of(u) for u in urls]
        for pair in env.get("ENVFORGE_INDEX_MIRROR", "").split():
            found += [origin_of(u) for u in pair.split("=", 1)]
        for item in env.get(ALLOW_ENV, "").split():
            found.append(origin_of(item if "://" in item else f"https://{item}"))
        return cls(frozenset(o for o in found if o is not None), hops)

    def check(self, url: str, *, came_from: str | None = None) -> None:
        """NetError (refused) unless ``url`` may be read; ``came_from``: the URL that
        redirected to it."""
        origin = origin_of(url)
        if origin is None:
            scheme = urllib.parse.urlsplit(url).scheme or "no scheme"
            raise NetError(url, "refused", f"{scheme} URLs are not read (only http and https)")
        if origin in self.origins:
            return
        before = origin_of(came_from) if came_from else None
        if (
            before is not None
            and before[1] == origin[1]
            and origin[0] == "https"
            and (origin[2] in (before[2], 443))
        ):
            return  # the same host, upgraded to https (on its port, or https's own)
        if self.hops and before is not None and before[0] == origin[0] == "https":
            return  # a registry's blob in storage elsewhere: https only, never http
        allowed = ", ".join(sorted(_show(o) for o in self.origins)) or "none"
        what = f"a redirect from {came_from} to" if came_from else "a request to"
        raise NetError(
            url,
            "refused",
            f"{what} {_show(origin)}, which is not a configured host (configured: {allowed}; "
            f"add one with {ALLOW_ENV})",
        )


# --------------------------------------------------------------------------- deadline


@dataclass(frozen=True)
class Deadline:
    """One overall time budget, shared by every request of a command."""

    at: float
    seconds: float

    @classmethod
    def start(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        return self.at - time.monotonic()

    def reason(self) -> str:
        return (
            f"no answer within the overall deadline of {self.seconds:g} s "
            f"(--deadline or {DEADLINE_ENV})"
        )


def deadline_seconds(given: float | None, environ: Mapping[str, str] | None = None) -> float:
    """``given``, else ``ENVFORGE_NET_DEADLINE``, else :data:`DEFAULT_DEADLINE`;
    ValueError naming the variable for a value that is no positive number."""
    if given is not None:
        return given
    env = os.environ if environ is None else environ
    text = env.get(DEADLINE_ENV, "").strip()
    if not text:
        return DEFAULT_DEADLINE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86400:
        raise ValueError(f"{DEADLINE_ENV}={text!r} is not a number of seconds (0 < s < 86400)")
    return value


def run_all(
    func: Callable[[T], R],
    items: Sequence[T],
    *,
    deadline: Deadline,
    late: Callable[[T], R],
    workers: int = 16,
) -> list[R]:
    """``func`` over ``items`` on up to ``workers`` daemon threads, results in order; an
    item not done at the deadline gets ``late(item)``. The caller's thread only waits,
    in short slices, so Ctrl-C (or SIGTERM turned into it) stops it at once."""
    results: dict[int, R] = {}
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(items)):
        todo.put(i)
    done = threading.Condition()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            value = func(items[i])
            with done:
                results[i] = value
                done.notify_all()

    for _ in range(max(1, min(workers, len(items)))):
        threading.Thread(target=work, daemon=True, name="envforge-net").start()
    try:
        with done:
            while len(results) < len(items):
                left = deadline.left()
                if left <= 0:
                    break
                done.wait(min(left, 0.2))
            finished = dict(results)
    finally:
        stop.set()
    return [finished[i] if i in finished else late(items[i]) for i in range(len(items))]


def call(func: Callable[[], R], *, deadline: Deadline, what: str) -> R:
    """``func()`` on a daemon thread, waited for until the deadline; NetError (timeout)
    naming ``what`` after it. Exceptions ``func`` raises are raised here."""
    box: list[tuple[bool, Any]] = []

    def one(_: int) -> int:
        try:
            box.append((True, func()))
        except BaseException as exc:  # handed to the caller's thread
            box.append((False, exc))
        return 0

    run_all(one, [0], deadline=deadline, late=lambda _i: 0, workers=1)
    if not box:
        raise NetError(what, "timeout", deadline.reason())
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def follow(
    start: Callable[[], Iterable[T]],
    *,
    stall: float,
    what: str,
    moved: Callable[[T], bool] = lambda _item: True,
) -> Iterator[T]:
    """The items ``start()`` yields, read on a daemon thread; NetError (timeout) naming
    ``what`` when no item that ``moved`` calls progress comes for ``stall`` seconds (the
    others are still yielded). For a transfer whose length cannot be bounded in advance
    (the engine's pull or push of a many-GB image): its progress must keep moving. The
    caller's thread waits in short slices, so Ctrl-C stops it at once."""
    items: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()

    def work() -> None:
        try:
            for item in start():
                items.put((0, item))
            items.put((1, None))
        except BaseException as exc:  # handed to the caller's thread
            items.put((2, exc))

    threading.Thread(target=work, daemon=True, name="envforge-stream").start()
    last = time.monotonic()
    while True:
        try:
            kind, value = items.get(timeout=min(0.2, stall))
        except queue.Empty:
            kind, value = -1, None
        if kind in (-1, 0) and time.monotonic() - last >= stall:
            raise NetError(
                what, "timeout", f"no progress for {stall:g} s (--deadline or {DEADLINE_ENV})"
            )
        if kind == -1:
            continue
        if kind == 1:
            return
        if kind == 2:
            raise value
        if moved(value):
            last = time.monotonic()
        yield value


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Reply:
    url: str
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


def ssl_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    env = os.environ if environ is None else environ
    cafile = env.get("PIP_CERT") or env.get("SSL_CERT_FILE") or None
    if cafile and not os.path.isfile(cafile):
        cafile = None
    return ssl.create_default_context(cafile=cafile)


def fetch(
    url: str,
    policy: Policy,
    *,
    deadline: Deadline,
    limit: int,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    on_redirect: Callable[[str, str], Mapping[str, str]] | None = None,
    method: str = "GET",
    body: bytes | None = None,
) -> Reply:
    """GET ``url`` under ``policy``: redirects checked and followed (at most
    :data:`MAX_REDIRECTS`), the body read up to ``limit`` bytes; any status is a
    :class:`Reply` (the caller judges it). ``on_redirect(old, new)`` gives the headers
    for the next hop (e.g. without a token for another host). Another ``method`` (a
    registry upload: POST, PUT with ``body``) is sent once, its redirects not followed."""
    sent = dict(headers or {})
    first = url
    came_from: str | None = None
    try:
        for _ in range(MAX_REDIRECTS + 1):
            policy.check(url, came_from=came_from)
            reply = _once(
                url,
                sent,
                deadline=deadline,
                limit=limit,
                timeout=timeout,
                context=context,
                method=method,
                body=body,
            )
            location = reply.header("location")
            if reply.status not in _REDIRECTS or not location or method != "GET":
                return reply
            new = urllib.parse.urljoin(url, location.strip())
            if on_redirect is not None:
                sent = dict(on_redirect(url, new))
            came_from, url = url, new
    except NetError as exc:
        if exc.url == first:
            raise
        raise NetError(
            first, exc.kind, f"{exc.reason} (redirected to {exc.url})", lasting=exc.lasting
        ) from None
    raise NetError(first, "malformed", f"more than {MAX_REDIRECTS} redirects")


def _connection(
    url: str, timeout: float, context: ssl.SSLContext | None
) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    origin = origin_of(url)
    assert origin is not None  # checked by the policy
    scheme, host, port = origin
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(scheme)
    proxy_origin = origin_of(proxy) if proxy else None
    if scheme == "https":
        ctx = context or ssl_context()
        if proxy_origin is not None:
            tunnel = http.client.HTTPSConnection(
                proxy_origin[1], proxy_origin[2], timeout=timeout, context=ctx
            )
            tunnel.set_tunnel(host, port)
            return tunnel, target
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx), target
    if proxy_origin is not None:
        via = http.client.HTTPConnection(proxy_origin[1], proxy_origin[2], timeout=timeout)
        return via, url.split("#", 1)[0]
    return http.client.HTTPConnection(host, port, timeout=timeout), target


def _once(
    url: str,
    headers: Mapping[str, str],
    *,
    deadline: Deadline,
    limit: int,
    timeout: float,
    context: ssl.SSLContext | None,
    method: str = "GET",
    body: bytes | None = None,
) -> Reply:
    left = deadline.left()
    if left <= 0:
        raise NetError(url, "timeout", deadline.reason())
    conn, target = _connection(url, min(timeout, left), context)
    try:
        conn.request(method, target, body=body, headers={"Accept-Encoding": "gzip", **headers})
        resp = conn.getresponse()
        got = {k.lower(): v for k, v in resp.getheaders()}
        body = _read(resp, conn, url, got, deadline=deadline, limit=limit, timeout=timeout)
        return Reply(url, resp.status, resp.reason, got, body)
    except (TimeoutError, socket.timeout):
        raise NetError(url, "timeout", f"no answer within {min(timeout, left):g} s") from None
    except ssl.SSLError as exc:
        raise NetError(url, "unreachable", f"TLS: {exc.reason or exc}") from None
    except http.client.HTTPException as exc:
        raise NetError(url, "malformed", f"not an HTTP answer ({type(exc).__name__})") from None
    except OSError as exc:
        lasting = isinstance(exc, (socket.gaierror, ConnectionRefusedError))
        raise NetError(
            url, "unreachable", exc.strerror or str(exc) or type(exc).__name__, lasting=lasting
        ) from None
    finally:
        conn.close()


def _read(
    resp: http.client.HTTPResponse,
    conn: http.client.HTTPConnection,
    url: str,
    headers: Mapping[str, str],
    *,
    deadline: Deadline,
    limit: int,
    timeout: float,
) -> bytes:
    """The body, chunk by chunk: NetError (too-large) past ``limit`` decoded bytes,
    (timeout) past the deadline, however slowly the server sends."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", ""):
        raise NetError(url, "malformed", f"unsupported Content-Encoding {encoding!r}")
    declared = headers.get("content-length", "")
    if encoding in ("identity", "") and declared.isdigit() and int(declared) > limit:
        raise NetError(url, "too-large", f"{declared} bytes announced; the limit is {limit}")
    inflate = None if encoding in ("identity", "") else zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    received = 0
    while True:
        left = deadline.left()
        if left <= 0:
            raise NetError(url, "timeout", deadline.reason())
        if conn.sock is not None:
            conn.sock.settimeout(min(timeout, left))
        chunk = resp.read1(_CHUNK)
        if not chunk:
            break
        received += len(chunk)
        if received > limit:
            raise NetError(url, "too-large", f"more than {limit} bytes")
        if inflate is None:
            out += chunk
        else:
            _inflate(inflate, chunk, out, url, limit)
        if len(out) > limit:
            raise NetError(url, "too-large", f"more than {limit} bytes (decoded)")
    if inflate is not None and not inflate.eof:
        raise NetError(url, "malformed", "truncated gzip body")
    return bytes(out)


def _inflate(inflate: Any, chunk: bytes, out: bytearray, url: str, limit: int) -> None:
    data = chunk
    while data:
        try:
            out += inflate.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise NetError(url, "malformed", f"bad gzip body ({exc})") from None
        if len(out) > limit:
            raise NetError(url, "too-large", f"more than {limit} bytes (decoded)")
        data = inflate.unconsumed_tail


# --------------------------------------------------------------------------- JSON


def decode_json(data: bytes | str, *, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """JSON text -> value through the one decoder (:func:`envforge.core.jsonlimits.loads`:
    size, depth and number limits); its BadJSON is a ValueError."""
    return loads(data, max_bytes=max_bytes)
