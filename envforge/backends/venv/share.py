"""One copy on disk of what every venv installs alike: a store of shared, read-only files.

A venv's installed files are copies (uv's ``--link-mode copy``: an edit in one venv must
never reach uv's cache). Two projects on one stack would each hold torch (0.9 GB on the
cpu stack, several GB on CUDA and ROCm). So each file a RECORD lists with a hash is kept
once, in ``$ENVFORGE_HOME/store/sha256/<2 hex>/<64 hex>`` (the name is the RECORD's
hash), and every venv that installs the same bytes holds a hard link to it:

1. :func:`link_shared`, after the install: a file whose copy is in the store, with the
   bytes its name says (read again: a write through another venv's link may have changed
   them), becomes a link to that copy; a store file that changed leaves the store. The
   full scan and RECORD check that follow read the linked bytes too.
2. :func:`add_to_store`, once that check passed: the venv's other files join the store,
   read-only (write bits cleared on the shared inode).

A write through a shared link changes the bytes of every venv holding it. Each venv's
certificate is bound to its content (:mod:`envforge.backends.venvscan`), so every one of
them then refuses to run until it is rebuilt: detected, never propagated silently. The
write bits are cleared so that such a write fails for anyone but root in the first place.
Where the file system has no hard links (or the store is on another one), files stay
copies. ``envforge gc`` removes store files that no venv links any more.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from envforge.backends.venvscan import distributions, read_record

#: Below ``$ENVFORGE_HOME``: the store's folder.
STORE = "store"
WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def store_dir(state: Path) -> Path:
    return state / STORE / "sha256"


def _hex(record_hash: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(record_hash + "=" * (-len(record_hash) % 4))
    except (ValueError, TypeError):
        return None
    return raw.hex() if len(raw) == 32 else None


def _files(venv: Path) -> Iterator[tuple[Path, str]]:
    """(file, its hash in hex) of every file a RECORD lists with a hash, inside the venv."""
    root = os.path.realpath(venv)
    for sp, dist in distributions(venv):
        for entry in read_record(dist) or ():
            key = _hex(entry.sha256) if entry.sha256 else None
            if key is None:
                continue
            path = os.path.normpath(os.path.join(sp, entry.path))
            if not path.startswith(root + os.sep):
                continue  # ../../bin/x scripts outside site-packages stay: a venv's own
            yield Path(path), key


def _where(store: Path, key: str) -> Path:
    return store / key[:2] / key


def _regular(path: Path) -> os.stat_result | None:
    try:
        info = path.lstat()
    except OSError:
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _replace_with_link(source: Path, path: Path) -> bool:
    tmp = path.with_name(f".{path.name}.envforge-link")
    try:
        os.link(source, tmp)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def link_shared(venv: Path, store: Path) -> int:
    """Files of ``venv`` whose copy is in ``store`` become hard links to it; how many.
    A store file whose bytes are not what its name says (written through a link of a venv
    since) leaves the store: the venv keeps its own copy, which :func:`add_to_store` puts
    there once checked."""
    linked = 0
    for path, key in _files(venv):
        kept_path = _where(store, key)
        kept, mine = _regular(kept_path), _regular(path)
        if kept is None or mine is None:
            continue
        if kept.st_ino == mine.st_ino and kept.st_dev == mine.st_dev:
            continue
        if kept.st_size != mine.st_size or _sha256(kept_path) != key:
            with contextlib.suppress(OSError):
                kept_path.unlink()  # the venvs that hold it find the change themselves
            continue
        if not _replace_with_link(kept_path, path):
            return linked  # no hard links here (another file system): copies stay
        linked += 1
    return linked


def add_to_store(venv: Path, store: Path) -> int:
    """The files of ``venv`` (checked against their RECORD hashes) that the store lacks
    join it, read-only; how many."""
    added = 0
    for path, key in _files(venv):
        target = _where(store, key)
        mine = _regular(path)
        if mine is None or _regular(target) is not None:
            continue
        try:
            os.chmod(path, stat.S_IMODE(mine.st_mode) & ~WRITE_BITS)
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return added
        if not _replace_with_link(path, target):
            return added
        added += 1
    return added


def unused(store: Path) -> list[tuple[Path, int]]:
    """Store files no venv links any more (one link: the store's), with their bytes."""
    found: list[tuple[Path, int]] = []
    try:
        folders = sorted(store.iterdir())
    except OSError:
        return found
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                found.append((Path(entry.path), info.st_blocks * 512))
    return found
