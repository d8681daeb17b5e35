"""A user's project as envforge sees it: what it requires, not how it is built.

:class:`Project` is read once from a folder (:func:`envforge.project.read.load_project`)
and passed on unchanged: to the stack check (the stack's pins win), to the resolver, to
the backends (an environment per project) and to certification (its own checks).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from envforge.core.settings import Held

#: The section envforge reads in a project's pyproject.toml, and the file a
#: requirements.txt project keeps the same keys in.
TOOL_SECTION = "tool.envforge"
ENVFORGE_FILE = "envforge.toml"

#: Keys of ``[tool.envforge]`` (and of envforge.toml): what each one holds.
TOOL_KEYS = {
    "recipe": 'a recipe name or "auto"',
    "checks": 'a list of Python files or commands, e.g. ["pytest -x -q tests/gpu"]',
    "extras": "a list of optional-dependency names to install",
    "groups": "a list of PEP 735 dependency groups to install",
    "system_packages": 'a list of Debian/Ubuntu package names, e.g. ["ffmpeg", "libgl1"]',
    "skip_imports": 'a list of {module = "NAME", reason = "why"}: top-level modules '
    "certification does not import",
}


@dataclasses.dataclass(frozen=True)
class Project:
    """A project folder's requirements and envforge settings (all validated).

    ``requirements`` are PEP 508 strings in the order the files give them (optional
    dependencies and dependency groups that were asked for included); ``constraints``
    come from requirements files' ``-c`` lines. ``installable`` is true when the folder
    can be installed itself (a pyproject.toml with a ``[project]`` table, or setup.py).
    """

    root: Path
    #: The file the requirements came from (pyproject.toml or requirements.txt).
    source: Path
    name: str
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    recipe: str | None = None
    checks: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    requires_python: str | None = None
    installable: bool = False
    #: Where the ``[tool.envforge]`` settings were read (None: no settings).
    settings_file: Path | None = None
    #: Debian/Ubuntu packages the project needs (installed in its image before its
    #: Python packages; on the venv backend checked on the host).
    system_packages: tuple[str, ...] = ()
    #: (module, reason): top-level modules of installed distributions that certification
    #: does not import (``[tool.envforge] skip_imports``), recorded in the certificate.
    skip_imports: tuple[tuple[str, str], ...] = ()
    #: (key, value): the :mod:`envforge.core.settings` keys ``[tool.envforge]`` sets
    #: (wheelhouse, ca_bundle, ...; paths made absolute from the file's folder).
    settings: tuple[tuple[str, Held], ...] = ()

    def key(self) -> str:
        """A short stable name for this project's environment: its name and a digest of
        its folder, so two projects of one name in two folders never share one."""
        digest = hashlib.sha256(str(self.root).encode("utf-8", "surrogateescape")).hexdigest()
        return f"{self.name}-{digest[:8]}"

    def requirements_digest(self) -> str:
        """sha256 over what decides the environment's contents (not the checks)."""
        parts = [
            "requirements",
            *self.requirements,
            "constraints",
            *self.constraints,
            "python",
            self.requires_python or "",
        ]
        if self.system_packages:  # only when some: digests without them stay as they were
            parts += ["system_packages", *self.system_packages]
        text = "\n".join(parts)
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
