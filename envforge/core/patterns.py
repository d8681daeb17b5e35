"""The shared patterns and vocabularies of envforge's inputs, in one place.

The recipe loader, the compatibility table's parser, the knowledge rules and the
renderer all check the same shapes (recipe names, CPython versions, image references,
environment variable names, GPU archs). Every pattern here is ASCII-only (``\\d`` would
also match ``١``) and anchored with ``\\Z`` (``$`` would accept a trailing newline), so
``PATTERN.match(text)`` checks the whole text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

#: A recipe name: it becomes an image name (one path component of the engine's grammar:
#: lowercase letters and digits, separated by one '.', one or two '_', or '-'s; so no
#: ``0..`` or ``a-``) and a file stem; at most 63 characters.
NAME_RE = re.compile(r"^(?=[a-z0-9._-]{1,63}\Z)[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z", re.ASCII)
#: An environment variable name (POSIX shell name; rule ``env-name``).
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z", re.ASCII)
#: A dotted release number: ``5.2``, ``1.13.1``.
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*\Z", re.ASCII)
#: A CPython minor version: ``3.10``.
PYTHON_RE = re.compile(r"^3\.[0-9]{1,2}\Z", re.ASCII)
#: A Debian/Ubuntu package name (Debian policy 5.6.1: lowercase letters, digits, + - .;
#: at least two characters, starting with a letter or digit).
DEB_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")
#: An image reference as the renderer may splice it into ``FROM`` unquoted.
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z", re.ASCII)
#: An http(s) URL without whitespace (``torch.index``).
URL_RE = re.compile(r"^https?://\S+\Z", re.ASCII)

#: An AMD gfx target: ``gfx1030``, ``gfx90a``, ``gfx1151``. Groups: major (decimal),
#: minor (hex digit), stepping (hex digit). See :mod:`envforge.knowledge.arch`.
GFX_RE = re.compile(r"^gfx([0-9]{1,2})([0-9a-f])([0-9a-f])\Z", re.ASCII)
#: An HSA ISA version (``HSA_OVERRIDE_GFX_VERSION`` value): ``10.3.0``, ``9.0.10``.
ISA_RE = re.compile(r"^([0-9]{1,2})\.([0-9]{1,2})\.([0-9]{1,2})\Z", re.ASCII)
#: An NVIDIA SASS arch: ``sm_86``, ``sm_90a`` (arch-specific), ``sm_100f`` (family).
SM_RE = re.compile(r"^sm_([0-9]{2,3})([af]?)\Z", re.ASCII)

Confidence = Literal["verified", "community", "uncertain"]
CONFIDENCES: tuple[Confidence, ...] = ("verified", "community", "uncertain")
#: How much of the probe certification runs (``--level``).
Level = Literal["quick", "full"]
LEVELS: tuple[Level, ...] = ("quick", "full")

#: Set to ``1`` (``true``, ``yes``, ``on``): what the table has no row for is refused.
STRICT_ENV = "ENVFORGE_STRICT"


def strict_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """``ENVFORGE_STRICT=1`` (``true``, ``yes``): unknown stacks are refused."""
    env = os.environ if environ is None else environ
    return env.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
