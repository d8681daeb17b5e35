"""Read an image's labels from a registry without pulling it (Docker Registry HTTP API v2).

``image_labels("127.0.0.1:5000/team/cpu:tag")`` asks the registry for the manifest
(``GET /v2/<name>/manifests/<tag or digest>``), picks the ``linux/amd64`` image of a
manifest list / OCI index (else the first), then downloads only the image *config* blob
(``GET /v2/<name>/blobs/<config digest>``, a few kilobytes), checks its sha256 against
the digest the manifest names, and returns ``config.Labels``. No layer is downloaded and
no engine is involved.

Transport: ``http://`` for loopback registries (``localhost``, ``127.x``, ``[::1]``), which
is how the Docker engine treats them too; ``https://`` (system CA bundle) for every other
host. Anonymous bearer tokens are fetched when the registry asks for them
(``WWW-Authenticate: Bearer realm=…``), as for public images on Docker Hub; a redirect to
another host (blob storage) does not carry the token. Registries that need a login or
speak plain HTTP on a non-loopback address are not supported. Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envforge.container.refs import DIGEST_RE
from envforge.errors import InvalidInput, Unavailable
from envforge.jsonlimits import BadJSON, loads

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
_INDEX_TYPES = MANIFEST_TYPES[2:]
#: Bytes read at most from one manifest or config (they are kilobytes).
MAX_BYTES = 4 * 1024 * 1024
TIMEOUT = 30.0
DOCKER_HUB = "registry-1.docker.io"


@dataclass(frozen=True)
class RemoteRef:
    """A reference split for the HTTP API: registry host, repository, tag or digest."""

    host: str
    repository: str
    reference: str

    @property
    def base(self) -> str:
        scheme = "http" if is_loopback(self.host) else "https"
        return f"{scheme}://{self.host}/v2/{self.repository}"


def is_loopback(host: str) -> bool:
    bracketed = host.startswith("[")
    name = host.split("]", maxsplit=1)[0] + "]" if bracketed else host.rsplit(":", 1)[0]
    return name in ("localhost", "[::1]") or name.startswith("127.")


def parse_ref(ref: str) -> RemoteRef:
    """``HOST[:PORT]/REPO[:TAG|@DIGEST]`` (no host: Docker Hub, ``library/`` for one part)."""
    text = ref.strip()
    if not text or any(c.isspace() for c in text):
        raise InvalidInput(f"{ref!r} is not an image reference", hint="HOST[:PORT]/REPO:TAG")
    name, reference = text, "latest"
    if "@" in text:
        name, reference = text.split("@", 1)
    else:
        last = text.rsplit("/", 1)[-1]
        if ":" in last:
            name, reference = text.rsplit(":", 1)
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host, repo = parts[0], "/".join(parts[1:])
        if host in ("docker.io", "index.docker.io"):
            host = DOCKER_HUB
            repo = repo if "/" in repo else f"library/{repo}"
    else:
        host, repo = DOCKER_HUB, name if len(parts) > 1 else f"library/{name}"
    if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", repo) or not reference:
        raise InvalidInput(f"{ref!r} is not an image reference", hint="HOST[:PORT]/REPO:TAG")
    if "@" in text and not DIGEST_RE.fullmatch(reference):
        raise InvalidInput(
            f"{ref!r}: {reference[:80]!r} is not a sha256 digest",
            hint="REPO@sha256:<64 hex digits>",
        )
    return RemoteRef(host, repo, reference)


def _read(response: Any) -> bytes:
    data = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise Unavailable(f"{response.geturl()}: more than {MAX_BYTES} bytes; not a manifest")
    return bytes(data)


def _token(challenge: str, ref: RemoteRef) -> str | None:
    """An anonymous bearer token for a ``WWW-Authenticate: Bearer …`` challenge."""
    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = fields.get("realm")
    if not realm:
        return None
    query = {"service": fields.get("service", ""), "scope": f"repository:{ref.repository}:pull"}
    url = realm + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v})
    with _OPENER.open(url, timeout=TIMEOUT) as response:
        data = _json(_read(response), f"the token answer of {urllib.parse.urlsplit(realm).netloc}")
    token = data.get("token") or data.get("access_token")
    return token if isinstance(token, str) and token else None


class _DropAuthOnRedirect(urllib.request.HTTPRedirectHandler):
    """Blob downloads are often redirected to storage on another host (signed URLs):
    the registry's token is not sent there."""

    def redirect_request(  # noqa: PLR0917 - the stdlib signature
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and (
            urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc
        ):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_DropAuthOnRedirect())


def _get(url: str, ref: RemoteRef, accept: str, auth: list[str]) -> tuple[bytes, Mapping[str, str]]:
    headers = {"Accept": accept}
    if auth:
        headers["Authorization"] = f"Bearer {auth[0]}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with _OPENER.open(request, timeout=TIMEOUT) as response:
            return _read(response), dict(response.headers)
    except urllib.error.HTTPError as exc:
        exc.close()  # its answer is not read: the connection goes now, not at GC
        if exc.code == 401 and not auth:
            token = _token(exc.headers.get("WWW-Authenticate", ""), ref)
            if token:
                auth.append(token)
                return _get(url, ref, accept, auth)
        if exc.code == 404:
            raise InvalidInput(
                f"{ref.host}/{ref.repository}:{ref.reference}: not in the registry (HTTP 404)",
                hint="check the reference (envforge publish prints it)",
            ) from None
        raise Unavailable(
            f"{ref.host}: HTTP {exc.code} for {urllib.parse.urlsplit(url).path}",
            hint="check the registry and your access to it",
        ) from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise Unavailable(
            f"registry {ref.host} cannot be reached: {reason}",
            hint="check the host and port, and that the registry runs",
        ) from None


def _json(data: bytes, what: str) -> dict[str, Any]:
    """A registry document: decoded within :mod:`envforge.jsonlimits`' limits, an object."""
    try:
        value = loads(data, max_bytes=MAX_BYTES)
    except BadJSON as exc:
        raise Unavailable(f"{what} is not JSON within limits: {exc}") from None
    if not isinstance(value, dict):
        raise Unavailable(f"{what} is not a JSON object")
    return value


def _shape(value: Any, kind: type, what: str, key: str) -> Any:
    """``value`` when it is a ``kind``; else one line (exit 4: the registry's data)."""
    if not isinstance(value, kind):
        raise Unavailable(
            f"{what}: {key} is {type(value).__name__}, not {kind.__name__}",
            hint="the registry serves a malformed document; check the image",
        )
    return value


def _digest(value: Any, what: str, key: str) -> str:
    text = _shape(value, str, what, key)
    if not DIGEST_RE.fullmatch(text):
        raise Unavailable(f"{what}: {key} {text[:80]!r} is not a sha256 digest")
    return str(text)


def _pick(index: Mapping[str, Any], what: str) -> str:
    """The ``linux/amd64`` manifest of a list (else the first image), its digest checked."""
    listed = _shape(index.get("manifests"), list, what, "manifests")
    manifests = [_shape(m, dict, what, "an entry of manifests") for m in listed]
    if not manifests:
        raise Unavailable(f"{what}: the manifest list is empty")

    def platform(m: Mapping[str, Any]) -> Mapping[str, Any]:
        return _shape(m.get("platform") or {}, dict, what, "platform")  # type: ignore[no-any-return]

    for m in manifests:
        if platform(m).get("os") == "linux" and platform(m).get("architecture") == "amd64":
            return _digest(m.get("digest"), what, "digest")
    images = [m for m in manifests if platform(m).get("os") != "unknown"]
    return _digest((images or manifests)[0].get("digest"), what, "digest")


def image_config(ref: str) -> tuple[RemoteRef, dict[str, Any]]:
    """The image config JSON of ``ref`` (manifest + config blob only)."""
    remote = parse_ref(ref)
    auth: list[str] = []
    accept = ", ".join(MANIFEST_TYPES)
    reference = remote.reference
    for _ in range(2):  # an index, then the image manifest it names
        data, headers = _get(f"{remote.base}/manifests/{reference}", remote, accept, auth)
        manifest = _json(data, f"the manifest of {ref}")
        media = manifest.get("mediaType") or headers.get("Content-Type", "")
        if media in _INDEX_TYPES or "manifests" in manifest:
            reference = _pick(manifest, ref)
            continue
        break
    else:
        raise Unavailable(f"{ref}: a manifest list names another manifest list")
    config = manifest.get("config")
    if not isinstance(config, dict):
        raise Unavailable(f"{ref}: the manifest names no image config")
    digest = _digest(config.get("digest"), f"the manifest of {ref}", "config.digest")
    blob, _headers = _get(f"{remote.base}/blobs/{digest}", remote, "*/*", auth)
    if "sha256:" + hashlib.sha256(blob).hexdigest() != digest:
        raise Unavailable(f"{ref}: the config blob does not match its digest {digest[:19]}")
    return remote, _json(blob, f"the image config of {ref}")


def image_labels(ref: str) -> dict[str, str]:
    """``config.Labels`` of ``ref`` in its registry (see the module docstring)."""
    _remote, config = image_config(ref)
    what = f"the image config of {ref}"
    inner = _shape(config.get("config") or {}, dict, what, "config")
    labels = _shape(inner.get("Labels") or {}, dict, what, "config.Labels")
    for key, value in labels.items():
        _shape(value, str, what, f"label {str(key)[:80]!r}")
    return dict(labels)
