"""Image references, labels and the parts of an image that certificates bind (pure: no SDK).

Used by :mod:`envforge.publish.certificate`, :mod:`envforge.backends.docker.push` and the CLI
without importing the docker SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envforge.errors import InvalidInput

#: Label every container envforge creates carries (probe, shell, helpers), so that
#: leftovers can be found: ``docker ps -a --filter label=io.envforge.role``.
ROLE_LABEL = "io.envforge.role"
#: Where a certified image carries its certificate (compact JSON).
CERTIFICATE_LABEL = "io.envforge.certificate"
#: What an image content digest looks like (the one algorithm registries use).
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
#: Repository prefix of certified tags: ``envforge/<recipe>:<stack tag>``.
CERTIFIED_REPOSITORY_PREFIX = "envforge"


def certified_repository(recipe_name: str) -> str:
    return f"{CERTIFIED_REPOSITORY_PREFIX}/{recipe_name}"


def certified_ref(recipe_name: str, stack_tag: str) -> str:
    """``envforge/<recipe>:<stack tag>``, e.g. ``envforge/gfx1010:torch1.13.1-rocm5.2-py3.10``."""
    return f"{certified_repository(recipe_name)}:{stack_tag}"


_REGISTRY_RE = re.compile(
    r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\])(?::(?P<port>\d{1,5}))?"
    r"(?P<ns>(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)$"
)


def registry_ref(registry: str, recipe_name: str, stack_tag: str) -> str:
    """``REGISTRY/<recipe>:<stack tag>`` for ``HOST[:PORT][/NAMESPACE]``; refuses bad input."""
    reg = registry.strip().rstrip("/")
    for scheme in ("https://", "http://"):
        if reg.startswith(scheme):
            reg = reg[len(scheme) :]
    if not _REGISTRY_RE.match(reg):
        raise InvalidInput(
            f"--registry {registry!r} is not HOST[:PORT][/NAMESPACE]",
            hint="e.g. --registry 127.0.0.1:5000/team",
        )
    return f"{reg}/{recipe_name}:{stack_tag}"


def split_ref(ref: str) -> tuple[str, str | None]:
    """``repo[:tag]`` -> (repo, tag); a ``@digest`` stays in the repository part's suffix."""
    if "@" in ref or ref.startswith("sha256:"):
        return ref, None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, None


def check_digest(ref: str) -> None:
    """The digest of a ``REPO@DIGEST`` reference is ``sha256:`` and 64 lowercase hex
    digits, the one form registries and engines use (a reference without ``@`` passes);
    :class:`InvalidInput` (exit 2) naming it otherwise: the user's typo, not the network's."""
    if "@" not in ref:
        return
    digest = ref.rsplit("@", 1)[1]
    if not DIGEST_RE.fullmatch(digest):
        raise InvalidInput(
            f"{ref!r}: {digest[:80]!r} is not a sha256 digest",
            hint="REPO@sha256:<64 hex digits>",
        )


@dataclass(frozen=True)
class ImageInfo:
    """What envforge needs to know about a local image."""

    id: str
    layers: tuple[str, ...]
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    config: Mapping[str, Any]
    repo_digests: tuple[str, ...] = ()
    size: int = 0

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> ImageInfo:
        """From the engine's image inspect data (``Image.attrs``)."""
        config = attrs.get("Config") or {}
        return cls(
            id=str(attrs["Id"]),
            layers=tuple(str(x) for x in (attrs.get("RootFS") or {}).get("Layers") or ()),
            tags=tuple(str(t) for t in attrs.get("RepoTags") or ()),
            labels=dict(config.get("Labels") or {}),
            config=dict(config),
            repo_digests=tuple(str(d) for d in attrs.get("RepoDigests") or ()),
            size=int(attrs.get("Size") or 0),
        )


#: Config keys a certificate does not bind: where the builder ran (the parent image it
#: started from, the build container's host and domain name). They differ between an
#: image and its labelled child by construction, and the engine never applies them to a
#: container (``docker run`` takes the hostname from its own options).
UNBOUND_CONFIG_KEYS = frozenset({"Image", "Hostname", "Domainname"})


def _empty(value: Any) -> bool:
    return value is None or value is False or value in ("", [], {})


def bound_config(config: Mapping[str, Any], certificate_format: int = 2) -> dict[str, Any]:
    """The part of an image config a certificate of ``certificate_format`` binds.

    Format 2 (every new certificate): the whole config except the certificate label
    itself and :data:`UNBOUND_CONFIG_KEYS`; keys without a value (null, empty, false) are
    left out, so engines that print empty fields and engines that omit them agree.
    A HEALTHCHECK, ONBUILD, VOLUME, EXPOSE, STOPSIGNAL, SHELL or LABEL added on top of a
    certified image therefore no longer matches its certificate.

    Format 1 (older certificates): Env, Entrypoint, Cmd, WorkingDir and User only.
    """
    if certificate_format < 2:
        return config_identity(config)
    bound: dict[str, Any] = {}
    for key, value in config.items():
        if key in UNBOUND_CONFIG_KEYS:
            continue
        kept = value
        if key == "Labels" and isinstance(value, Mapping):
            kept = {k: v for k, v in value.items() if k != CERTIFICATE_LABEL}
        if not _empty(kept):
            bound[str(key)] = kept
    return bound


def config_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """What certificate format 1 bound: the parts of an image config that change what
    runs (env vars, entrypoint, command, working folder, user)."""
    return {
        "Env": list(config.get("Env") or []),
        "Entrypoint": config.get("Entrypoint"),
        "Cmd": config.get("Cmd"),
        "WorkingDir": config.get("WorkingDir") or "",
        "User": config.get("User") or "",
    }
