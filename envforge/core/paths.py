"""Where envforge keeps state on this host (certificates, virtualenvs, caches)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$ENVFORGE_HOME``, else ``$XDG_DATA_HOME/envforge``, else ``~/.local/share/envforge``;
    always absolute: a relative ``ENVFORGE_HOME`` (``ENVFORGE_HOME=state``) is taken
    from the current folder once, here, so a venv's path stays right in processes that
    run elsewhere (the probe runs in a folder of its own)."""
    env = os.environ if environ is None else environ
    if env.get("ENVFORGE_HOME"):
        return Path(os.path.abspath(Path(env["ENVFORGE_HOME"]).expanduser()))
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(os.path.abspath(Path(base).expanduser())) / "envforge"


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where envforge keeps what it can make again (the compiled knowledge tables):
    ``$ENVFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/envforge``, else ``~/.cache/envforge``;
    never under ``ENVFORGE_HOME``, so a command that refuses its input leaves the state
    folder as it was (it may not even exist)."""
    env = os.environ if environ is None else environ
    if env.get("ENVFORGE_CACHE_DIR"):
        return Path(os.path.abspath(Path(env["ENVFORGE_CACHE_DIR"]).expanduser()))
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.path.abspath(Path(base).expanduser())) / "envforge"


def certificates_dir(environ: Mapping[str, str] | None = None) -> Path:
    return state_dir(environ) / "certificates"


def venvs_dir(environ: Mapping[str, str] | None = None) -> Path:
    return state_dir(environ) / "venvs"


def reports_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Probe reports, venv certifications and imported evidence
    (``envforge.evidence.evidence_store``)."""
    return state_dir(environ) / "reports"
