"""A real HTTP server on 127.0.0.1 serving recorded index responses (tests/fixtures/index).

Routes (every path ends with ``/<project>/`` like a simple-API project page):

- ``/simple/<p>/``: the recorded PEP 691 JSON page when the client asks for it, else the
  recorded PEP 503 HTML page (torch only); carries an ETag and answers ``If-None-Match``
  with 304.
- ``/html/<p>/``: always the PEP 503 HTML page (a server that ignores ``Accept``).
- ``/future/<p>/``: the JSON page plus a torch 2.16.0 (the 2.15.0 files renamed): a
  release the table does not know.
- ``/slow/<p>/``: answers after ``SLOW_SECONDS``; ``/bad/<p>/``: a truncated JSON page;
  anything unknown: 404.
- ``/packages/.../<wheel>.metadata``: the recorded PEP 658 metadata of torch 2.13.0 cp311
  and torchvision 0.28.0 cp311 (404 for every other wheel, as the real index does for
  many), and the written metadata of the ``/future`` companions (``FUTURE_METADATA``).
- ``/simple/torchvision/``, ``/simple/torchaudio/``: the recorded PEP 691 pages;
  ``/future/...`` adds torchvision 0.30.0 (requires torch==2.16.0) and torchaudio 2.12.0
  (no torch requirement, like torchaudio 2.11.0).
- ``/simple/triton/``, ``/simple/xformers/``, ``/simple/torchcodec/``, ``/simple/torchao/``,
  ``/simple/cuda-toolkit/``: the recorded PEP 691 pages (3.8.0-3.9.0, 0.0.34-0.0.35,
  0.16.0-0.17.0, 0.17.0-0.18.0 and 13.4.0rc1-13.5.0) that ``knowledge status`` and
  ``refresh`` watch.
- ``/pypi/torch/json``: the recorded JSON API ``info`` of the newest torch.
- ``/whl/<variant>/torch/``: PEP 503 pages of PyTorch variant indexes, built from the
  wheel names in ``VARIANT_FILES`` (the real variant indexes cannot be reached here);
  ``/whl/cpu/torchvision/`` likewise, with a torchvision 0.29.3+cpu the package index
  lacks (its written metadata requires torch==2.15.0).
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.httpserver import Handler, serving

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "index"
PEP691 = "application/vnd.pypi.simple.v1+json"
SLOW_SECONDS = 3.0
ETAG = '"recorded-1"'
METADATA = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"
RECORDED_METADATA = (METADATA, "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata")
COMPANIONS = ("torchvision", "torchaudio")
#: the other pages knowledge status/refresh watch (recorded 2026-11-27)
WATCHED = ("triton", "xformers", "torchcodec", "torchao", "cuda-toolkit")
#: the /future root: torch 2.16.0, then its companions, uploaded minutes later
FUTURE_UPLOADS = {
    "torch": "2026-12-02T10:00:00Z",
    "torchvision": "2026-12-02T10:04:00Z",
    "torchaudio": "2026-12-02T10:05:00Z",
}
#: (project, old release renamed, new release)
FUTURE_RELEASES = {
    "torch": ("2.15.0", "2.16.0"),
    "torchvision": ("0.29.2", "0.30.0"),
    "torchaudio": ("2.11.0", "2.12.0"),
}
FUTURE_METADATA = {
    "torchvision-0.30.0": "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.30.0\n"
    "Requires-Dist: numpy\nRequires-Dist: torch (==2.16.0)\n\n",
    "torchvision-0.29.3+cpu": "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.29.3+cpu\n"
    "Requires-Dist: numpy\nRequires-Dist: torch==2.15.0\n\n",
    "torchaudio-2.12.0": "Metadata-Version: 2.1\nName: torchaudio\nVersion: 2.12.0\n"
    "Requires-Dist: numpy\n\n",
}
VARIANT_FILES: dict[str, list[str]] = {
    "cpu": [
        f"torch-{v}+cpu-cp{py}-cp{py}-manylinux_2_28_x86_64.whl"
        for v, pys in (
            ("2.13.0", range(310, 315)),
            ("2.14.1", range(310, 315)),
            ("2.15.0", range(311, 316)),
        )
        for py in pys
    ],
    # 2.15 published no cu126 wheels; a listing with one must be reported as new
    "cpu/torchvision": [
        f"torchvision-{v}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" for v in ("0.28.0", "0.29.3")
    ],
    "cu126": [
        f"torch-2.15.0+cu126-cp{py}-cp{py}-manylinux_2_28_x86_64.whl" for py in range(311, 316)
    ],
}


@dataclass
class Seen:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    status: int = 0


@dataclass
class IndexServer:
    url: str
    requests: list[Seen] = field(default_factory=list)

    def seen(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path == path]


def _future(project: str) -> bytes:
    """The recorded page plus a release the table does not know (FUTURE_RELEASES)."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{project}.json").read_text(encoding="utf-8"))
    old, new = FUTURE_RELEASES[project]
    extra = []
    for f in data["files"]:
        if f["filename"].startswith(f"{project}-{old}-"):
            g = copy.deepcopy(f)
            g["filename"] = f["filename"].replace(old, new)
            g["url"] = f["url"].replace(old, new)
            g["upload-time"] = FUTURE_UPLOADS[project]
            extra.append(g)
    data["files"] += extra
    data["versions"].append(new)
    return json.dumps(data).encode()


def _metadata(path: str) -> bytes | None:
    name = urllib.parse.unquote(path.rsplit("/", 1)[-1])
    if name in RECORDED_METADATA:
        return (FIXTURES / name).read_bytes()
    written = FUTURE_METADATA.get(name.split("-cp", 1)[0].split("-py3", 1)[0])
    return None if written is None else written.encode()


def _variant_page(key: str) -> bytes:
    variant = key.split("/", 1)[0]
    links = "\n".join(
        f'<a href="/whl/{variant}/{name.replace("+", "%2B")}">{name}</a><br/>'
        for name in VARIANT_FILES[key]
    )
    return f"<!DOCTYPE html>\n<html><body>\n{links}\n</body></html>\n".encode()


class _Handler(Handler):
    server_state: IndexServer

    def _send(self, status: int, body: bytes = b"", ctype: str = "", etag: str = "") -> None:
        self.server_state.requests[-1].status = status
        headers = {"Content-Type": ctype} if ctype else {}
        if etag:
            headers["ETag"] = etag
        self.send(status, body, headers)  # a client that gave up (the timeout test): no error

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server_state.requests.append(Seen(path, dict(self.headers.items())))
        accept = self.headers.get("Accept", "")
        parts = [p for p in path.split("/") if p]
        if path.endswith(".metadata"):
            body = _metadata(path)
            if body is not None:
                self._send(200, body, "application/octet-stream")
            else:
                self._send(404)
            return
        if path == "/pypi/torch/json":
            self._send(200, (FIXTURES / "torch-project.json").read_bytes(), "application/json")
            return
        if len(parts) == 3 and parts[0] == "whl":
            key = parts[1] if parts[2] == "torch" else f"{parts[1]}/{parts[2]}"
            if key in VARIANT_FILES:
                self._send(200, _variant_page(key), "text/html")
            else:
                self._send(404)
            return
        if len(parts) != 2 or parts[1] not in ("torch", "numpy", *COMPANIONS, *WATCHED):
            self._send(404)
            return
        kind, project = parts
        json_page = FIXTURES / f"{project}.json"
        if kind == "simple":
            if self.headers.get("If-None-Match") == ETAG:
                self._send(304, etag=ETAG)
            elif PEP691 in accept or project != "torch":
                self._send(200, json_page.read_bytes(), PEP691, ETAG)
            else:
                self._send(200, (FIXTURES / "torch.html").read_bytes(), "text/html", ETAG)
        elif kind == "html" and project == "torch":
            self._send(200, (FIXTURES / "torch.html").read_bytes(), "text/html")
        elif kind == "future":
            body = _future(project) if project in FUTURE_RELEASES else json_page.read_bytes()
            self._send(200, body, PEP691)
        elif kind == "slow":
            time.sleep(SLOW_SECONDS)
            self._send(200, json_page.read_bytes(), PEP691)
        elif kind == "bad":
            self._send(200, json_page.read_bytes()[:1000], PEP691)
        else:
            self._send(404)


def serve() -> Iterator[IndexServer]:
    """Start the server on a free port of 127.0.0.1; stop it when the generator closes."""
    state = IndexServer("")
    with serving(type("Index", (_Handler,), {"server_state": state})) as served:
        state.url = served.url
        yield state
