"""A venv as the subject of an attestation: its content digests and interpreter now, and
the certificate (``.envforge/certified.json``) it carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envforge.backends.venv.layout import (
    BUILD_MARKER,
    CERT_MARKER,
    MARKER_DIR,
    _read_json,
    read_certificate,
)
from envforge.backends.venvscan import content_digests
from envforge.errors import InvalidInput
from envforge.publish.attestation import ATTESTATIONS_NAME, Subject, venv_digest, venv_subject


def attestations_file(venv: Path) -> Path:
    """Where a venv keeps the attestations of its certifications."""
    return venv / MARKER_DIR / ATTESTATIONS_NAME


def certified(venv: Path) -> tuple[Subject, dict[str, Any]]:
    """The venv's subject (its content now) and its certificate; :class:`InvalidInput`
    when it has none (not built by envforge, or never certified)."""
    markers = venv / MARKER_DIR
    built = _read_json(markers / BUILD_MARKER)
    cert = read_certificate(venv)
    if built is None or cert is None:
        raise InvalidInput(
            f"{venv}: not a certified envforge venv (no {MARKER_DIR}/{CERT_MARKER})",
            hint="envforge build RECIPE --backend venv certifies one",
        )
    digest = venv_digest(
        content_digests(venv), str(built.get("python") or ""), str(built.get("interpreter") or "")
    )
    return venv_subject(str(cert.get("recipe") or venv.name), digest), cert
