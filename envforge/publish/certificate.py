"""Certificates: a probe report bound to what it probed, one model for every backend.

A :class:`Certificate` says "this host ran the probe on this environment, made from this
recipe, and the probe passed (or failed at step X)". What "this environment" is, is the
certificate's :attr:`~Certificate.binding`, one kind per backend:

* :class:`ImageBinding` (Docker): the image's layer diff IDs and its config (all of it
  but the certificate label: health check, volumes, ports, ONBUILD, stop signal, shell,
  labels, env, entrypoint, ...: see :func:`envforge.container.refs.bound_config`);
* :class:`VenvBinding` (venv): the venv's fingerprint and content digests (every file,
  :mod:`envforge.backends.venvscan`), the project and the project's checks it holds for.

Formats (the ``schema`` field, covered by the digest, so a certificate cannot be passed
off as another format): ``envforge.certificate/3`` (written: ``binding`` names its kind);
``envforge.certificate/2`` and ``/1`` (read: an image binding under ``image``; format 1,
envforge before format 2, bound only Env, Entrypoint, Cmd, WorkingDir and User, so it
is checked on what it binds and said to be older: :attr:`Certificate.full_binding` is
False); and the venv's ``certified.json`` before format 3 (no ``schema``, no digest:
:func:`legacy_venv`, read by the venv backend and the evidence reader, never written).

Its ``digest`` is the sha256 of its canonical JSON without the digest field, so any edit
is detected.

Where certificates live:

* the local store, ``envforge.core.paths.certificates_dir()/<hex digest>.json`` (one file per
  certificate, written atomically) -- the host's own record, which ``publish`` requires,
  read into the evidence database (:func:`envforge.evidence.evidence_store.record`);
* a certified image, as the label ``io.envforge.certificate`` (compact JSON).
  The label is added by a metadata-only build ``FROM <candidate>`` (see
  :func:`envforge.backends.docker.images.label_image`), so the certified image's layer diff IDs
  are the candidate's and the certificate travels to any registry with the image;
* a certified venv, as ``.envforge/certified.json``.

The digest is an integrity check, not a signature: ``envforge verify`` proves that a
pulled image's content is what the certificate names. Who issued it is the optional
``signature`` field (ed25519 over the digest; format in :mod:`envforge.publish.signing`), which is
left out of the digest like the digest itself: an unsigned certificate's digest is the
same as before signatures existed, and :func:`sign` does not change it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Union

from envforge.core import paths
from envforge.core.fsutil import read_limited, write_atomically
from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import CertificationFailed, clip
from envforge.knowledge.wheel_variants import WheelVariant, variant_of
from envforge.version import __version__

SCHEMA = "envforge.certificate/3"
#: Format 2: an image binding (the layers and the whole config) under ``image``.
SCHEMA_V2 = "envforge.certificate/2"
#: Format 1: binds the layers and only Env, Entrypoint, Cmd, WorkingDir and User.
SCHEMA_V1 = "envforge.certificate/1"
#: Every format this envforge reads, by number.
FORMATS = {SCHEMA: 3, SCHEMA_V2: 2, SCHEMA_V1: 1}
#: What a format 1 certificate leaves out, for the one line that says so.
V1_PARTIAL = (
    "certificate format 1 (an older envforge) binds only the layers and Env, Entrypoint, "
    "Cmd, WorkingDir and User, not the rest of the image config (HEALTHCHECK, volumes, "
    "ports, ONBUILD, labels, ...)"
)


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


#: Fields the digest does not cover (the signature signs the digest).
_UNDIGESTED = ("digest", "signature")


def _digest(data: Mapping[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k not in _UNDIGESTED}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


@dataclass(frozen=True)
class ImageBinding:
    """What a Docker certificate binds: the image's layer diff IDs and its config."""

    layers: tuple[str, ...]
    config: Mapping[str, Any]
    candidate: str = ""
    kind: Literal["image"] = "image"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "layers": list(self.layers),
            "config": dict(self.config),
            "candidate": self.candidate,
        }


@dataclass(frozen=True)
class VenvBinding:
    """What a venv certificate binds: the venv's fingerprint and content digests (in
    ``content_format``), the project (None: the recipe's own venv) and its checks."""

    fingerprint: str
    content: Mapping[str, str] = field(default_factory=dict)
    content_format: int = 0
    project: str | None = None
    checks: str | None = None
    kind: Literal["venv"] = "venv"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "fingerprint": self.fingerprint,
            "content": dict(self.content),
            "content_format": self.content_format,
            "project": self.project,
            "checks": self.checks,
        }


Binding = Union[ImageBinding, VenvBinding]


def _binding_of(data: Mapping[str, Any]) -> Binding:
    """The binding of a certificate's data (format 3: ``binding``; 1 and 2: ``image``)."""
    if data["schema"] != SCHEMA:
        image = data["image"]
        return ImageBinding(
            tuple(image["layers"]), dict(image["config"]), image.get("candidate", "")
        )
    raw = data["binding"]
    if raw["kind"] == "image":
        return ImageBinding(
            tuple(raw["layers"]), dict(raw["config"]), str(raw.get("candidate", ""))
        )
    return VenvBinding(
        str(raw["fingerprint"]),
        dict(raw["content"]),
        int(raw["content_format"]),
        raw.get("project"),
        raw.get("checks"),
    )


def _binding_ok(data: Mapping[str, Any]) -> bool:
    """Whether a certificate's binding has the fields its format needs, typed."""
    raw = data["binding"] if data["schema"] == SCHEMA else {"kind": "image", **data["image"]}
    if not isinstance(raw, dict):
        return False
    if raw.get("kind") == "image":
        layers = raw["layers"]
        return (
            isinstance(layers, list)
            and all(isinstance(x, str) for x in layers)
            and isinstance(raw["config"], dict)
        )
    if raw.get("kind") != "venv":
        return False
    content = raw["content"]
    return (
        isinstance(raw["fingerprint"], str)
        and isinstance(content, dict)
        and all(isinstance(v, str) for v in content.values())
        and isinstance(raw["content_format"], int)
        and all(isinstance(raw.get(k), (str, type(None))) for k in ("project", "checks"))
    )


def legacy_venv(data: Any) -> bool:
    """Whether ``data`` is a venv's ``certified.json`` from before format 3 (no schema,
    the recipe, its hash, the fingerprint and the report that passed): read, never
    written, and unverifiable (it has no digest)."""
    return (
        isinstance(data, dict)
        and data.get("schema") is None
        and isinstance(data.get("report"), dict)
        and "fingerprint" in data
    )


@dataclass(frozen=True)
class Certificate:
    """A probe verdict bound to an environment (:attr:`binding`). Build with :func:`issue`."""

    data: Mapping[str, Any]

    @property
    def digest(self) -> str:
        return str(self.data["digest"])

    @property
    def format(self) -> int:
        """The certificate format: 3 names its binding's kind, 2 binds an image's whole
        config, 1 only its run config."""
        return FORMATS[str(self.data["schema"])]

    @property
    def binding(self) -> Binding:
        return _binding_of(self.data)

    @property
    def full_binding(self) -> bool:
        return self.format >= 2

    @property
    def status(self) -> str:
        return str(self.data["status"])

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def layers(self) -> tuple[str, ...]:
        """The image's layer diff IDs (none for another binding)."""
        binding = self.binding
        return binding.layers if isinstance(binding, ImageBinding) else ()

    @property
    def config(self) -> Mapping[str, Any]:
        """The image's bound config (empty for another binding)."""
        binding = self.binding
        return dict(binding.config) if isinstance(binding, ImageBinding) else {}

    @property
    def candidate(self) -> str:
        """The ID of the image the probe ran in ("" for another binding)."""
        binding = self.binding
        return binding.candidate if isinstance(binding, ImageBinding) else ""

    @property
    def recipe_name(self) -> str:
        return str(self.data["recipe"]["name"])

    @property
    def recipe_hash(self) -> str:
        return str(self.data["recipe"]["hash"])

    @property
    def stack_tag(self) -> str:
        return str(self.data["recipe"]["stack_tag"])

    @property
    def issued_at(self) -> float:
        return float(self.data["issued_at"])

    @property
    def failing_step(self) -> str | None:
        step = self.data.get("failing_step")
        return str(step) if step else None

    @property
    def report(self) -> Mapping[str, Any]:
        return dict(self.data["report"])

    @property
    def variant(self) -> WheelVariant | None:
        """The wheel variant (PEP 825) the certified stack installs; None for a stack of
        non-variant wheels and for certificates from before variants were recorded."""
        stack = self.data.get("stack")
        return variant_of(stack) if isinstance(stack, dict) else None

    @property
    def signed_by(self) -> str | None:
        """The fingerprint the signature names (not checked here), None when unsigned."""
        sig = self.data.get("signature")
        return str(sig["key"]) if isinstance(sig, dict) else None

    def to_json(self, *, compact: bool = True) -> str:
        if compact:
            return canonical_json(dict(self.data))
        return json.dumps(dict(self.data), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, *, source: str = "certificate") -> Certificate:
        """Parse and check a certificate; :class:`CertificationFailed` when it is not one."""
        try:
            data = loads(text)
        except BadJSON as exc:
            raise CertificationFailed(f"{source} is not valid JSON: {exc}") from None
        return cls.from_data(data, source=source)

    @classmethod
    def from_data(cls, data: Any, *, source: str = "certificate") -> Certificate:
        schema = data.get("schema") if isinstance(data, dict) else None
        if not isinstance(schema, str) or schema not in FORMATS:
            newer = isinstance(schema, str) and schema.startswith("envforge.certificate/")
            raise CertificationFailed(
                f"{source} is not an envforge certificate ({', '.join(FORMATS)})"
                + (f": format {schema!r} is not known to this envforge" if newer else ""),
                hint="upgrade envforge" if newer else None,
            )
        try:
            ok = (
                _binding_ok(data)
                and isinstance(data["status"], str)
                and isinstance(data["recipe"]["name"], str)
                and isinstance(data["recipe"]["hash"], str)
                and isinstance(data["recipe"]["stack_tag"], str)
                and isinstance(data["issued_at"], (int, float))
                and isinstance(data["report"], dict)
                and isinstance(data["digest"], str)
                and _signature_shape_ok(data.get("signature"))
            )
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise CertificationFailed(f"{source} lacks required fields")
        if _digest(data) != data["digest"]:
            raise CertificationFailed(
                f"{source} was altered: its digest does not match its content"
            )
        return cls(data)


def _signature_shape_ok(value: Any) -> bool:
    if value is None:
        return True
    return isinstance(value, dict) and all(
        isinstance(value.get(k), str) for k in ("scheme", "key", "public_key", "value")
    )


class Signer(Protocol):
    """What signs a certificate (:class:`envforge.publish.signing.SigningKey`)."""

    def signature_for(self, digest: str) -> dict[str, str]: ...


def sign(cert: Certificate, signer: Signer) -> Certificate:
    """``cert`` with its ``signature`` field (replacing any); the digest is unchanged."""
    data = dict(cert.data)
    data["signature"] = signer.signature_for(cert.digest)
    return Certificate(data)


def failing_step_of(report: Mapping[str, Any]) -> str | None:
    """The first step of a report that did not pass (or skip), as ``name (status: detail)``."""
    for step in report.get("steps") or ():
        if not isinstance(step, Mapping):
            continue
        status = str(step.get("status", ""))
        if status not in ("pass", "warn", "skip"):
            detail = str(step.get("detail") or "").strip().splitlines()
            text = f"{step.get('name')} ({status}"
            if detail:
                text += f": {clip(detail[0], 300)}"
            return text + ")"
    return None


def warnings_of(report: Mapping[str, Any]) -> list[str]:
    """The steps of a report that passed with a warning, as ``name: detail`` (first line)."""
    out: list[str] = []
    for step in report.get("steps") or ():
        if isinstance(step, Mapping) and step.get("status") == "warn":
            detail = (str(step.get("detail") or "").strip().splitlines() or [""])[0][:300]
            out.append(f"{step.get('name')}: {detail}" if detail else str(step.get("name")))
    return out


def skipped_imports(pairs: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """A project's ``skip_imports`` as a certificate records them."""
    return [{"module": module, "reason": reason} for module, reason in pairs]


def issue(
    *,
    report: Mapping[str, Any],
    recipe_name: str,
    recipe_hash: str,
    stack_tag: str,
    layers: Sequence[str] = (),
    config: Mapping[str, Any] | None = None,
    candidate_id: str = "",
    binding: Binding | None = None,
    now: float | None = None,
    stack: Mapping[str, Any] | None = None,
    skip_imports: Sequence[tuple[str, str]] = (),
    extra: Mapping[str, Any] | None = None,
) -> Certificate:
    """Bind a probe report (its ``to_dict()``) to ``binding`` (None: the image of
    ``layers``, ``config`` and ``candidate_id``); ``stack`` (the recipe's
    :meth:`envforge.stack.Stack.to_dict`) records the packages it pins; ``skip_imports``
    the (module, reason) pairs a project's certification did not import; ``extra``:
    more top-level fields (a venv's ``incremental`` record), covered by the digest."""
    if binding is None:
        binding = ImageBinding(tuple(layers), dict(config or {}), candidate_id)
    status = "pass" if report.get("status") == "pass" else "fail"
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "status": status,
        "failing_step": None if status == "pass" else failing_step_of(report) or "probe",
        "recipe": {"name": recipe_name, "hash": recipe_hash, "stack_tag": stack_tag},
        "binding": binding.to_dict(),
        "issued_at": round(time.time() if now is None else now, 3),
        "envforge_version": __version__,
        "report": dict(report),
    }
    if stack is not None:
        data["stack"] = dict(stack)
    if skip_imports:  # absent otherwise: certificates without them are as they were
        data["skip_imports"] = skipped_imports(skip_imports)
    if status == "pass" and report.get("warnings"):  # passed, with steps worth a look
        data["warnings"] = warnings_of(report)
    for key, value in (extra or {}).items():
        data.setdefault(key, value)
    # Round-trip through JSON so that the digest covers exactly what is stored.
    data = json.loads(canonical_json(data))
    data["digest"] = _digest(data)
    return Certificate(data)


def binding_problems(
    cert: Certificate, layers: Sequence[str], config: Mapping[str, Any]
) -> list[str]:
    """Why ``cert`` does not certify an image with ``layers`` and ``config`` (empty: it does)."""
    problems: list[str] = []
    if not cert.passed:
        problems.append(f"the certificate records a failed probe: {cert.failing_step or 'probe'}")
    if tuple(layers) != cert.layers:
        mine, theirs = list(layers), list(cert.layers)
        if len(mine) != len(theirs):
            problems.append(
                f"content differs from certificate: image has {len(mine)} layers, "
                f"certificate names {len(theirs)}"
            )
        else:
            first = next(i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b)
            problems.append(
                f"content differs from certificate: layer {first + 1} is {mine[first][:19]}, "
                f"certificate names {theirs[first][:19]}"
            )
    if dict(config) != dict(cert.config):
        keys = sorted(
            k for k in set(config) | set(cert.config) if config.get(k) != cert.config.get(k)
        )
        problems.append(f"image config differs from certificate: {', '.join(keys)}")
    return problems


#: Bytes one stored certificate may have (a probe report with its steps: kilobytes).
MAX_CERTIFICATE_BYTES = 4 * 1024 * 1024


def _read_stored(path: Path) -> str:
    """A store file, bounded and regular only (a FIFO in the store never blocks)."""
    return read_limited(path, MAX_CERTIFICATE_BYTES).decode("utf-8")


class CertificateStore:
    """The local store: ``<root>/<hex digest>.json``, one certificate per file."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = paths.certificates_dir() if root is None else root

    def path_for(self, digest: str) -> Path:
        return self.root / (digest.split(":", 1)[-1] + ".json")

    def save(self, cert: Certificate) -> Path:
        """Write atomically (temp file + rename); returns the path."""
        target = self.path_for(cert.digest)
        write_atomically(target, cert.to_json(compact=False) + "\n")
        return target

    def load(self, digest: str) -> Certificate | None:
        path = self.path_for(digest)
        try:
            text = _read_stored(path)
        except (OSError, UnicodeDecodeError):
            return None
        try:
            cert = Certificate.from_json(text, source=str(path))
        except CertificationFailed:
            return None
        return cert if cert.digest == digest else None

    def all(self) -> list[Certificate]:
        certs: list[Certificate] = []
        if not self.root.is_dir():
            return certs
        for path in sorted(self.root.glob("*.json")):
            try:
                certs.append(Certificate.from_json(_read_stored(path), source=str(path)))
            except (OSError, UnicodeDecodeError, CertificationFailed):
                continue
        return certs

    def latest_for(
        self,
        layers: Sequence[str],
        *,
        recipe_name: str | None = None,
        recipe_hash: str | None = None,
    ) -> Certificate | None:
        """The newest stored verdict (pass or fail) for exactly these layers.

        A verdict is for content *and* recipe: two recipes can produce the same layers
        (they differ only in labels) and expect different checks, so callers name the
        recipe (and its hash) they ask about.
        """
        matching = [
            c
            for c in self.all()
            if isinstance(c.binding, ImageBinding)
            and c.layers == tuple(layers)
            and (recipe_name is None or c.recipe_name == recipe_name)
            and (recipe_hash is None or c.recipe_hash == recipe_hash)
        ]
        return max(matching, key=lambda c: c.issued_at) if matching else None
