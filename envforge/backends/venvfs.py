"""The venv backend's files on disk: what a certificate is bound to, folders built aside.

Content binding
===============
A certificate is only worth something while the venv holds what was probed. Every
installed distribution lists its files in ``*.dist-info/RECORD`` (path, sha256, size).
:func:`content_digests` is the cheap check, run before every use (``build``'s up-to-date
path, ``shell``): per distribution, a sha256 over the ``lstat`` data (size, mtime_ns, inode,
mode) of every file its RECORD lists, plus one entry (``VENV_KEY``) for what no RECORD
lists but changes what runs: ``*.pth`` and ``sitecustomize``/``usercustomize`` in
site-packages, ``pyvenv.cfg``, the ``bin/python*`` links, ``bin/envforge-env.sh``. It reads
no file content: the cpu venv (torch: ~15k files) costs one ``lstat`` per file (figures
in ``bench/results-venv.md``). Editing, replacing or deleting a file changes its digest;
a rename of the whole venv (the swap below) does not.

:func:`verify_records` is the full check (sha256 of each file against its RECORD hash),
run only when the cheap one differs: it tells "touched but intact" (re-probe) from
"modified" (reinstall). :func:`describe_changes` names what changed on one line, cheaply
(missing files, sizes that differ from RECORD, files newer than their RECORD).

Folders built aside
===================
A rebuild happens in ``.<name>.tmp-<owner>-XXXX`` beside the venv and is swapped in only
after its probe passed (:func:`swap_dirs`: one ``renameat2(RENAME_EXCHANGE)`` where the
kernel and file system have it, so the venv's path never stops existing; else two
renames). ``<owner>`` is ``<pid>.<start time in clock ticks>`` of the envforge that made
it, so :func:`sweep_leftovers` can remove what an envforge killed by SIGKILL/SIGTERM left
(its owner is gone) and never what a running build is using.
"""

from __future__ import annotations

import base64
import csv
import ctypes
import ctypes.util
import errno
import hashlib
import io
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: The key of :func:`content_digests` for the files no RECORD lists.
VENV_KEY = "(venv)"
#: Largest RECORD read (torch's is ~1.5 MB).
RECORD_MAX = 64 << 20
#: Leftovers whose name names no owner (older envforge) are swept after this many seconds.
UNOWNED_MAX_AGE = 24 * 3600.0
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<rest>.+)$")
_OWNER = re.compile(r"^(?P<pid>\d+)\.(?P<start>\d+)-")


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
            digest = row[1][len("sha256="):]
        size = None
        if len(row) > 2 and row[2].isascii() and row[2].isdigit():
            size = int(row[2])
        entries.append(RecordEntry(row[0], digest, size))
    return entries


def _read_record(dist: Path) -> list[RecordEntry] | None:
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


def _stat_line(rel: str, path: str | Path) -> str:
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{rel}\0missing:{exc.errno}\n"
    return f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_mode}\n"


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


def _dist_digest(sp: Path, dist: Path) -> str:
    base = os.fspath(sp) + os.sep
    lines = [_stat_line("RECORD", dist / "RECORD")]
    lines += [_stat_line(rel, base + rel) for rel in record_paths(dist)]
    return hashlib.sha256("".join(lines).encode(errors="surrogateescape")).hexdigest()


def _venv_files(venv: Path) -> Iterable[tuple[str, Path]]:
    """What no RECORD lists but changes what runs in the venv."""
    yield "pyvenv.cfg", venv / "pyvenv.cfg"
    yield "bin/envforge-env.sh", venv / "bin" / "envforge-env.sh"
    for sp in site_packages(venv):
        rel = sp.relative_to(venv).as_posix()
        try:
            names = sorted(os.listdir(sp))
        except OSError:
            continue
        for name in names:
            if name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py"):
                yield f"{rel}/{name}", sp / name


def _venv_digest(venv: Path) -> str:
    digest = hashlib.sha256()
    for rel, path in _venv_files(venv):
        digest.update(_stat_line(rel, path).encode(errors="surrogateescape"))
    try:
        links = sorted(p for p in os.listdir(venv / "bin") if p.startswith("python"))
    except OSError:
        links = []
    for name in links:
        try:
            where = os.readlink(venv / "bin" / name)
        except OSError:
            where = "-"
        digest.update(f"bin/{name}\0{where}\n".encode(errors="surrogateescape"))
    return digest.hexdigest()


def content_digests(venv: Path) -> dict[str, str]:
    """The cheap content check: ``{dist-info name: digest of its files' lstat data}`` plus
    ``{VENV_KEY: …}``. Equal dicts mean no file was touched (see the module docstring)."""
    found = {dist.name: _dist_digest(sp, dist) for sp, dist in distributions(venv)}
    found[VENV_KEY] = _venv_digest(venv)
    return found


def dist_label(name: str) -> str:
    """``torch-2.13.0+cpu.dist-info`` -> ``torch 2.13.0+cpu``."""
    stem = name[: -len(".dist-info")] if name.endswith(".dist-info") else name
    dist, _, version = stem.partition("-")
    return f"{dist} {version}".strip()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def verify_records(venv: Path, only: Iterable[str] | None = None) -> list[str]:
    """The full check: every file a RECORD lists with a hash, against that hash.

    Returns one ``"<dist>: <path> <what>"`` per problem (missing, modified); empty when
    everything matches. ``only``: dist-info names to check (default: all).
    """
    wanted = set(only) if only is not None else None
    problems: list[str] = []
    for sp, dist in distributions(venv):
        if wanted is not None and dist.name not in wanted:
            continue
        entries = _read_record(dist)
        if entries is None:
            problems.append(f"{dist_label(dist.name)}: RECORD unreadable")
            continue
        for entry in entries:
            if entry.sha256 is None:
                continue
            try:
                actual = _file_sha256(sp / entry.path)
            except OSError:
                problems.append(f"{dist_label(dist.name)}: {entry.path} missing")
                continue
            if actual != entry.sha256:
                problems.append(f"{dist_label(dist.name)}: {entry.path} modified")
    return problems


def _suspects(sp: Path, dist: Path) -> list[str]:
    """Files of one distribution that are missing, of another size than RECORD says, or
    newer than the RECORD (edited after the install): stat only."""
    entries = _read_record(dist)
    if entries is None:
        return ["RECORD unreadable"]
    try:
        installed = os.lstat(dist / "RECORD").st_mtime_ns
    except OSError:
        return ["RECORD missing"]
    found: list[str] = []
    for entry in entries:
        try:
            st = os.lstat(sp / entry.path)
        except OSError:
            found.append(f"{entry.path} missing")
            continue
        if entry.size is not None and st.st_size != entry.size:
            found.append(f"{entry.path} modified (size {st.st_size}, installed {entry.size})")
        elif st.st_mtime_ns > installed:
            found.append(f"{entry.path} modified after the install")
    return found


def describe_changes(venv: Path, recorded: Mapping[str, object]) -> str | None:
    """What differs between the venv now and ``recorded`` (:func:`content_digests`), on one
    line; None when nothing does."""
    now = content_digests(venv)
    if dict(recorded) == now:
        return None
    parts: list[str] = []
    gone = sorted(k for k in recorded if k not in now)
    added = sorted(k for k in now if k not in recorded)
    changed = sorted(k for k in now if k in recorded and recorded[k] != now[k])
    if gone:
        parts.append("removed: " + ", ".join(dist_label(k) for k in gone))
    if added:
        parts.append("added: " + ", ".join(dist_label(k) for k in added))
    by_name = {dist.name: (sp, dist) for sp, dist in distributions(venv)}
    for key in changed:
        if key == VENV_KEY:
            parts.append("venv files (pyvenv.cfg, bin/python, *.pth, envforge-env.sh) changed")
            continue
        sp, dist = by_name[key]
        suspects = _suspects(sp, dist)
        more = f" (+{len(suspects) - 3} more)" if len(suspects) > 3 else ""
        shown = "; ".join(suspects[:3]) + more
        parts.append(f"{dist_label(key)}: " + (shown or "files touched"))
    return "; ".join(parts)


# --------------------------------------------------------------------------- owners


def start_time(pid: int) -> int:
    """The process's start time in clock ticks after boot (0 where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError:
        return 0
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


def owner_tag(pid: int | None = None) -> str:
    """``<pid>.<start time>`` naming this process (or ``pid``) uniquely while it runs."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{start_time(pid)}"


def owner_alive(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` (0: unknown) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    if start == 0:
        return True
    now = start_time(pid)
    return now in (0, start)


def is_stale(
    name: str, age: float, alive: Callable[[int, int], bool] = owner_alive
) -> bool:
    """Whether a folder called ``name`` (``.<venv>.tmp-…`` / ``.<venv>.old-…``) is a
    leftover of an envforge that is gone; one whose name names no owner (older envforge)
    is stale after :data:`UNOWNED_MAX_AGE`."""
    found = _LEFTOVER.match(name)
    if found is None:
        return False
    owner = _OWNER.match(found.group("rest"))
    if owner is None:
        return age > UNOWNED_MAX_AGE
    return not alive(int(owner.group("pid")), int(owner.group("start")))


def sweep_leftovers(parent: Path) -> list[Path]:
    """Remove the ``.<venv>.tmp-*`` / ``.<venv>.old-*`` folders in ``parent`` whose envforge
    is gone; the folders removed. Best effort: what cannot be removed stays."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith("."):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        if is_stale(entry.name, now - info.st_mtime):
            path = Path(entry.path)
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(path)
    return removed


def aside_prefix(target: Path, kind: str = "tmp") -> str:
    """The name prefix of a folder built aside of ``target``: ``.<name>.tmp-<owner>-``."""
    return f".{target.name}.{kind}-{owner_tag()}-"


# --------------------------------------------------------------------------- swap

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2() -> Callable[..., int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where
    the kernel, C library or file system cannot (nothing was changed then)."""
    func = _renameat2()
    if func is None:
        return False
    rc = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_dirs(new: Path, target: Path) -> Path | None:
    """Put ``new`` at ``target``. Returns where the previous ``target`` now is (to be
    removed by the caller), or None when there was none.

    With an existing ``target`` the two are exchanged atomically where possible (the old
    one ends at ``new``'s name); else ``target`` is renamed aside (``.<name>.old-<owner>-…``)
    first and put back if the second rename fails.
    """
    if not os.path.lexists(target):
        os.rename(new, target)
        return None
    if not os.path.isdir(target):
        # a device, FIFO or file: never swapped away (the caller removes what it gets back)
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target))
    if exchange(new, target):
        return new
    old = target.with_name(f"{aside_prefix(target, 'old')}{os.urandom(4).hex()}")
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    return old
