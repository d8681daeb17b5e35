"""What a venv's certificate is bound to: every file in it, by content.

Content binding
===============
A certificate is only worth something while the venv holds what was probed, and
nothing else. :func:`scan` walks the whole venv (its ``.envforge`` markers left out) and
gives every file a value: the sha256 of its content (a symlink: its target; a FIFO,
socket or device: its kind, never opened). Each file belongs to

* the distribution whose ``*.dist-info/RECORD`` lists it;
* the distribution that owns its source when it is bytecode
  (``pkg/__pycache__/mod.cpython-311.pyc`` of ``pkg/mod.py``): the certification probe
  of a venv built aside writes the bytecode of what it imports, and the file list is
  taken after it, so that bytecode is certified with its source;
* :data:`VENV_KEY` otherwise: what no RECORD lists (``pyvenv.cfg``, ``bin/activate``,
  the interpreter links, ``bin/envforge-env.sh``) and anything that appeared after the
  install (a ``six/`` package folder beside ``six.py``, a ``*.pth`` file, an ``.so``, a
  ``.pyc`` whose source no RECORD lists).

:func:`content_digests` is per distribution (and :data:`VENV_KEY`) a sha256 over its
files' paths (relative to the venv: a rename of the venv changes nothing) and values.
Equal digests mean the same bytes in the same places, nothing more and nothing less.

Hashing ~700 MB (torch) before every ``shell`` would take seconds, so the scan keeps a
memo (``.envforge/files.memo``): per file, its ``lstat`` data (size, mtime, ctime, inode,
mode) and the sha256 it had then. A file whose ``lstat`` data are all as memoized is not
read again; any other is hashed again. ``st_ctime`` is set by the kernel on every write,
``utime``, ``chmod``, rename onto it or link-count change and cannot be set from user
space, so an edit that keeps the size and puts the mtime back (``os.utime``) still moves
it: the file is hashed and the edit found. (Changing the clock as root is not cheap.)
The memo is a cache of facts about the files, not what was certified: a wrong memo can
only make a file look like its real content. The certified list itself
(``.envforge/files.certified``) is written with the certificate and is read only to
name what changed (:func:`describe_changes`).

Files shared by hard links (the store of :mod:`envforge.backends.venv.share`) change
ctime whenever another venv links or unlinks them, so every other venv's memo would miss
them after each build. The store keeps a memo of its own (``store/files.memo``), by inode
(``dev:ino``) with the same ``lstat`` key and sha256: written by the build that links an
inode (its bytes read a moment before) and by any scan that read a shared file. A scan
whose own memo misses a file with other links takes the value from it when the whole
``lstat`` key matches: the same rule, so a write through any link is still found.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import os
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

#: The key of :func:`content_digests` for the files no RECORD lists.
VENV_KEY = "(venv)"
#: Largest RECORD read (torch's is ~1.5 MB).
RECORD_MAX = 64 << 20
#: Largest memo or certified list read (torch: ~2 MB).
LIST_MAX = 256 << 20
#: The folder of a venv holding envforge's markers (not part of the content).
MARKERS = ".envforge"
MEMO = "files.memo"
CERTIFIED_LIST = "files.certified"
#: What :func:`scan` records for a RECORD entry that is not there.
MISSING = "missing"


# --------------------------------------------------------------------------- RECORD


@dataclass(frozen=True)
class RecordEntry:
    """One line of a RECORD: a path relative to site-packages, its hash and size."""

    path: str
    sha256: str | None  # urlsafe base64 without padding, as in RECORD
    size: int | None


def parse_record(text: str) -> list[RecordEntry]:
    """The rows of a RECORD file (CSV: path, ``sha256=…``, size); malformed rows are kept
    with what could be read."""
    entries: list[RecordEntry] = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0]:
            continue
        digest = None
        if len(row) > 1 and row[1].startswith("sha256="):
            digest = row[1][len("sha256=") :]
        size = None
        if len(row) > 2 and row[2].isascii() and row[2].isdigit():
            size = int(row[2])
        entries.append(RecordEntry(row[0], digest, size))
    return entries


def read_record(dist: Path) -> list[RecordEntry] | None:
    try:
        with open(dist / "RECORD", "rb") as fh:
            data = fh.read(RECORD_MAX + 1)
    except OSError:
        return None
    if len(data) > RECORD_MAX:
        return None
    return parse_record(data.decode("utf-8", errors="replace"))


def site_packages(venv: Path) -> list[Path]:
    return sorted((venv / "lib").glob("python*/site-packages"))


def distributions(venv: Path) -> list[tuple[Path, Path]]:
    """(site-packages, dist-info folder) of every installed distribution, sorted."""
    return [(sp, dist) for sp in site_packages(venv) for dist in sorted(sp.glob("*.dist-info"))]


def record_paths(dist: Path) -> list[str]:
    """The paths a RECORD lists, fast: a line without quotes is split at its first comma
    (CSV quotes any path holding one); quoted lines go through :mod:`csv`."""
    try:
        with open(dist / "RECORD", "rb") as fh:
            data = fh.read(RECORD_MAX + 1)
    except OSError:
        return []
    if len(data) > RECORD_MAX:
        return []
    paths: list[str] = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if '"' in line:
            paths.extend(e.path for e in parse_record(line))
        elif line:
            first = line.split(",", 1)[0]
            if first:
                paths.append(first)
    return paths


def dist_label(name: str) -> str:
    """``torch-2.13.0+cpu.dist-info`` -> ``torch 2.13.0+cpu``."""
    stem = name[: -len(".dist-info")] if name.endswith(".dist-info") else name
    dist, _, version = stem.partition("-")
    return f"{dist} {version}".strip()


# --------------------------------------------------------------------------- scan


@dataclass(frozen=True)
class Scan:
    """Every file of a venv: its value (sha256 hex, ``link:…``, ``special:…`` or
    :data:`MISSING`) and its owner (a dist-info name or :data:`VENV_KEY`)."""

    files: Mapping[str, str]
    owners: Mapping[str, str]
    #: dist-info names (every installed one, even one whose files are all gone)
    dists: tuple[str, ...] = ()
    #: files read this time (their memo entry missed)
    hashed: int = 0
    memo: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: memo entries missed but found in the store's memo (not read)
    reused: int = 0
    #: shared files (other links) read this time: ``dev:ino`` -> (stat key, sha256)
    shared: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def digests(self) -> dict[str, str]:
        """``{dist-info name: digest, VENV_KEY: digest}`` (see the module docstring)."""
        parts: dict[str, list[str]] = {d: [] for d in self.dists}
        parts.setdefault(VENV_KEY, [])
        for rel in sorted(self.files):
            parts.setdefault(self.owners[rel], []).append(f"{rel}\0{self.files[rel]}\n")
        return {
            key: hashlib.sha256("".join(lines).encode(errors="surrogateescape")).hexdigest()
            for key, lines in parts.items()
        }


def _listed(venv: Path) -> tuple[dict[str, str], tuple[str, ...], dict[str, str]]:
    """venv-relative path -> dist-info name, for every file the RECORDs list; the
    dist-info names; dist-info folder (venv-relative) -> its name."""
    owners: dict[str, str] = {}
    dists: list[str] = []
    folders: dict[str, str] = {}
    for sp, dist in distributions(venv):
        name = dist.name
        dists.append(name)
        base = sp.relative_to(venv).as_posix() + "/"
        folders[base + name] = name
        for rel in record_paths(dist):
            if "." in rel and ("./" in rel or "\\" in rel or rel.startswith(".")):
                path = os.path.normpath(base + rel.replace("\\", "/"))
                if path.startswith("../"):
                    continue
            else:
                path = base + rel
            owners.setdefault(path, name)
    return owners, tuple(dists), folders


def _metadata_owner(rel: str, folders: Mapping[str, str]) -> str | None:
    """The distribution whose ``*.dist-info`` folder holds ``rel`` (its metadata, listed
    in its RECORD or not: ``INSTALLER``, ``direct_url.json``)."""
    parts = rel.split("/", 4)
    return folders.get("/".join(parts[:4])) if len(parts) > 4 else None


def _walk(venv: Path) -> Iterator[tuple[str, os.stat_result, str]]:
    """(venv-relative path, lstat, full path) of every entry but folders, markers left out."""
    folders = [""]
    while folders:
        rel = folders.pop()
        try:
            with os.scandir(os.path.join(venv, rel) if rel else venv) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if path == MARKERS:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                folders.append(path)
            else:
                yield path, info, entry.path


def stat_key(info: os.stat_result) -> str:
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}:{info.st_mode}"


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _hash(full: str) -> str:
    try:
        return file_sha256(full)
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def _value(full: str, info: os.stat_result) -> str:
    """A symlink's or special file's value (never opened)."""
    if stat.S_ISLNK(info.st_mode):
        try:
            return "link:" + os.readlink(full)
        except OSError:
            return "link:?"
    return f"special:{stat.S_IFMT(info.st_mode):o}"


def _bytecode_owner(rel: str, owners: Mapping[str, str]) -> str | None:
    """The owner of the source of ``pkg/__pycache__/mod.TAG[.opt-N].pyc`` (``pkg/mod.py``)."""
    if not rel.endswith(".pyc"):
        return None
    head, sep, name = rel.rpartition("/__pycache__/")
    if not sep or "/" in name:
        return None
    return owners.get(f"{head}/{name.split('.', 1)[0]}.py")


def read_list(path: Path) -> dict[str, tuple[str, str]] | None:
    """A memo or certified list: ``path -> (stat key, value)``; None when unreadable."""
    try:
        with open(path, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            data = fh.read(LIST_MAX + 1)
    except OSError:
        return None
    if len(data) > LIST_MAX:
        return None
    items = data.decode("utf-8", errors="surrogateescape").split("\0")
    if len(items) % 3 != 1:
        return None
    it = iter(items[:-1])
    return {rel: (key, value) for key, value, rel in zip(it, it, it, strict=True)}


def list_text(entries: Mapping[str, tuple[str, str]]) -> bytes:
    """The bytes of a memo or certified list (``key\\0value\\0path\\0`` per file)."""
    text = "".join(f"{key}\0{value}\0{rel}\0" for rel, (key, value) in sorted(entries.items()))
    return text.encode("utf-8", errors="surrogateescape")


def inode_key(info: os.stat_result) -> str:
    """A file's key in the store's memo: ``dev:ino``."""
    return f"{info.st_dev}:{info.st_ino}"


class _SharedMemo:
    """The store's memo as :func:`scan` uses it: read at the first miss of a file with
    other links (most scans never read it), and what this scan read of such files."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.known: dict[str, tuple[str, str]] | None = None
        self.read: dict[str, tuple[str, str]] = {}
        self.reused = 0
        self.hashed = 0

    def value(self, info: os.stat_result, key: str, full: str) -> str:
        """The sha256 of the file (its ``lstat`` key ``key``): the store memo's when it
        has that key for the inode, else read."""
        if self.path is None or info.st_nlink < 2:  # no other links
            self.hashed += 1
            return _hash(full)
        if self.known is None:
            self.known = read_list(self.path) or {}
        seen = self.known.get(inode_key(info))
        if seen is not None and seen[0] == key:
            self.reused += 1
            return seen[1]
        value = _hash(full)
        self.hashed += 1
        if not value.startswith("unreadable:"):
            self.read[inode_key(info)] = (key, value)
        return value


def scan(
    venv: Path,
    *,
    use_memo: bool = True,
    just_read: Mapping[str, tuple[str, str]] | None = None,
    shared: Path | None = None,
) -> Scan:
    """Every file of ``venv`` with its value and owner; files whose ``lstat`` data are
    those of the memo are not read (``use_memo`` False: every file is read but those of
    ``just_read``, ``path -> (stat key, value)`` of files this process read a moment ago,
    such as :func:`envforge.backends.venv.share.link_shared` when it checks a store file's
    bytes before linking the venv to it: the same bytes are not read twice). ``shared``:
    the store's memo, for files with other links that the venv's memo misses."""
    memo = (read_list(venv / MARKERS / MEMO) or {}) if use_memo else {}
    if just_read:
        memo = {**memo, **just_read}
    owners, dists, folders = _listed(venv)
    files: dict[str, str] = {}
    found_owner: dict[str, str] = {}
    fresh: dict[str, tuple[str, str]] = {}
    store = _SharedMemo(shared)  # reads (and counts) what the venv's memo misses
    for rel, info, full in _walk(venv):
        if stat.S_ISREG(info.st_mode):
            key = stat_key(info)
            known = memo.get(rel)
            if known is not None and known[0] == key:
                value = known[1]
            else:
                value = store.value(info, key, full)
            fresh[rel] = (key, value)
        else:
            value = _value(full, info)
        files[rel] = value
        found_owner[rel] = (
            owners.get(rel)
            or _bytecode_owner(rel, owners)
            or _metadata_owner(rel, folders)
            or VENV_KEY
        )
    for rel, dist in owners.items():
        if rel not in files:
            files[rel], found_owner[rel] = MISSING, dist
    return Scan(files, found_owner, dists, store.hashed, fresh, store.reused, store.read)


def restat(venv: Path, found: Scan, copied: Collection[str] = ()) -> Scan:
    """``found`` with its memo's ``lstat`` data read again (never the bytes), for a build's
    own folder aside after it moved the files into the store: a hard link and a mode
    change alter a file's ctime, not its bytes. An entry whose size, mtime or inode
    changed is dropped (read again next time), but for a file of ``copied``: replaced by a
    copy whose bytes were hashed while copied (the same value). Only for a folder that
    nothing else writes between :func:`scan` and this call."""
    prefix = os.path.join(venv, "")
    known = {
        path[len(prefix) :] if path.startswith(prefix) else os.path.relpath(path, venv)
        for path in copied
    }
    return replace(found, memo=_restated(venv, found.memo, known))


def _restated(
    venv: Path, memo: Mapping[str, tuple[str, str]], known: Collection[str]
) -> dict[str, tuple[str, str]]:
    kept_memo: dict[str, tuple[str, str]] = {}
    for rel, (key, value) in memo.items():
        try:
            info = os.lstat(os.path.join(venv, rel))
        except OSError:
            continue
        size, mtime, _ctime, ino, _mode = key.split(":")
        same = (str(info.st_size), str(info.st_mtime_ns), str(info.st_ino)) == (size, mtime, ino)
        kept = same or (rel in known and str(info.st_size) == size)
        if kept and stat.S_ISREG(info.st_mode):
            kept_memo[rel] = (stat_key(info), value)
    return kept_memo


def refresh_memo(venv: Path) -> None:
    """The memo of ``venv`` with its ``lstat`` data read again (as :func:`restat`), for a
    build that just swapped in the folder it scanned and removed the venv it replaced:
    the files they shared changed link count, so ctime, not bytes. Only right a moment
    after the scan that wrote the memo, in a folder nothing else wrote since."""
    memo = read_list(venv / MARKERS / MEMO)
    if memo:
        _write_memo(venv, _restated(venv, memo, ()))


def save_memo(venv: Path, found: Scan) -> None:
    """Write the memo of ``found`` (best effort: a read-only venv is hashed again next
    time; a venv without markers gets none)."""
    if found.hashed or found.reused:
        _write_memo(venv, found.memo)


#: Entries the store's memo keeps at most (~90 bytes each; torch's stack: ~16,000).
SHARED_MAX = 400_000


def note_shared(path: Path, read: Mapping[str, tuple[str, str]]) -> None:
    """Add ``read`` (``dev:ino`` -> (stat key, sha256) of shared files just read) to the
    store's memo at ``path`` (best effort, written whole: a concurrent writer's entries
    may be lost, and are read again later). Over :data:`SHARED_MAX`, it starts afresh
    (``envforge gc`` drops the inodes the store no longer has)."""
    if not read or not path.parent.is_dir():
        return
    merged = {**(read_list(path) or {}), **read}
    write_list(path, merged if len(merged) <= SHARED_MAX else read)


def write_list(path: Path, entries: Mapping[str, tuple[str, str]]) -> None:
    """Write a memo (:func:`list_text`) atomically, best effort."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(list_text(entries))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _write_memo(venv: Path, memo: Mapping[str, tuple[str, str]]) -> None:
    markers = venv / MARKERS
    if markers.is_dir():
        write_list(markers / MEMO, memo)


def content_digests(
    venv: Path, *, use_memo: bool = True, shared: Path | None = None
) -> dict[str, str]:
    """The content check: ``{dist-info name: digest, VENV_KEY: digest}`` of
    :func:`scan`; equal dicts mean the same files with the same bytes. The memo (and the
    store's memo ``shared``, where given) is brought up to date."""
    found = scan(venv, use_memo=use_memo, shared=shared)
    save_memo(venv, found)
    if shared is not None:
        note_shared(shared, found.shared)
    return found.digests()


def certified_list(venv: Path, found: Scan | None = None) -> bytes:
    """The bytes of ``.envforge/files.certified``: every file and its value now (written
    with a certificate; read to name what changed since). ``found``: the caller's scan of
    the venv as it is now (None: scanned here)."""
    if found is None:
        found = scan(venv)
        save_memo(venv, found)
    return list_text({rel: ("-", value) for rel, value in found.files.items()})


def _file_changes(
    found: Scan, certified: Mapping[str, tuple[str, str]], skip: set[str]
) -> list[str]:
    """What differs file by file (owners in ``skip``, added distributions, left out)."""
    changes: list[str] = []
    for rel in sorted(found.files):
        value = found.files[rel]
        if found.owners[rel] in skip:
            continue
        was = certified.get(rel)
        if was is None:
            changes.append(f"{rel} not certified (appeared since)")
        elif value == MISSING and was[1] != MISSING:
            changes.append(f"{rel} missing")
        elif value != was[1]:
            changes.append(f"{rel} modified")
    changes += [
        f"{rel} missing"
        for rel in sorted(certified)
        if rel not in found.files and certified[rel][1] != MISSING
    ]
    return changes


def _shown(items: list[str], limit: int = 3) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def describe_changes(venv: Path, recorded: Mapping[str, object]) -> str | None:
    """What differs between the venv now and ``recorded`` (:func:`content_digests`), on
    one line, naming the files; None when nothing does."""
    found = scan(venv)
    now = found.digests()
    if dict(recorded) == now:
        return None
    parts: list[str] = []
    gone = sorted(k for k in recorded if k not in now)
    added = sorted(k for k in now if k not in recorded)
    if gone:
        parts.append("removed: " + ", ".join(dist_label(k) for k in gone))
    if added:
        parts.append("added: " + ", ".join(dist_label(k) for k in added))
    changed = sorted(k for k in now if k in recorded and recorded[k] != now[k])
    certified = read_list(venv / MARKERS / CERTIFIED_LIST)
    if certified is not None and changed:
        files = _file_changes(found, certified, set(added))
        parts.append(_shown(files) if files else "files changed")
    elif changed:
        parts += [_record_changes(venv, found, k) for k in changed]
    return "; ".join(parts)


def record_form(hex_digest: str) -> str:
    """A sha256 in hex as RECORD writes it (urlsafe base64 without padding)."""
    try:
        raw = bytes.fromhex(hex_digest)
    except ValueError:
        return hex_digest  # "missing", "link:…": never equal to a RECORD hash
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _record_changes(venv: Path, found: Scan, key: str) -> str:
    """What differs in one distribution from its RECORD (no certified list to compare
    with: a venv certified before the list was written)."""
    if key == VENV_KEY:
        return "files no RECORD lists changed"
    sp = next((sp for sp, dist in distributions(venv) if dist.name == key), None)
    entries = read_record(sp / key) if sp is not None else None
    if sp is None or entries is None:
        return f"{dist_label(key)}: RECORD unreadable"
    base = sp.relative_to(venv).as_posix() + "/"
    problems: list[str] = []
    for entry in entries:
        value = found.files.get(os.path.normpath(base + entry.path), MISSING)
        if value == MISSING:
            problems.append(f"{entry.path} missing")
        elif entry.sha256 is not None and record_form(value) != entry.sha256:
            problems.append(f"{entry.path} modified")
    return f"{dist_label(key)}: " + (_shown(problems) if problems else "bytecode changed")
