"""What ``envforge list`` shows for each recipe file, kept in a small cache.

Listing loads every recipe of the catalogue (24 shipped ones, plus the user's): reading and
checking them all costs more than starting Python with click and PyYAML. So each file's
row (name, arch, stack, description, or the one-line error that makes it ``BROKEN``) is
kept in ``$ENVFORGE_HOME/cache/listing.json`` under a key made of the file's path and its
``stat`` identity (device, inode, size, modification and change times in nanoseconds), and
the whole cache is bound to a *code stamp*: envforge's version plus the size and
modification time of the modules that decide what a recipe loads to. A file that changed,
a checkout that changed its loader, or a cache that cannot be read means the file is
loaded again; nothing else reads the cache. Writing it is best effort: a read-only or full
``ENVFORGE_HOME`` never makes ``list`` fail. Only regular files are cached (a FIFO or a
folder named ``*.yaml`` is refused again on every listing).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envforge.core.jsonlimits import loads
from envforge.core.reading import read_limited
from envforge.errors import EnvforgeError
from envforge.version import __version__

SCHEMA = "envforge.listing/1"
CACHE_NAME = "listing.json"
#: Largest cache file read back (bytes); a larger one is ignored and rewritten.
MAX_CACHE_BYTES = 4 << 20
#: The modules whose code decides a file's row (relative to the envforge package).
_CODE = (
    "recipe/load.py",
    "recipe/checks.py",
    "recipe/model.py",
    "recipe/listing.py",
    "core/patterns.py",
    "core/yamlcheck.py",
    "errors.py",
    "core/fsutil.py",
)


@dataclass(frozen=True)
class Row:
    """One recipe file as ``list`` shows it."""

    name: str
    path: str
    vendor: str | None
    arch: str | None
    stack: str | None
    description: str | None
    #: The one-line error (file, key, fix) when the file cannot be loaded.
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def code_stamp(package: Path | None = None) -> str:
    """envforge's version and the identity of the modules that load recipes."""
    root = Path(__file__).resolve().parents[1] if package is None else package
    parts = [__version__]
    for rel in _CODE:
        try:
            info = os.stat(root / rel)
        except OSError:
            parts.append(f"{rel}:-")
            continue
        parts.append(f"{rel}:{info.st_size}:{info.st_mtime_ns}")
    return "|".join(parts)


def file_key(path: Path) -> str | None:
    """The cache key of a recipe file, or None when it is not a regular file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (
        f"{os.path.abspath(path)}\0{info.st_dev}:{info.st_ino}:{info.st_size}:"
        f"{info.st_mtime_ns}:{info.st_ctime_ns}"
    )


def load_row(name: str, path: Path) -> Row:
    """Load one file with the real loader (the slow path)."""
    from envforge.recipe.load import load_recipe_file  # noqa: PLC0415 - light on a cache hit

    try:
        recipe = load_recipe_file(path)
    except EnvforgeError as exc:
        return Row(name, str(path), None, None, None, None, exc.one_line())
    return Row(
        name=name,
        path=str(path),
        vendor=recipe.gpu.vendor,
        arch=recipe.gpu.arch,
        stack=recipe.stack_tag,
        description=recipe.description,
        error=None,
    )


def _read_cache(cache: Path, stamp: str) -> dict[str, Row]:
    try:  # regular files only, never blocking (a FIFO there), bounded
        data = loads(read_limited(cache, MAX_CACHE_BYTES), max_bytes=MAX_CACHE_BYTES)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("code") != stamp:
        return {}
    rows = data.get("rows")
    if not isinstance(rows, dict):
        return {}
    out: dict[str, Row] = {}
    fields = set(Row.__dataclass_fields__)
    for key, value in rows.items():
        if (
            isinstance(key, str)
            and isinstance(value, dict)
            and set(value) == fields
            and all(v is None or isinstance(v, str) for v in value.values())
        ):
            out[key] = Row(**value)
    return out


def _write_cache(cache: Path, stamp: str, rows: Mapping[str, Row]) -> None:
    from envforge.core.fsutil import write_atomically  # noqa: PLC0415 - only when the cache changes

    text = json.dumps(
        {"schema": SCHEMA, "code": stamp, "rows": {k: r.to_dict() for k, r in rows.items()}},
        ensure_ascii=True,
        sort_keys=True,
    )
    with contextlib.suppress(EnvforgeError, OSError):  # a cache: listing works without it
        write_atomically(cache, text + "\n")


def rows(files: Mapping[str, Path], cache_dir: Path | None) -> list[Row]:
    """A row for every ``name -> file`` of the catalogue, from the cache where it is fresh.

    ``cache_dir`` None: no cache (every file loaded).
    """
    stamp = code_stamp()
    cache = None if cache_dir is None else cache_dir / CACHE_NAME
    cached = {} if cache is None else _read_cache(cache, stamp)
    fresh: dict[str, Row] = {}
    out: list[Row] = []
    for name, path in files.items():
        key = file_key(path)
        row = cached.get(key) if key is not None else None
        if row is None or row.name != name or row.path != str(path):
            row = load_row(name, path)
        if key is not None:
            fresh[key] = row
        out.append(row)
    if cache is not None and fresh != cached:
        _write_cache(cache, stamp, fresh)
    return out
