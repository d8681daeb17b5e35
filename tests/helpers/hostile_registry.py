"""A registry (HTTP API v2) on 127.0.0.1 that serves the hostile corpus.

``tests/fixtures/hostile/registry/`` holds the documents; the file name says what it is:

* ``manifest-*.json`` and ``index-*.json``: served as the manifest of ``hostile/<case>:t``;
* ``config-*.json``: served as the image config blob, named by a well-formed manifest;
* ``label-*.txt``: the ``io.envforge.certificate`` label of a well-formed config;
* ``token-*.json``: the answer of the token endpoint, after a ``401`` bearer challenge
  (the image behind it is well formed).

``HostileRegistry.ref(name)`` is the reference of a corpus file's case.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import httpserver
from tests.helpers.httpserver import Handler

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "registry"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def case_of(name: str) -> str:
    """``manifest-deep-list.json`` -> ``manifest-deep-list`` (a valid repository part)."""
    return name.rsplit(".", 1)[0]


def _manifest_for(config: bytes) -> bytes:
    digest = "sha256:" + hashlib.sha256(config).hexdigest()
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"digest": digest, "size": len(config)},
            "layers": [],
        }
    ).encode()


def _good_config(label: str | None = None) -> bytes:
    labels = {} if label is None else {"io.envforge.certificate": label}
    return json.dumps({"config": {"Labels": labels}}).encode()


class HostileRegistry:
    """What each path serves; ``tokens``: case -> the token endpoint's answer."""

    def __init__(self) -> None:
        self.paths: dict[str, bytes] = {}
        self.tokens: dict[str, bytes] = {}
        self.host = ""
        for path in sorted(CORPUS.iterdir()):
            self._add(path.name, path.read_bytes())

    def ref(self, name: str) -> str:
        return f"{self.host}/hostile/{case_of(name)}:t"

    def _add(self, name: str, body: bytes) -> None:
        base = f"/v2/hostile/{case_of(name)}"
        kind = name.split("-", 1)[0]
        if kind in ("manifest", "index"):
            self.paths[f"{base}/manifests/t"] = body
            return
        config = (
            body
            if kind == "config"
            else _good_config(body.decode("utf-8") if kind == "label" else None)
        )
        self.paths[f"{base}/manifests/t"] = _manifest_for(config)
        self.paths[f"{base}/blobs/sha256:{hashlib.sha256(config).hexdigest()}"] = config
        if kind == "token":
            self.tokens[case_of(name)] = body


@contextmanager
def serving() -> Iterator[HostileRegistry]:
    state = HostileRegistry()

    class Registry(Handler):
        def do_GET(self) -> None:
            if self.path.startswith("/token/"):
                case = self.path.split("/")[2].split("?")[0]
                self.send(200, state.tokens.get(case, b"{}"))
                return
            parts = self.path.split("/")
            case = parts[3] if len(parts) > 3 else ""
            if case in state.tokens and not self.headers.get("Authorization"):
                realm = f"http://127.0.0.1:{self.port}/token/{case}"
                self.send(401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="t"'})
                return
            body = state.paths.get(self.path)
            self.send(200 if body is not None else 404, body if body is not None else b"{}")

    with httpserver.serving(Registry) as served:
        state.host = served.host
        yield state
