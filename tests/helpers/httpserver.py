"""The one HTTP test server: a handler on a free port of 127.0.0.1, for as long as a test.

* :func:`serving` runs any handler class (threaded, one thread per request, daemon
  threads) and stops it at the end: shut down, socket closed, thread joined;
* :class:`Handler` is the base of the handlers tests write: quiet (no log lines on
  stderr), and :meth:`Handler.send` answers with a body and its ``Content-Length``;
* :func:`serving_folder` serves a folder as static files (``SimpleHTTPRequestHandler``:
  listings, ``index.html``, ``HEAD``, ``If-Modified-Since``), recording every path asked
  for: a package index made of files, or wheels to download.

Handlers keep their state where the test reads it (a closure, or a class attribute of a
subclass), so each test's server is its own.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

#: how long stopping waits for the serving thread
JOIN_SECONDS = 10.0


@dataclass
class Served:
    """A running server: its port, and the paths asked for (by the handlers that record)."""

    port: int
    requests: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT`` (a registry host)."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}"


class Handler(BaseHTTPRequestHandler):
    """A quiet handler with one way to answer."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    @property
    def port(self) -> int:
        """This server's port (for redirects and token realms back to it)."""
        return cast("ThreadingHTTPServer", self.server).server_port

    def send(
        self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> None:
        """``status``, ``headers``, ``Content-Length`` and ``body``; a client that went away
        meanwhile is no error of the server's."""
        try:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            return


def _server(handler: Callable[..., BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
    """A server on ``port`` of 127.0.0.1, or on a free one when that is taken (or 0)."""
    if port:
        try:
            return ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError:
            pass
    return ThreadingHTTPServer(("127.0.0.1", 0), handler)


@contextmanager
def serving(handler: Callable[..., BaseHTTPRequestHandler], port: int = 0) -> Iterator[Served]:
    """Serve with ``handler`` (a handler class, or a partial of one) until the block ends,
    on ``port`` where it is free (an index URL that stays the same from run to run keeps
    uv's cache of its wheels), else on any free port."""
    httpd = _server(handler, port)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(httpd.server_port)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=JOIN_SECONDS)


@contextmanager
def serving_folder(folder: Path, port: int = 0, *, revalidate: bool = False) -> Iterator[Served]:
    """Serve the files under ``folder`` (on ``port`` where it is free, :func:`serving`);
    :attr:`Served.requests` lists each path asked for (query included), in order.
    ``revalidate``: every answer says ``Cache-Control: no-cache`` and a file's carries an
    ``ETag`` (its size and mtime), so a client with a cached copy asks again, answered
    "304 Not Modified" while the file is unchanged, instead of using it unseen (uv
    revalidates by ``If-None-Match``)."""
    seen: list[str] = []

    class Recording(SimpleHTTPRequestHandler):
        etag = ""

        def log_message(self, format: str, *args: Any) -> None:
            seen.append(self.path)

        def send_head(self) -> Any:
            if revalidate:
                try:
                    info = os.stat(self.translate_path(self.path))
                except OSError:
                    info = None
                if info is not None and stat.S_ISREG(info.st_mode):
                    self.etag = f'"{info.st_size:x}-{info.st_mtime_ns:x}"'
                    if self.etag in self.headers.get("If-None-Match", ""):
                        self.send_response(HTTPStatus.NOT_MODIFIED)
                        self.end_headers()
                        return None
            return super().send_head()

        def end_headers(self) -> None:
            if revalidate:
                self.send_header("Cache-Control", "no-cache")
                if self.etag:
                    self.send_header("ETag", self.etag)
            super().end_headers()

    with serving(partial(Recording, directory=str(folder)), port) as served:
        served.requests = seen
        yield served
