"""A cache of shared objects' ELF facts on this host, keyed by what changes with the file.

Reading a file's facts costs pyelftools 1-5 ms of CPU; an environment holds hundreds.
A file whose path, device, inode, size and modification time are unchanged has the same
facts, so they are kept in ``STATE/audit-facts.json`` (``envforge.core.paths.state_dir``)
and read again only when one of those changes. The cache is a convenience: one that
cannot be read is ignored, one that cannot be written is not written, and it holds the
facts of at most :data:`MAX_ENTRIES` files (the newest run's first).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from envforge.audit.elfscan import ElfFacts, facts_from_dict
from envforge.core.jsonlimits import BadJSON, load_file
from envforge.core.paths import state_dir
from envforge.errors import EnvforgeError

FILE = "audit-facts.json"
VERSION = 2  # the facts' shape: bump when ElfFacts.to_dict changes
MAX_ENTRIES = 20_000
_MAX_BYTES = 64 * 1024 * 1024


def _key(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _load(where: Path) -> dict[str, dict[str, object]]:
    try:
        data = load_file(where, max_bytes=_MAX_BYTES)
    except (OSError, BadJSON, EnvforgeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def cached_scan(
    paths: Iterable[str],
    scan_many: Callable[[list[str]], dict[str, ElfFacts]],
    where: Path | None = None,
) -> dict[str, ElfFacts]:
    """The facts of ``paths``: from the cache where the file is unchanged, else from
    ``scan_many`` (then written back)."""
    where = where or state_dir() / FILE
    old = _load(where)
    keys = {p: _key(p) for p in sorted(set(paths))}
    out: dict[str, ElfFacts] = {}
    for path, key in keys.items():
        entry = old.get(path)
        if key is not None and isinstance(entry, dict) and entry.get("key") == key:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out[path] = facts_from_dict(entry["facts"])  # type: ignore[arg-type]
    missing = [p for p in keys if p not in out]
    if not missing:
        return out
    out.update(scan_many(missing))
    fresh: dict[str, dict[str, object]] = {
        p: {"key": keys[p], "facts": out[p].to_dict()} for p in keys if keys[p]
    }
    kept = {p: e for p, e in old.items() if p not in fresh}
    merged = dict(list(fresh.items()) + list(kept.items())[: max(0, MAX_ENTRIES - len(fresh))])
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_name(f".{where.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": VERSION, "files": merged}), encoding="utf-8")
        os.replace(tmp, where)
    except OSError:
        pass
    return out
