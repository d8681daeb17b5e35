"""Certificates: a probe report bound to an image's filesystem content (pure: no SDK).

A :class:`Certificate` says "this host ran the probe on the image whose layers have these
diff IDs and whose config is this one, built from this recipe, and the probe passed (or
failed at step X)".

Formats (the ``schema`` field, covered by the digest, so a certificate cannot be passed
off as another format): ``envforge.certificate/2`` binds the image's whole config except
the certificate label itself (health check, volumes, ports, ONBUILD, stop signal, shell,
labels, env, entrypoint, ...: see :func:`envforge.container.refs.bound_config`);
``envforge.certificate/1`` (envforge before format 2) bound only Env, Entrypoint, Cmd,
WorkingDir and User. Format 1 certificates are still read, checked on what they bind and
said to be older (:attr:`Certificate.full_binding` is False); new ones are always format 2.

Its ``digest`` is the sha256 of its canonical JSON without the digest field, so any edit
is detected.

Where certificates live:

* the local store, ``envforge.core.paths.certificates_dir()/<hex digest>.json`` (one file per
  certificate, written atomically) -- the host's own record, which ``publish`` requires;
* the certified image itself, as the label ``io.envforge.certificate`` (compact JSON).
  The label is added by a metadata-only build ``FROM <candidate>`` (see
  :func:`envforge.backends.docker.images.label_image`), so the certified image's layer diff IDs
  are the candidate's and the certificate travels to any registry with the image.

The digest is an integrity check, not a signature: ``envforge verify`` proves that a
pulled image's content is what the certificate names. Who issued it is the optional
``signature`` field (ed25519 over the digest; format in :mod:`envforge.publish.signing`), which is
left out of the digest like the digest itself: an unsigned certificate's digest is the
same as before signatures existed, and :func:`sign` does not change it.

Certifying an image (probe it in a container, issue, store, label) is the Docker
backend's :func:`envforge.backends.docker.certification.certify_image`. The venv backend records
its verdicts in the venv itself (``.envforge/certified.json``, see
:mod:`envforge.backends.venv`) and in the evidence store (:mod:`envforge.evidence.evidence_store`),
not in this format.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envforge.core import paths
from envforge.core.fsutil import read_limited, write_atomically
from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import CertificationFailed, clip
from envforge.version import __version__

SCHEMA = "envforge.certificate/2"
#: Format 1: binds the layers and only Env, Entrypoint, Cmd, WorkingDir and User.
SCHEMA_V1 = "envforge.certificate/1"
#: Every format this envforge reads, by number.
FORMATS = {SCHEMA: 2, SCHEMA_V1: 1}
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
class Certificate:
    """A probe verdict bound to image content. Build with :func:`issue`."""

    data: Mapping[str, Any]

    @property
    def digest(self) -> str:
        return str(self.data["digest"])

    @property
    def format(self) -> int:
        """The certificate format: 2 binds the whole config, 1 only the run config."""
        return FORMATS[str(self.data["schema"])]

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
        return tuple(self.data["image"]["layers"])

    @property
    def config(self) -> Mapping[str, Any]:
        return dict(self.data["image"]["config"])

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
                f"{source} is not an envforge certificate ({SCHEMA} or {SCHEMA_V1})"
                + (f": format {schema!r} is not known to this envforge" if newer else ""),
                hint="upgrade envforge" if newer else None,
            )
        try:
            layers = data["image"]["layers"]
            ok = (
                isinstance(layers, list)
                and all(isinstance(x, str) for x in layers)
                and isinstance(data["image"]["config"], dict)
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
    layers: Sequence[str],
    config: Mapping[str, Any],
    candidate_id: str,
    now: float | None = None,
    stack: Mapping[str, Any] | None = None,
    skip_imports: Sequence[tuple[str, str]] = (),
) -> Certificate:
    """Bind a probe report (its ``to_dict()``) to an image's content; ``stack`` (the
    recipe's :meth:`envforge.stack.Stack.to_dict`) records the packages it pins;
    ``skip_imports`` the (module, reason) pairs a project's certification did not import."""
    status = "pass" if report.get("status") == "pass" else "fail"
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "status": status,
        "failing_step": None if status == "pass" else failing_step_of(report) or "probe",
        "recipe": {"name": recipe_name, "hash": recipe_hash, "stack_tag": stack_tag},
        "image": {"layers": list(layers), "config": dict(config), "candidate": candidate_id},
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
            if c.layers == tuple(layers)
            and (recipe_name is None or c.recipe_name == recipe_name)
            and (recipe_hash is None or c.recipe_hash == recipe_hash)
        ]
        return max(matching, key=lambda c: c.issued_at) if matching else None
