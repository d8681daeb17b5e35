"""What an image records of its build, as labels (``io.envforge.*``): that a wheelhouse
and a CA bundle were used, by digest (never their host paths, which name the user's
home), and the base-image mirror it was pulled through. The index mirrors are recorded
by the renderer (:func:`envforge.render.labels.recorded`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from envforge.errors import InvalidInput

WHEELHOUSE_LABEL = "io.envforge.wheelhouse"
CA_BUNDLE_LABEL = "io.envforge.ca-bundle"
BASE_MIRROR_LABEL = "io.envforge.base-image-mirror"


def wheelhouse_digest(folder: Path) -> str:
    """``sha256:…`` of the wheelhouse's ``.whl`` names and sizes, sorted (the files are
    not read: a torch wheel is gigabytes; a rebuilt wheel of the same name and size is
    the same release)."""
    listing = []
    for wheel in sorted(folder.glob("*.whl")):
        try:
            listing.append(f"{wheel.name}\t{wheel.stat().st_size}\n")
        except OSError:
            continue
    return "sha256:" + hashlib.sha256("".join(listing).encode()).hexdigest()


def file_digest(path: Path) -> str:
    """``sha256:…`` of a file's bytes (exit 2 naming it when it cannot be read)."""
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise InvalidInput(
            f"--ca-bundle {path}: cannot be read ({exc.strerror})", hint="name a readable file"
        ) from None


def build_provenance(
    wheelhouse: Path | None, ca_bundle: Path | None, base_mirror: str | None
) -> tuple[tuple[str, str], ...]:
    """The labels recording what a build used (only what it used)."""
    pairs: list[tuple[str, str]] = []
    if wheelhouse is not None:
        pairs.append((WHEELHOUSE_LABEL, wheelhouse_digest(wheelhouse)))
    if ca_bundle is not None:
        pairs.append((CA_BUNDLE_LABEL, file_digest(ca_bundle)))
    if base_mirror:
        pairs.append((BASE_MIRROR_LABEL, base_mirror))
    return tuple(pairs)
