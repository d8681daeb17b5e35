"""Attestations attached to an image digest in its registry, as OCI referrers.

Each DSSE envelope (:mod:`envforge.publish.attestation`) becomes one artifact: an OCI
image manifest with ``artifactType`` ``application/vnd.in-toto+json``, the empty config
(``application/vnd.oci.empty.v1+json``, ``{}``), one layer (the envelope,
``application/vnd.dsse.envelope.v1+json``) and ``subject`` naming the image's manifest
(OCI distribution spec 1.1, "Pushing manifests with subject"). A registry that serves the
referrers API says so with the ``OCI-Subject`` header when the manifest is put; one that
does not (the Debian ``docker-registry``, distribution 2.8) gets the **referrers tag
schema**: the tag ``sha256-<hex of the subject digest>`` names an OCI image index listing
every referrer (read, the new descriptor added, put back). Listing reads the API
(``GET /v2/<name>/referrers/<digest>``) and falls back to that tag; an independent
client (oras) lists them the same way.

Requests go through :mod:`envforge.core.net` under the registry's host policy and one
deadline, like every read of :mod:`envforge.publish.registry`. Pushing needs a registry
that takes anonymous pushes (a loopback or site registry); one that asks for a login is
refused with one line (exit 4).
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envforge.core.jsonlimits import BadJSON, loads
from envforge.core.net import Deadline, NetError, Policy, Reply, deadline_seconds, fetch
from envforge.errors import InvalidInput, Unavailable
from envforge.publish.registry import (
    MANIFEST_TYPES,
    MAX_BYTES,
    RemoteRef,
    _unavailable,
    parse_ref,
    registry_json,
)

ARTIFACT_TYPE = "application/vnd.in-toto+json"
ENVELOPE_TYPE = "application/vnd.dsse.envelope.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
TIMEOUT = 30.0


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag for ``digest``: ``sha256-<hex>``."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}-{hexdigest}"


def canonical(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def artifact_manifest(envelope: bytes, subject: Descriptor, created: str = "") -> bytes:
    """The manifest of one attestation artifact about ``subject``."""
    data: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": Descriptor(EMPTY_TYPE, sha256(EMPTY), len(EMPTY)).to_dict(),
        "layers": [Descriptor(ENVELOPE_TYPE, sha256(envelope), len(envelope)).to_dict()],
        "subject": subject.to_dict(),
    }
    if created:
        data["annotations"] = {"org.opencontainers.image.created": created}
    return canonical(data)


@dataclass(frozen=True)
class _Registry:
    """One conversation with a registry about one repository (no login)."""

    ref: RemoteRef
    policy: Policy
    deadline: Deadline

    @classmethod
    def open(cls, ref: str, deadline: Deadline | None = None) -> _Registry:
        remote = parse_ref(ref)
        return cls(
            remote,
            Policy.for_urls([remote.base]),
            deadline or Deadline.start(deadline_seconds(None)),
        )

    def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        url = path if "://" in path else f"{self.ref.base}/{path}"
        try:
            reply = fetch(
                url,
                self.policy,
                deadline=self.deadline,
                limit=MAX_BYTES,
                timeout=min(TIMEOUT, self.deadline.seconds),
                headers=dict(headers or {}),
                method=method,
                body=body,
            )
        except NetError as exc:
            raise _unavailable(self.ref, exc) from None
        if reply.status == 401:
            raise Unavailable(
                f"registry {self.ref.host} asks for a login to {method} "
                f"{urllib.parse.urlsplit(url).path}; attaching attestations needs a "
                "registry that takes anonymous pushes",
                hint="attach from a host with such access, or keep the .intoto.jsonl files",
            )
        return reply

    def expect(self, reply: Reply, ok: Sequence[int], what: str) -> Reply:
        if reply.status not in ok:
            detail = reply.body[:200].decode("utf-8", "replace").strip()
            raise Unavailable(
                f"registry {self.ref.host}: {what}: HTTP {reply.status}"
                + (f" ({' '.join(detail.split())})" if detail else ""),
                hint="check the registry and your access to it",
            )
        return reply

    def put_blob(self, data: bytes, *, check: bool = False) -> None:
        """Upload ``data`` (monolithic); ``check``: not when the registry has it already."""
        digest = sha256(data)
        if check and self.send("HEAD", f"blobs/{digest}").status == 200:
            return
        start = self.expect(self.send("POST", "blobs/uploads/"), (202,), "starting an upload")
        location = start.header("location")
        if not location:
            raise Unavailable(f"registry {self.ref.host}: an upload without a Location")
        url = urllib.parse.urljoin(self.ref.base + "/", location)
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
        self.expect(
            self.send("PUT", url, body=data, headers={"Content-Type": "application/octet-stream"}),
            (201,),
            f"uploading blob {digest[:19]}",
        )

    def put_manifest(self, reference: str, data: bytes, media_type: str) -> Reply:
        return self.expect(
            self.send(
                "PUT", f"manifests/{reference}", body=data, headers={"Content-Type": media_type}
            ),
            (201,),
            f"putting manifest {reference[:26]}",
        )

    def get_manifest(self, reference: str, accept: str) -> bytes | None:
        """The manifest's bytes; None when the registry has none (404)."""
        reply = self.send("GET", f"manifests/{reference}", headers={"Accept": accept})
        if reply.status == 404:
            return None
        return self.expect(reply, (200,), f"reading manifest {reference[:26]}").body


def _subject(registry: _Registry, digest: str) -> Descriptor:
    data = registry.get_manifest(digest, ", ".join(MANIFEST_TYPES))
    if data is None:
        raise InvalidInput(
            f"{registry.ref.host}/{registry.ref.repository}@{digest}: not in the registry",
            hint="publish the image first",
        )
    if sha256(data) != digest:
        raise Unavailable(f"{registry.ref.host}: the manifest does not match {digest[:19]}")
    media = registry_json(data, f"the manifest {digest[:19]}").get("mediaType") or OCI_MANIFEST
    return Descriptor(str(media), digest, len(data))


def _index(registry: _Registry, tag: str) -> dict[str, Any]:
    data = registry.get_manifest(tag, OCI_INDEX)
    if data is None:
        return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    index = registry_json(data, f"the referrers tag {tag[:26]}")
    if not isinstance(index.get("manifests"), list):
        raise Unavailable(
            f"{registry.ref.host}: the referrers tag {tag[:26]} is not an index",
            hint="delete that tag; it is not an OCI image index",
        )
    return index


@dataclass(frozen=True)
class Attached:
    """What :func:`attach` put: the artifacts' manifest digests, and how they are found."""

    digests: tuple[str, ...]
    #: ``api`` (the registry indexes referrers itself) or ``tag`` (the tag schema).
    via: str
    tag: str


def attach(
    ref: str, envelopes: Sequence[bytes], *, created: str = "", deadline: Deadline | None = None
) -> Attached:
    """Attach each envelope (its JSON bytes) to the manifest ``ref``
    (``HOST[:PORT]/REPO@sha256:…``) as a referrer; the tag schema's index is updated
    once for all of them when the registry has no referrers API."""
    registry = _Registry.open(ref, deadline)
    digest = registry.ref.reference
    if not digest.startswith("sha256:"):
        raise InvalidInput(
            f"{ref}: attestations attach to a digest", hint="name the image as HOST/REPO@sha256:…"
        )
    subject = _subject(registry, digest)
    registry.put_blob(EMPTY, check=True)
    added: list[dict[str, Any]] = []
    api = False
    for envelope in envelopes:
        registry.put_blob(envelope)
        manifest = artifact_manifest(envelope, subject, created)
        reply = registry.put_manifest(sha256(manifest), manifest, OCI_MANIFEST)
        api = api or bool(reply.header("oci-subject"))
        added.append(
            {
                **Descriptor(OCI_MANIFEST, sha256(manifest), len(manifest)).to_dict(),
                "artifactType": ARTIFACT_TYPE,
            }
        )
    tag = referrers_tag(digest)
    if added and not api:
        index = _index(registry, tag)
        have = {m.get("digest") for m in index["manifests"] if isinstance(m, dict)}
        index["manifests"] += [m for m in added if m["digest"] not in have]
        registry.put_manifest(tag, canonical(index), OCI_INDEX)
    return Attached(tuple(m["digest"] for m in added), "api" if api else "tag", tag)


def pinned(ref: str, *, deadline: Deadline | None = None) -> str:
    """``ref`` as ``HOST[:PORT]/REPO@sha256:…``: a tag resolved to the digest of the
    manifest it names now (the bytes' sha256, as the registry serves them)."""
    registry = _Registry.open(ref, deadline)
    remote = registry.ref
    if remote.reference.startswith("sha256:"):
        return f"{remote.host}/{remote.repository}@{remote.reference}"
    data = registry.get_manifest(remote.reference, ", ".join(MANIFEST_TYPES))
    if data is None:
        raise InvalidInput(
            f"{ref}: not in the registry (HTTP 404)",
            hint="check the reference (envforge publish prints it)",
        )
    return f"{remote.host}/{remote.repository}@{sha256(data)}"


def referrers(ref: str, *, deadline: Deadline | None = None) -> list[dict[str, Any]]:
    """The descriptors of the in-toto referrers of ``ref`` (``…@sha256:…``): from the
    referrers API, else the tag schema's index (empty when neither has any)."""
    registry = _Registry.open(ref, deadline)
    digest = registry.ref.reference
    reply = registry.send("GET", f"referrers/{digest}", headers={"Accept": OCI_INDEX})
    if reply.status == 200 and b"manifests" in reply.body:
        listed = registry_json(reply.body, f"the referrers of {digest[:19]}").get("manifests") or []
    else:
        listed = _index(registry, referrers_tag(digest))["manifests"]
    return [m for m in listed if isinstance(m, dict) and m.get("artifactType") == ARTIFACT_TYPE]


def envelopes_of(ref: str, *, deadline: Deadline | None = None) -> list[Any]:
    """The DSSE envelopes (parsed JSON) attached to ``ref``, each blob's digest checked."""
    registry = _Registry.open(ref, deadline)
    out: list[Any] = []
    for entry in referrers(ref, deadline=registry.deadline):
        data = registry.get_manifest(str(entry.get("digest")), OCI_MANIFEST)
        if data is None or sha256(data) != entry.get("digest"):
            continue
        for layer in (
            registry_json(data, f"the referrer {str(entry.get('digest'))[:19]}").get("layers") or ()
        ):
            if not isinstance(layer, dict) or layer.get("mediaType") != ENVELOPE_TYPE:
                continue
            blob = registry.expect(
                registry.send("GET", f"blobs/{layer.get('digest')}"),
                (200,),
                "reading an attestation",
            )
            if sha256(blob.body) == layer.get("digest"):
                try:  # one that is not JSON is shown refused, not dropped
                    out.append(loads(blob.body))
                except BadJSON:
                    out.append(None)
    return out
