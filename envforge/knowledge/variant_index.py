"""Wheel variants read where an index serves them.

PEP 825 "Index-level metadata" (https://peps.python.org/pep-0825/#index-level-metadata):
for every version with a variant wheel the index MUST serve
``{name}-{version}-variants.json`` (name and version normalised as in wheel file names),
linked "in the same simple repository format as source distribution and wheel links"
from every page that links the variant wheels; it lists every variant the index has for
that version, and it is mutable (variants may be added later), so it is read, never
cached without revalidation (:class:`~envforge.knowledge.index.IndexClient` asks again
after ``max_age``).

:func:`served_variants` reads a project page (PEP 691 JSON or PEP 503 HTML) for the
variants.json link and the variant wheels of one version; :func:`choose_served` picks
the label for a target (:func:`~envforge.knowledge.wheel_variants.choose`) among the
labels that have a wheel, or says why none fits. An index without a variants.json for
the version serves no variants: the answer is None, not an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag, urljoin

from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import InvalidInput
from envforge.knowledge.index import LISTING_ACCEPT, IndexClient, listing_url
from envforge.knowledge.listing import IndexProblem, scan_anchors
from envforge.knowledge.wheel_variants import (
    MAX_VARIANT_JSON,
    Supported,
    VariantChoice,
    VariantFile,
    WheelVariant,
    choose,
    read_variant_json,
    wheel_label,
)


def wheel_name(project: str) -> str:
    """A project name as wheel file names write it (the binary distribution format
    spec: runs of ``-_.`` become ``_``, lower case): ``Torch-Audio`` → ``torch_audio``."""
    return re.sub(r"[-_.]+", "_", project).lower()


def variants_json_name(project: str, version: str) -> str:
    """``{name}-{version}-variants.json`` (PEP 825 "Index-level metadata")."""
    return f"{wheel_name(project)}-{version}-variants.json"


@dataclass(frozen=True)
class ServedVariants:
    """What an index serves for one project version: its variants.json and its variant
    wheels (file name → URL) by label."""

    project: str
    version: str
    metadata: VariantFile
    #: label → (file name, URL, ``sha256:<hex>`` or "") of each wheel with that label
    wheels: dict[str, tuple[tuple[str, str, str], ...]]
    url: str

    def hashes(self, label: str) -> tuple[str, ...]:
        return tuple(h for _name, _url, h in self.wheels.get(label, ()) if h)


_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def _sha256(value: object) -> str:
    """``sha256:<hex>`` of a listed hash, "" when there is none (or it is not one)."""
    return f"sha256:{value}" if isinstance(value, str) and _SHA256_RE.match(value) else ""


def _links(body: bytes, content_type: str, page: str) -> list[tuple[str, str, str]]:
    """(file name, absolute URL without fragment, ``sha256:<hex>`` or "") of every file a
    project page links: PEP 691 ``files[].hashes.sha256``, PEP 503 ``#sha256=`` fragments."""
    text = body.decode("utf-8", "replace")
    out: list[tuple[str, str, str]] = []
    if "json" in content_type:
        try:
            data: Any = loads(text)
        except BadJSON:
            return []
        files = data.get("files") if isinstance(data, dict) else None
        for f in files if isinstance(files, list) else ():
            if not isinstance(f, dict):
                continue
            name, href, hashes = f.get("filename"), f.get("url"), f.get("hashes")
            if isinstance(name, str) and isinstance(href, str):
                sha = _sha256(hashes.get("sha256")) if isinstance(hashes, dict) else ""
                out.append((name, urldefrag(urljoin(page, href))[0], sha))
        return out
    for attrs, label in scan_anchors(text)[0]:
        href = attrs.get("href")
        if href:
            url, fragment = urldefrag(urljoin(page, href))
            algo, _, digest = fragment.partition("=")
            name = label or url.rsplit("/", 1)[-1]
            out.append((name, url, _sha256(digest) if algo == "sha256" else ""))
    return out


def served_variants(
    client: IndexClient, root: str, project: str, version: str
) -> ServedVariants | IndexProblem | None:
    """The variants ``root`` serves for ``project`` ``version``: None when the page
    links no ``{name}-{version}-variants.json`` (no variants served there); an
    :class:`IndexProblem` when the page or the file cannot be read; :class:`InvalidInput`
    when the file is not PEP 825 metadata."""
    page = listing_url(root, project)
    got = client.get(page, LISTING_ACCEPT)
    if isinstance(got, IndexProblem):
        return got
    links = _links(got.body, got.content_type, page)
    wanted = variants_json_name(project, version)
    meta_url = next((url for name, url, _sha in links if name == wanted), None)
    if meta_url is None:
        return None
    doc = client.get(meta_url, "application/json", limit=MAX_VARIANT_JSON)
    if isinstance(doc, IndexProblem):
        return doc
    metadata = read_variant_json(doc.body, source=meta_url)
    prefix = f"{wheel_name(project)}-{version}-"
    wheels: dict[str, list[tuple[str, str, str]]] = {}
    for name, url, sha in links:
        label = wheel_label(name) if name.startswith(prefix) else None
        if label is not None:
            wheels.setdefault(label, []).append((name, url, sha))
    return ServedVariants(
        project, version, metadata, {k: tuple(v) for k, v in wheels.items()}, meta_url
    )


def choose_served(served: ServedVariants, supported: Supported) -> VariantChoice:
    """The label an installer would take for ``supported`` among the labels with a
    wheel on the index (a label in variants.json without a wheel is not installable);
    a wheel whose label variants.json does not describe is refused (PEP 825: the index
    file "MUST list all variants available on the package index")."""
    choice = choose(served.metadata, supported, labels=tuple(served.wheels))
    refused = dict(choice.refused)
    for label in served.wheels:
        if label not in served.metadata.variants:
            refused[label] = f"not described by {served.url}"
    for label in served.metadata.variants:
        if label not in served.wheels:
            refused.setdefault(label, "listed in variants.json but no wheel is served")
    return VariantChoice(choice.label, choice.properties, choice.ranked, refused)


def variant_for(
    client: IndexClient, root: str, project: str, version: str, supported: Supported
) -> WheelVariant | None:
    """The :class:`WheelVariant` to record for ``project`` ``version`` on a target:
    None when ``root`` serves no variants for it; :class:`InvalidInput` when it serves
    variants and none fits (naming each label and why), or when its page or metadata
    cannot be read."""
    served = served_variants(client, root, project, version)
    if served is None:
        return None
    if isinstance(served, IndexProblem):
        raise InvalidInput(
            f"reading the wheel variants of {project} {version}: {served.one_line()}",
            hint="check the network or the index URL",
        )
    choice = choose_served(served, supported)
    if choice.label is None:
        raise InvalidInput(
            f"{served.url}: no variant of {project} {version} fits "
            f"{supported.described or 'this target'}: {choice.why_none()}",
            hint="choose another torch version or index, or a target the variants cover",
        )
    return WheelVariant(
        project,
        version,
        choice.label,
        choice.properties,
        served.url,
        served.hashes(choice.label),
    )
