"""The compatibility table as commands get it: the shipped table merged with the overlays,
parsed from YAML once and then read from its compiled form.

:func:`load_table` finds the overlays (:func:`overlay_files`), then asks
:func:`envforge.core.datacache.load` for the table: the compiled form in
``$ENVFORGE_CACHE_DIR/compiled/compat.json`` when its key (envforge and Python versions,
the parser's modules, the SHA-256 of ``compat.yaml`` and of every overlay) is this one,
else :mod:`envforge.knowledge.parse` reads and checks the YAML and the cache is rewritten.
Only a cache miss imports the parser (PyYAML's reader, the row readers).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

from envforge.core import datacache
from envforge.core.resources import data_file
from envforge.errors import TableError
from envforge.knowledge import table as table_module
from envforge.knowledge import variants as variants_module
from envforge.knowledge.table import CompatTable

#: Overlay files: ``os.pathsep``-separated files or folders of ``*.yaml``.
KNOWLEDGE_PATH_ENV = "ENVFORGE_KNOWLEDGE_PATH"
#: The modules whose code decides what the YAML parses to (a changed one: cache stale).
PARSER_MODULES = (
    "knowledge/parse.py",
    "knowledge/rows.py",
    "knowledge/release.py",
    "knowledge/table.py",
    "knowledge/variants.py",
    "knowledge/compiled.py",
    "core/yamlcheck.py",
    "core/patterns.py",
    "core/datacache.py",
    "knowledge/arch.py",
    "knowledge/platforms.py",
)

#: (path as given, st_mtime_ns, st_size): a file's identity for the in-process cache.
OverlayKey = tuple[tuple[str, int, int], ...]


def dataclasses_of(module: ModuleType) -> tuple[type, ...]:
    """The dataclasses a module defines (what its compiled values may hold)."""
    return tuple(
        v
        for v in vars(module).values()
        if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == module.__name__
    )


def overlay_files(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The overlay files, in the order they are applied (a later one wins).

    ``$XDG_CONFIG_HOME/envforge/knowledge/*.yaml`` (default ``~/.config``) first, then
    the entries of ``ENVFORGE_KNOWLEDGE_PATH`` from last to first, so its first entry
    wins (like ``PATH``). A folder gives its ``*.yaml`` files in name order; an entry that
    does not exist is a :class:`TableError` (exit 2).
    """
    env = os.environ if environ is None else environ
    out: list[Path] = []
    config = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    user_dir = Path(config) / "envforge" / "knowledge"
    try:
        has_user_dir = user_dir.is_dir()
    except OSError:  # e.g. HOME is another user's (sudo, setpriv): not this user's folder
        has_user_dir = False
    if has_user_dir:
        out += _yaml_files(user_dir)
    entries = [e for e in env.get(KNOWLEDGE_PATH_ENV, "").split(os.pathsep) if e]
    for entry in reversed(entries):
        path = Path(entry)
        if path.is_dir():
            out += _yaml_files(path)
        elif path.exists():
            out.append(path)
        else:
            raise TableError(
                str(path),
                "",
                f"no such file or folder (from {KNOWLEDGE_PATH_ENV})",
                hint=f"fix or remove the entry in {KNOWLEDGE_PATH_ENV}",
            )
    return tuple(out)


def _yaml_files(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".yaml")
    except OSError as exc:
        raise TableError(str(folder), "", f"cannot be listed: {exc.strerror or exc}") from None


def overlay_key(files: Sequence[Path]) -> OverlayKey:
    """The in-process cache key of an overlay set: each file, its modification time, size."""
    out: list[tuple[str, int, int]] = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(f), -1, -1))
    return tuple(out)


def load_table(environ: Mapping[str, str] | None = None) -> CompatTable:
    """The shipped table merged with the overlays (:func:`overlay_files`).

    Once per overlay set per process (an ``lru_cache`` keyed on the files, their
    modification times and sizes); across processes from the compiled cache
    (:mod:`envforge.core.datacache`), parsed from YAML when it is not fresh.
    """
    return _load_layers(overlay_key(overlay_files(environ)))


@functools.lru_cache(maxsize=8)
def _load_layers(key: OverlayKey) -> CompatTable:
    files = [data_file("compat.yaml"), *(Path(name) for name, _, _ in key)]
    return datacache.load(
        "compat",
        files,
        lambda: _parse(files),
        CompatTable,
        (*dataclasses_of(table_module), *dataclasses_of(variants_module)),
        code=PARSER_MODULES,
    )


def _parse(files: Sequence[Path]) -> CompatTable:
    """Read and check the YAML of every layer (a cache miss: the parser is imported)."""
    from envforge.knowledge.parse import load_layer_files  # noqa: PLC0415 - on a miss only

    return load_layer_files(files)
