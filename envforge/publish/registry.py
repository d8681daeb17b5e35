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
speak plain HTTP on a non-loopback address are not supported.

Every request goes through the one URL opener (:mod:`envforge.core.net`): only the registry's
own host (and ``ENVFORGE_ALLOW_HOSTS``), so a token realm or redirect that names a
``file://`` URL or another host or port is refused and named (only the config blob's
download may be redirected, from https to https storage elsewhere, as the distribution API
allows; never to plain http); documents are read up to :data:`MAX_BYTES`; the whole
read has one overall deadline (``ENVFORGE_NET_DEADLINE``, ``--deadline``): exit 4 naming
the request that did not answer.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from envforge.container.refs import DIGEST_RE, ImageInfo, check_digest
from envforge.core.jsonlimits import BadJSON
from envforge.core.net import (
    ALLOW_ENV,
    Deadline,
    NetError,
    NotAnswered,
    Policy,
    Reply,
    call,
    deadline_seconds,
    decode_json,
    fetch,
)
from envforge.errors import InvalidInput, Unavailable

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
    check_digest(text)
    return RemoteRef(host, repo, reference)


#: Bytes read at most from a token answer.
TOKEN_LIMIT = 1024 * 1024


@dataclass(frozen=True)
class _Session:
    """One registry conversation: its policy, deadline and (once fetched) bearer token."""

    ref: RemoteRef
    policy: Policy
    deadline: Deadline
    auth: list[str]
    #: the URLs asked for, in order: the last is the one a timeout names
    asked: list[str] = field(default_factory=list)

    def request(
        self,
        url: str,
        accept: str,
        *,
        limit: int = MAX_BYTES,
        token: bool = True,
        blob: bool = False,
    ) -> Reply:
        """GET ``url`` under the policy; a ``blob`` download may be redirected from https
        to https storage on another host (the distribution API allows it), nothing else
        leaves the registry's host."""
        self.asked.append(url)
        headers = {"Accept": accept}
        if token and self.auth:
            headers["Authorization"] = f"Bearer {self.auth[0]}"

        def hop(old: str, new: str) -> dict[str, str]:
            # blob storage on another host (signed URLs) does not get the registry's token
            same = urllib.parse.urlsplit(old).netloc == urllib.parse.urlsplit(new).netloc
            return headers if same else {"Accept": accept}

        try:
            policy = replace(self.policy, hops=True) if blob else self.policy
            return fetch(
                url,
                policy,
                deadline=self.deadline,
                limit=limit,
                timeout=min(TIMEOUT, self.deadline.seconds),
                headers=headers,
                on_redirect=hop,
            )
        except NetError as exc:
            raise _unavailable(self.ref, exc) from None


def _unavailable(ref: RemoteRef, exc: NetError) -> Unavailable:
    if exc.kind == "refused":
        hint = (
            f"a registry may only send envforge to its own host; add a host you trust "
            f"with {ALLOW_ENV}"
            if "not a configured host" in exc.reason
            else "a registry may only send envforge to http(s) URLs; check the registry"
        )
        return Unavailable(f"registry {ref.host}: {exc.url}: refused: {exc.reason}", hint=hint)
    if exc.kind == "timeout":
        return NotAnswered(
            f"registry {ref.host}: {exc.url}: {exc.reason}",
            hint="check that the registry answers, or raise --deadline",
        )
    if exc.kind == "unreachable":
        return NotAnswered(
            f"registry {ref.host} cannot be reached: {exc.reason}",
            hint="check the host and port, and that the registry runs",
        )
    return Unavailable(f"registry {ref.host}: {exc.url}: {exc.kind}: {exc.reason}")


def _token(challenge: str, session: _Session) -> str | None:
    """An anonymous bearer token for a ``WWW-Authenticate: Bearer …`` challenge; the
    realm must be an http(s) URL on an allowed host."""
    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge[:8192]))
    realm = fields.get("realm")
    if not realm:
        return None
    query = {
        "service": fields.get("service", ""),
        "scope": f"repository:{session.ref.repository}:pull",
    }
    url = realm + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v})
    reply = session.request(url, "application/json", limit=TOKEN_LIMIT, token=False)
    if reply.status != 200:
        raise Unavailable(
            f"registry {session.ref.host}: its token service {realm} answered HTTP {reply.status}"
        )
    data = registry_json(reply.body, f"the token answer of {realm}")
    token = data.get("token") or data.get("access_token")
    return token if isinstance(token, str) and token else None


def _get(
    url: str, session: _Session, accept: str, *, blob: bool = False
) -> tuple[bytes, Mapping[str, str]]:
    reply = session.request(url, accept, blob=blob)
    ref = session.ref
    if reply.status == 401 and not session.auth:
        token = _token(reply.header("www-authenticate"), session)
        if token:
            session.auth.append(token)
            return _get(url, session, accept, blob=blob)
    if reply.status == 404:
        raise InvalidInput(
            f"{ref.host}/{ref.repository}:{ref.reference}: not in the registry (HTTP 404)",
            hint="check the reference (envforge publish prints it)",
        )
    if reply.status != 200:
        raise Unavailable(
            f"{ref.host}: HTTP {reply.status} for {urllib.parse.urlsplit(url).path}",
            hint="check the registry and your access to it",
        )
    return reply.body, reply.headers


def registry_json(data: bytes, what: str) -> dict[str, Any]:
    """A registry document: decoded within :mod:`envforge.core.jsonlimits`' limits, an object."""
    try:
        value = decode_json(data, max_bytes=MAX_BYTES)
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


def image_config(ref: str, *, deadline: Deadline | None = None) -> tuple[RemoteRef, dict[str, Any]]:
    """The image config JSON of ``ref`` (manifest + config blob only), read from the
    registry's host only (and ENVFORGE_ALLOW_HOSTS'), all before ``deadline`` (default:
    :func:`envforge.core.net.deadline_seconds` from now); Unavailable (exit 4) naming what
    did not answer in time."""
    remote, config, _config_digest = _read_config(ref, deadline)
    return remote, config


def _read_config(ref: str, deadline: Deadline | None) -> tuple[RemoteRef, dict[str, Any], str]:
    remote = parse_ref(ref)
    if deadline is None:
        deadline = Deadline.start(deadline_seconds(None))
    session = _Session(remote, Policy.for_urls([remote.base]), deadline, [])
    first = f"{remote.base}/manifests/{remote.reference}"
    try:
        return call(lambda: _image_config(ref, remote, session), deadline=deadline, what=first)
    except NetError as exc:
        if exc.kind == "timeout" and exc.url == first and session.asked:
            # the request in flight at the deadline (the config blob, a token), not the first
            exc = NetError(session.asked[-1], exc.kind, exc.reason)
        raise _unavailable(remote, exc) from None


def remote_image(ref: str, *, deadline: Deadline | None = None) -> ImageInfo:
    """``ref`` as the registry holds it, with no engine: its config digest (the image ID an
    engine gives it), its layers (the config's ``rootfs.diff_ids``), its config and labels
    (manifest + config blob only, as :func:`image_config`)."""
    _remote, blob, digest = _read_config(ref, deadline)
    what = f"the image config of {ref}"
    inner, labels = _config_and_labels(blob, what)
    rootfs = _shape(blob.get("rootfs") or {}, dict, what, "rootfs")
    layers = _shape(rootfs.get("diff_ids") or [], list, what, "rootfs.diff_ids")
    return ImageInfo(
        id=digest,
        layers=tuple(_digest(x, what, "rootfs.diff_ids") for x in layers),
        tags=(),
        labels=labels,
        config=dict(inner),
    )


def _config_and_labels(
    blob: Mapping[str, Any], what: str
) -> tuple[Mapping[str, Any], dict[str, str]]:
    """An image config blob's ``config`` and its ``Labels`` (every value a string)."""
    inner = _shape(blob.get("config") or {}, dict, what, "config")
    labels = _shape(inner.get("Labels") or {}, dict, what, "config.Labels")
    for key, value in labels.items():
        _shape(value, str, what, f"label {str(key)[:80]!r}")
    return inner, dict(labels)


def _image_config(
    ref: str, remote: RemoteRef, session: _Session
) -> tuple[RemoteRef, dict[str, Any], str]:
    accept = ", ".join(MANIFEST_TYPES)
    reference = remote.reference
    for _ in range(2):  # an index, then the image manifest it names
        data, headers = _get(f"{remote.base}/manifests/{reference}", session, accept)
        if DIGEST_RE.fullmatch(reference) and _sha256(data) != reference:
            # asked by digest (REF@sha256:..., or the one a manifest list names): the
            # registry must answer with exactly those bytes, as an engine's pull checks
            raise Unavailable(
                f"{ref}: the manifest does not match its digest {reference[:19]}",
                hint="the registry serves other content than the digest names",
            )
        manifest = registry_json(data, f"the manifest of {ref}")
        media = manifest.get("mediaType") or headers.get("content-type", "")
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
    blob, _headers = _get(f"{remote.base}/blobs/{digest}", session, "*/*", blob=True)
    if _sha256(blob) != digest:
        raise Unavailable(f"{ref}: the config blob does not match its digest {digest[:19]}")
    return remote, registry_json(blob, f"the image config of {ref}"), digest


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_labels(ref: str, *, deadline: Deadline | None = None) -> dict[str, str]:
    """``config.Labels`` of ``ref`` in its registry (see the module docstring)."""
    _remote, config = image_config(ref, deadline=deadline)
    return _config_and_labels(config, f"the image config of {ref}")[1]
