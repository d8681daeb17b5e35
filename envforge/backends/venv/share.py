"""One copy on disk of what every venv installs alike: a store of shared, read-only files.

A venv's installed files are never uv's cache files once built (an edit in one venv must
never reach uv's cache, and a reinstall must bring back the real files). Two projects on
one stack would each hold torch (0.9 GB on the cpu stack, several GB on CUDA and ROCm).
So each file a RECORD lists with a hash is kept once, in
``$ENVFORGE_HOME/store/sha256/<2 hex>/<64 hex>`` (the name is the RECORD's hash), and
every venv that installs the same bytes holds a hard link to it:

1. :func:`link_shared`, after the install: a file whose copy is in the store, with the
   bytes its name says (read again: a write through another venv's link may have changed
   them), becomes a link to that copy; a store file that changed leaves the store. The
   full scan and RECORD check that follow take those bytes as read (they were, a moment
   before, by this process) and read every other file.
2. :func:`add_to_store`, once that check passed: the venv's other files join the store,
   read-only (write bits cleared on the shared inode).

A write through a shared link changes the bytes of every venv holding it. Each venv's
certificate is bound to its content (:mod:`envforge.backends.venvscan`), so every one of
them then refuses to run until it is rebuilt: detected, never propagated silently. The
write bits are cleared so that such a write fails for anyone but root in the first place.
Where the file system has no hard links (or the store is on another one), files stay
copies. ``envforge gc`` removes store files that no venv links any more.

uv installs by hard links from its cache when the cache, the venv and the store share one
file system (:func:`link_mode`): a second venv of a stack then costs links, not a copy of
torch that the store would replace (freeing a copy's blocks is what made rebuilds slow).
Such a file is uv's, never the store's: :func:`add_to_store` copies it into the store
(its hash checked while copying) and links the venv to the copy, so after a build no venv
file is uv's cache file, and an edit in a venv cannot reach uv's cache. (Measured on the
CI machine, 2026-11-28: uv's own copy of the first venv instead, its files then linked
into the store, was 1-2 s slower.)
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from envforge.backends.venvscan import (
    MEMO,
    distributions,
    inode_key,
    note_shared,
    read_list,
    read_record,
    stat_key,
    write_list,
)
from envforge.core import paths

#: Below ``$ENVFORGE_HOME``: the store's folder.
STORE = "store"
WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def store_dir(state: Path) -> Path:
    return state / STORE / "sha256"


def store_memo(store: Path) -> Path:
    """The memo of the store ``store`` (:func:`store_dir`): its files' ``lstat`` keys and
    sha256 by inode, for the venvs that link them (:func:`envforge.backends.venvscan.scan`)."""
    return store.parent / MEMO


def home_memo(environ: Mapping[str, str] | None = None) -> Path:
    """:func:`store_memo` of the store under ``$ENVFORGE_HOME``."""
    return store_memo(store_dir(paths.state_dir(environ)))


def _hex(record_hash: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(record_hash + "=" * (-len(record_hash) % 4))
    except (ValueError, TypeError):
        return None
    return raw.hex() if len(raw) == 32 else None


def _files(venv: Path) -> Iterator[tuple[str, str]]:
    """(file, its hash in hex) of every file a RECORD lists with a hash, inside the venv.
    Paths are strings here: the loops below run once per installed file (16,000 for torch)."""
    root = os.path.realpath(venv)
    for sp, dist in distributions(venv):
        base = str(sp)
        for entry in read_record(dist) or ():
            key = _hex(entry.sha256) if entry.sha256 else None
            if key is None:
                continue
            path = os.path.normpath(os.path.join(base, entry.path))
            if not path.startswith(root + os.sep):
                continue  # ../../bin/x scripts outside site-packages stay: a venv's own
            yield path, key


def _where(store: Path, key: str) -> str:
    return f"{store}/{key[:2]}/{key}"


def _regular(path: str) -> os.stat_result | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _beside(path: str, suffix: str) -> str:
    """``.NAME<suffix>`` in the folder of ``path``: a temporary name for a swap."""
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}{suffix}"


def _replace_with_link(source: str, path: str) -> bool:
    tmp = _beside(path, ".envforge-link")
    try:
        os.link(source, tmp)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def _sha256(path: str | Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def link_shared(venv: Path, store: Path, read: dict[str, tuple[str, str]] | None = None) -> int:
    """Files of ``venv`` whose copy is in ``store`` become hard links to it; how many.
    A store file whose bytes are not what its name says (written through a link of a venv
    since) leaves the store: the venv keeps its own copy, which :func:`add_to_store` puts
    there once checked. ``read`` (when given) gets, per file linked, its venv-relative
    path -> (``lstat`` key, sha256 hex): bytes just read, for :func:`venvscan.scan`."""
    linked = 0
    if not store.is_dir():
        return linked
    cut = len(os.path.realpath(venv)) + 1
    seen: dict[str, tuple[str, str]] = {}
    try:
        linked = _link_each(venv, store, cut, read, seen)
    finally:
        # each inode linked changed ctime in every venv holding it: the store's memo
        # says what it holds now, so their next scan need not read it again
        note_shared(store_memo(store), seen)
    return linked


def _link_each(
    venv: Path,
    store: Path,
    cut: int,
    read: dict[str, tuple[str, str]] | None,
    seen: dict[str, tuple[str, str]],
) -> int:
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
                os.unlink(kept_path)  # the venvs that hold it find the change themselves
            continue
        if not _replace_with_link(kept_path, path):
            return linked  # no hard links here (another file system): copies stay
        linked += 1
        if (now := _regular(path)) is not None:
            seen[inode_key(now)] = (stat_key(now), key)
            if read is not None:
                read[path[cut:]] = seen[inode_key(now)]
    return linked


def add_to_store(venv: Path, store: Path, copied: list[str] | None = None) -> int:
    """The files of ``venv`` (checked against their RECORD hashes) that the store lacks
    join it, read-only; how many. A file with other links (uv's cache, when uv installed
    by hard links) is copied into the store and the venv linked to the copy: uv's file is
    left as it is. Raises :class:`OSError` when such a file can be neither stored nor
    made the venv's own copy (it would stay uv's cache file). ``copied`` (when given)
    gets each venv file now linked to a store copy whose bytes hashed to its RECORD hash
    while copied."""
    added, linking = 0, True
    made: set[str] = set()  # the store's folders known to exist
    for path, key in _files(venv):
        target = _where(store, key)
        mine = _regular(path)
        if mine is None:
            continue
        kept = _regular(target)
        if kept is not None:
            if mine.st_nlink > 1 and (kept.st_ino, kept.st_dev) != (mine.st_ino, mine.st_dev):
                _own_copy(path, mine)  # uv's file, which link_shared could not replace
            continue
        if not _folder(target, made):
            if mine.st_nlink > 1:
                _own_copy(path, mine)  # never left as uv's cache file
            linking = False
        elif mine.st_nlink > 1:
            stored = _store_copy(path, mine, target, key)
            added += stored
            if stored and copied is not None:
                copied.append(path)
        elif linking:
            linking = _store_link(path, mine, target)  # False: no links here, copies stay
            added += 1 if linking else 0
    return added


def _folder(target: str, made: set[str]) -> bool:
    """Whether the store folder of ``target`` exists (made now when missing)."""
    folder = target.rpartition("/")[0]
    if folder in made:
        return True
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    made.add(folder)
    return True


def _store_link(path: str, mine: os.stat_result, target: str) -> bool:
    """The venv's own file ``path`` becomes the store's ``target``, read-only."""
    try:
        os.chmod(path, stat.S_IMODE(mine.st_mode) & ~WRITE_BITS)
    except OSError:
        return False
    return _replace_with_link(path, target)


def _store_copy(path: str, mine: os.stat_result, target: str, key: str) -> int:
    """Copy ``path`` (a file with other links) into the store as ``target`` when its bytes
    hash to ``key``, and link the venv to the copy: 1. Else the venv gets its own copy: 0."""
    tmp = _beside(target, ".envforge-copy")
    try:
        if _copy_hashing(path, tmp, stat.S_IMODE(mine.st_mode) & ~WRITE_BITS) == key:
            os.replace(tmp, target)
            if _replace_with_link(target, path):
                return 1
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    _own_copy(path, mine)
    return 0


def _copy_hashing(source: str, dest: str, mode: int) -> str:
    """Copy ``source`` to the new file ``dest`` (made with ``mode``); the sha256 of the
    bytes copied."""
    digest = hashlib.sha256()
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            while chunk := os.read(src, 1 << 20):
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
            os.fchmod(out, mode)
        finally:
            os.close(out)
    finally:
        os.close(src)
    return digest.hexdigest()


def _own_copy(path: str, mine: os.stat_result) -> None:
    """Replace ``path`` by a copy of its bytes that no other name links (raises OSError)."""
    tmp = _beside(path, ".envforge-own")
    try:
        _copy_hashing(path, tmp, stat.S_IMODE(mine.st_mode))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def link_mode(venv_parent: Path, store: Path, uv_cache: Path | None) -> str:
    """uv's ``--link-mode`` for installing into a venv under ``venv_parent``: ``hardlink``
    when uv's cache (None: no cache), the venv and the store are on one file system (the
    store then takes its own copies, :func:`add_to_store`), else ``copy``."""
    if uv_cache is None:
        return "copy"
    try:
        devices = {_device(uv_cache), _device(venv_parent), _device(store)}
    except OSError:
        return "copy"
    return "hardlink" if len(devices) == 1 else "copy"


def _device(path: Path) -> int:
    """The device of ``path``, or of its nearest existing parent (a store not made yet)."""
    for candidate in (path, *path.parents):
        with contextlib.suppress(FileNotFoundError):
            return candidate.stat().st_dev
    raise FileNotFoundError(path)


def _stored(store: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of each regular file in the store."""
    try:
        folders = sorted(store.iterdir())
    except OSError:
        return
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
            if stat.S_ISREG(info.st_mode):
                yield entry.path, info


def unused(store: Path) -> list[tuple[Path, int]]:
    """Store files no venv links any more (one link: the store's), with their bytes."""
    return [(Path(p), info.st_blocks * 512) for p, info in _stored(store) if info.st_nlink == 1]


def prune_memo(store: Path) -> None:
    """The store's memo less the inodes no store file has any more (``gc``)."""
    memo = store_memo(store)
    known = read_list(memo)
    if known:
        held = {inode_key(info) for _path, info in _stored(store)}
        write_list(memo, {k: v for k, v in known.items() if k in held})
