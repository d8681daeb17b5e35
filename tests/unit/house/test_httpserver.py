"""The one HTTP test server (tests/helpers/httpserver.py): what every server copy did,
once: a free port of 127.0.0.1, quiet answers with their length, a folder's files with
the paths asked for recorded, and nothing left listening afterwards."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.httpserver import Handler, serving, serving_folder


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read(), response.headers["Content-Length"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Length"]


def test_a_handler_answers_with_its_length_and_the_server_stops(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Echo(Handler):
        def do_GET(self) -> None:
            self.send(201 if self.path == "/made" else 404, f"{self.port}{self.path}".encode())

    with serving(Echo) as served:
        assert served.url == f"http://127.0.0.1:{served.port}"
        assert served.host == f"127.0.0.1:{served.port}"
        body = f"{served.port}/made".encode()
        assert _get(f"{served.url}/made") == (201, body, str(len(body)))
        assert _get(f"{served.url}/gone")[0] == 404
    assert capsys.readouterr().err == ""  # quiet: no request log lines
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", served.port))


def test_a_folder_is_served_and_each_path_recorded(tmp_path: Path) -> None:
    (tmp_path / "simple" / "six").mkdir(parents=True)
    (tmp_path / "simple" / "six" / "index.html").write_text("<a>six</a>\n")
    with serving_folder(tmp_path) as served:
        assert _get(f"{served.url}/simple/six/")[:2] == (200, b"<a>six</a>\n")
        assert _get(f"{served.url}/simple/seven/")[0] == 404
        assert served.requests[0] == "/simple/six/"
        assert "/simple/seven/" in served.requests


def test_a_port_asked_for_is_used_while_free_and_another_taken_when_not(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        wanted = int(probe.getsockname()[1])
    with serving_folder(tmp_path, wanted) as first:
        assert first.port == wanted
        with serving_folder(tmp_path, wanted) as second:  # taken: any free port
            assert second.port not in (0, wanted)
