"""A hostile HTTP server on 127.0.0.1 for the network commands (index and registry).

Routes (``<p>`` is any project, e.g. ``torch``):

- ``/drip/<p>/``: 200 and headers, then one byte every :data:`DRIP_SECONDS` s, for ever.
- ``/stall/<p>/``: reads the request and sends nothing.
- ``/huge/<p>/``: a JSON page that never ends (no Content-Length), up to 2 GB.
- ``/announced/<p>/``: ``Content-Length: 3000000000``, then bytes.
- ``/bomb/<p>/``: ``Content-Encoding: gzip``, 128 KB that inflate to 128 MB.
- ``/cross/<p>/``: a redirect to the same path on ``localhost`` (another host).
- ``/otherport/<p>/``: a redirect to the decoy (another port of 127.0.0.1).
- ``/loop/<p>/``: a redirect to itself, for ever.
- ``/hops/<n>/<p>/``: ``n`` (at least 1) redirects on this server, the last to
  ``/simple/<p>/``.
- ``/tofile/<p>/``: a redirect to ``file:///etc/passwd``.
- ``/deep/<p>/``: JSON nested 100,000 levels deep.
- ``/badhttp/<p>/``: no HTTP status line.
- ``/corpus/<name>/<p>/``: the file ``tests/fixtures/hostile-index/<name>`` (``.json`` as PEP 691,
  ``.html`` as HTML), the recorded numpy page for ``numpy``.
- ``/simple/<p>/``: the recorded pages (tests/fixtures/index), as a well-behaved root.
- ``/v2/...``: a registry whose behaviour is :attr:`HostileServer.registry`: ``drip``
  (the config blob drips), ``realm-file`` / ``realm-other`` / ``realm-port`` (a token realm
  on ``file://`` / on another host / on the decoy), ``redirect-other`` / ``redirect-port``
  (blobs redirected to a non-loopback http host / to the decoy), ``loop`` (the manifest
  redirects to itself), ``huge`` (an endless manifest), ``deep`` (a manifest nested
  100,000 levels), ``stall`` (no answer to any request, of any method: a registry that
  stopped answering a pull or a push).

Every request is recorded (path), so a test can wait for the client to be stalled. The
decoy is a second server on another port of 127.0.0.1 that answers every request with the
recorded torch page (or a token), recording it in :attr:`HostileServer.decoy_requests`: a
client that follows a redirect or realm there would succeed, so a refusal is visible.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.httpserver import Handler, serving

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fixtures" / "hostile-index"
RECORDED = ROOT / "fixtures" / "index"
PEP691 = "application/vnd.pypi.simple.v1+json"
DRIP_SECONDS = 2.0
#: the longest any hostile answer keeps a connection (the tests end long before)
MAX_SECONDS = 120.0


_BOMB: list[bytes] = []


def bomb() -> bytes:
    """gzip of 128 MB of spaces (about 128 KB; the listing limit is 32 MB), made once."""
    if not _BOMB:
        packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = b" " * (1 << 20)
        parts = [packer.compress(block) for _ in range(128)]
        _BOMB.append(b"".join(parts) + packer.flush())
    return _BOMB[0]


def deep_json(levels: int = 100_000) -> bytes:
    return b"[" * levels + b"]" * levels


@dataclass
class HostileServer:
    url: str
    port: int
    requests: list[str] = field(default_factory=list)
    #: how the /v2/ registry misbehaves (see the module docstring); "" behaves
    registry: str = ""
    #: the decoy's port and the paths it was asked for
    decoy_port: int = 0
    decoy_requests: list[str] = field(default_factory=list)

    @property
    def decoy(self) -> str:
        return f"http://127.0.0.1:{self.decoy_port}"

    def wait_for(self, prefix: str, since: int, timeout: float = 30.0) -> None:
        """Until a request whose path starts with ``prefix`` arrived after the first
        ``since`` requests."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(r.startswith(prefix) for r in list(self.requests)[since:]):
                return
            time.sleep(0.02)
        raise AssertionError(f"no request for {prefix} within {timeout} s: {self.requests}")


class _Handler(Handler):
    state: HostileServer
    protocol_version = "HTTP/1.1"

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def _send(
        self, status: int, body: bytes, ctype: str = PEP691, headers: dict[str, str] | None = None
    ) -> None:
        self._head(
            status, {"Content-Type": ctype, "Content-Length": str(len(body)), **(headers or {})}
        )
        self.wfile.write(body)

    def _stream(self, first: bytes, unit: bytes, total: int, pause: float = 0.0) -> None:
        """``first``, then ``unit`` repeated up to ``total`` bytes; stops when the client
        goes away (a write fails) or after :data:`MAX_SECONDS`."""
        end = time.monotonic() + MAX_SECONDS
        sent = 0
        try:
            self.wfile.write(first)
            while sent < total and time.monotonic() < end:
                if pause:
                    time.sleep(pause)
                self.wfile.write(unit)
                self.wfile.flush()
                sent += len(unit)
        except OSError:
            return

    def _silent(self) -> None:
        """Read the request and answer nothing for :data:`MAX_SECONDS`."""
        self.close_connection = True
        time.sleep(MAX_SECONDS)

    def _other_method(self) -> None:
        """HEAD/POST/PUT/PATCH (a pull's or push's blob requests): silent for ``stall``,
        else 503 (a registry down for pushes: the engine retries with a countdown)."""
        self.state.requests.append(f"{self.command} {self.path.split('?', 1)[0]}")
        if self.state.registry == "stall":
            self._silent()
        else:
            self._send(503, b"", "text/plain")

    do_HEAD = do_POST = do_PUT = do_PATCH = _other_method

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.state.requests.append(path)
        if path.startswith("/v2/") and self.state.registry == "stall":
            self._silent()
            return
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "v2":
            self._registry(path)
            return
        kind = parts[0] if parts else ""
        handler = getattr(self, "_route_" + kind.replace("-", "_"), None)
        if handler is None:
            self._send(404, b"", "text/plain")
            return
        handler(parts)

    # ------------------------------------------------------------------ index routes

    def _route_drip(self, parts: list[str]) -> None:
        self._head(200, {"Content-Type": PEP691})
        self._stream(b"", b" ", 1 << 20, pause=DRIP_SECONDS)

    def _route_stall(self, parts: list[str]) -> None:
        time.sleep(MAX_SECONDS)

    def _route_huge(self, parts: list[str]) -> None:
        self._head(200, {"Content-Type": PEP691})
        self._stream(b'{"meta": {"api-version": "1.1"}, "files": [], "x": "', b"x" * 65536, 2 << 30)

    def _route_announced(self, parts: list[str]) -> None:
        self._head(200, {"Content-Type": PEP691, "Content-Length": "3000000000"})
        self._stream(b"{", b"x" * 65536, 3_000_000_000)

    def _route_bomb(self, parts: list[str]) -> None:
        self._send(200, bomb(), headers={"Content-Encoding": "gzip"})

    def _route_cross(self, parts: list[str]) -> None:
        target = f"http://localhost:{self.state.port}/simple/{parts[-1]}/"
        self._send(302, b"", "text/plain", {"Location": target})

    def _route_otherport(self, parts: list[str]) -> None:
        self._send(302, b"", "text/plain", {"Location": f"{self.state.decoy}/simple/{parts[-1]}/"})

    def _route_loop(self, parts: list[str]) -> None:
        self._send(302, b"", "text/plain", {"Location": self.path})

    def _route_hops(self, parts: list[str]) -> None:
        left = int(parts[1])
        target = f"/hops/{left - 1}/{parts[-1]}/" if left > 1 else f"/simple/{parts[-1]}/"
        self._send(302, b"", "text/plain", {"Location": target})

    def _route_tofile(self, parts: list[str]) -> None:
        self._send(302, b"", "text/plain", {"Location": "file:///etc/passwd"})

    def _route_deep(self, parts: list[str]) -> None:
        self._send(200, deep_json())

    def _route_badhttp(self, parts: list[str]) -> None:
        self.wfile.write(b"garbage, not HTTP\r\n\r\n")

    def _route_corpus(self, parts: list[str]) -> None:
        if parts[-1] == "numpy":
            self._send(200, (RECORDED / "numpy.json").read_bytes())
            return
        file = CORPUS / parts[1]
        if not file.is_file():
            self._send(404, b"", "text/plain")
            return
        ctype = PEP691 if file.suffix == ".json" else "text/html"
        self._send(200, file.read_bytes(), ctype)

    def _route_simple(self, parts: list[str]) -> None:
        self._send(200, (RECORDED / f"{parts[-1]}.json").read_bytes())

    # ------------------------------------------------------------------ registry

    def _registry(self, path: str) -> None:
        mode = self.state.registry
        port = self.state.port
        realms = {
            "realm-file": "file:///etc/passwd",
            "realm-other": "http://10.255.255.1/token",
            "realm-port": f"{self.state.decoy}/token",
        }
        if mode in realms:
            self._send(
                401,
                b"{}",
                "application/json",
                {"WWW-Authenticate": f'Bearer realm="{realms[mode]}",service="x"'},
            )
        elif mode == "loop":
            self._send(307, b"", "text/plain", {"Location": path})
        elif mode == "huge":
            self._head(200, {"Content-Type": "application/json"})
            self._stream(b'{"a": "', b"x" * 65536, 2 << 30)
        elif mode == "deep":
            self._send(200, deep_json(), "application/json")
        elif "/manifests/" in path:
            manifest = (
                b'{"schemaVersion": 2, "config": {"digest": "sha256:'
                + b"a" * 64
                + b'"}, "layers": []}'
            )
            self._send(200, manifest, "application/vnd.oci.image.manifest.v1+json")
        elif mode == "redirect-other":
            self._send(
                307, b"", "text/plain", {"Location": f"http://10.255.255.1:{port}/storage/blob"}
            )
        elif mode == "redirect-port":
            self._send(307, b"", "text/plain", {"Location": f"{self.state.decoy}/storage/blob"})
        else:  # drip: the config blob never finishes
            self._head(200, {"Content-Type": "application/octet-stream"})
            self._stream(b"", b"{", 1 << 20, pause=DRIP_SECONDS)


class _Decoy(Handler):
    """Another port: answers everything as a well-behaved index (or token service)."""

    state: HostileServer

    def do_GET(self) -> None:
        self.state.decoy_requests.append(self.path)
        body = (
            b'{"token": "decoy"}'
            if self.path.startswith("/token")
            else (RECORDED / "torch.json").read_bytes()
        )
        self.send(200, body, {"Content-Type": PEP691})


def serve() -> Iterator[HostileServer]:
    """Start the server (and its decoy) on free ports of 127.0.0.1; stop them when the
    generator closes."""
    bomb()
    state = HostileServer("", 0)
    hostile = type("Hostile", (_Handler,), {"state": state})
    decoy_handler = type("Decoy", (_Decoy,), {"state": state})
    with serving(hostile) as main, serving(decoy_handler) as decoy:
        state.port = main.port
        state.url = main.url
        state.decoy_port = decoy.port
        yield state
