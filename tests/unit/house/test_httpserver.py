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


@pytest.mark.parametrize("revalidate", [False, True])
def test_revalidate_has_a_cached_copy_asked_for_again_and_answered_not_modified(
    tmp_path: Path, revalidate: bool
) -> None:
    (tmp_path / "pkg-1.0-py3-none-any.whl").write_bytes(b"wheel")
    with serving_folder(tmp_path, revalidate=revalidate) as served:
        url = f"{served.url}/pkg-1.0-py3-none-any.whl"
        with urllib.request.urlopen(url, timeout=10) as response:
            cache_control, etag = response.headers["Cache-Control"], response.headers["ETag"]
            modified = response.headers["Last-Modified"]
        asked = [{"If-Modified-Since": modified}, *([{"If-None-Match": etag}] if etag else [])]
        codes = []
        for headers in asked:
            with pytest.raises(urllib.error.HTTPError) as not_modified:
                urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
            codes.append(not_modified.value.code)
            not_modified.value.close()
        (tmp_path / "pkg-1.0-py3-none-any.whl").write_bytes(b"another wheel")
        if etag:
            changed = urllib.request.Request(url, headers={"If-None-Match": etag})
            with urllib.request.urlopen(changed, timeout=10) as response:
                assert response.read() == b"another wheel"
    expected = ("no-cache", True) if revalidate else (None, False)
    assert (cache_control, etag is not None) == expected
    assert codes == [304] * len(asked)
    assert served.requests == ["/pkg-1.0-py3-none-any.whl"] * (len(asked) + 1 + revalidate)
