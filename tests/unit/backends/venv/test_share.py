"""The store of shared files: venvs that install the same bytes hold one copy."""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import stat
from pathlib import Path

import pytest

from envforge.backends import venvscan
from envforge.backends.venv import share
from envforge.backends.venvfs import verify_records


def record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_venv(root: Path, files: dict[str, bytes]) -> Path:
    """A venv with one distribution 'pkg' whose RECORD lists ``files`` with their hashes."""
    sp = root / "lib" / "python3.11" / "site-packages"
    dist = sp / "pkg-1.0.dist-info"
    dist.mkdir(parents=True)
    lines = []
    for rel, data in files.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_bytes(data)
        lines.append(f"{rel},sha256={record_hash(data)},{len(data)}")
    lines.append("pkg-1.0.dist-info/RECORD,,")
    (dist / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


FILES = {"pkg/big.so": os.urandom(300_000), "pkg/__init__.py": b"x = 1\n"}


def test_a_second_venv_links_the_first_ones_files_and_they_are_read_only(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    assert share.link_shared(a, store) == 0  # an empty store
    assert share.add_to_store(a, store) == 2
    b = make_venv(tmp_path / "b", FILES)
    assert share.link_shared(b, store) == 2
    sp = "lib/python3.11/site-packages/pkg/big.so"
    assert (a / sp).stat().st_ino == (b / sp).stat().st_ino
    assert (a / sp).stat().st_nlink == 3  # a, b and the store
    assert not (a / sp).stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert verify_records(b) == []
    assert share.add_to_store(b, store) == 0  # nothing new
    assert share.unused(store) == []


def test_link_shared_reports_the_bytes_it_read_for_the_scan(tmp_path: Path) -> None:
    """Each file linked to the store comes back as read: its venv-relative path, its
    lstat data after the link and the sha256 its bytes were checked to have."""
    store = tmp_path / "store"
    share.add_to_store(make_venv(tmp_path / "a", FILES), store)
    b = make_venv(tmp_path / "b", FILES)
    read: dict[str, tuple[str, str]] = {}
    assert share.link_shared(b, store, read) == 2
    sp = "lib/python3.11/site-packages"
    assert sorted(read) == [f"{sp}/pkg/__init__.py", f"{sp}/pkg/big.so"]
    for rel, (key, value) in read.items():
        assert value == hashlib.sha256((b / rel).read_bytes()).hexdigest()
        assert key == venvscan.stat_key(os.lstat(b / rel))


def test_files_no_venv_links_are_unused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    share.add_to_store(a, store)
    for path in a.rglob("*"):
        if path.is_file():
            path.unlink()
    assert sorted(p.name for p, _n in share.unused(store)) == sorted(
        hashlib.sha256(d).hexdigest() for d in FILES.values()
    )


def test_a_record_path_outside_the_venv_is_never_shared(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    record = next(a.rglob("RECORD"))
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not ours")
    with record.open("a", encoding="utf-8") as fh:
        fh.write(f"../../../../outside.txt,sha256={record_hash(b'not ours')},8\n")
    share.add_to_store(a, store)
    assert outside.stat().st_nlink == 1
    assert outside.stat().st_mode & stat.S_IWUSR


def test_a_store_file_changed_through_a_link_leaves_the_store_and_is_replaced(
    tmp_path: Path,
) -> None:
    """An in-place write through one venv's link (root ignores the read-only bits) changes
    the store's copy: the next venv keeps its own good copy, which replaces it."""
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    share.add_to_store(a, store)
    key = hashlib.sha256(FILES["pkg/big.so"]).hexdigest()
    kept = store / key[:2] / key
    os.chmod(kept, 0o644)
    kept.write_bytes(os.urandom(300_000))  # same size, other bytes
    b = make_venv(tmp_path / "b", FILES)
    assert share.link_shared(b, store) == 1  # __init__.py only
    assert not kept.exists()
    assert verify_records(b) == []
    assert share.add_to_store(b, store) == 1
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == key


# ------------------------------------------------------------------ uv installing by links

SP = "lib/python3.11/site-packages"


def as_uv_would(venv: Path, cache: Path) -> dict[str, Path]:
    """Give each of ``venv``'s package files a second name in ``cache``, as uv's
    ``--link-mode hardlink`` leaves them: the venv's file *is* uv's cache file."""
    cache.mkdir(parents=True, exist_ok=True)
    names = {}
    for rel in FILES:
        names[rel] = cache / rel.replace("/", "_")
        os.link(venv / SP / rel, names[rel])
    return names


def test_a_file_uv_linked_is_copied_into_the_store_and_uvs_cache_is_left_alone(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    cached = as_uv_would(a, tmp_path / "uv-cache")
    modes = {rel: path.stat().st_mode for rel, path in cached.items()}
    assert share.link_shared(a, store) == 0
    assert share.add_to_store(a, store) == 2
    for rel, path in cached.items():
        mine, theirs = (a / SP / rel).stat(), path.stat()
        key = hashlib.sha256(FILES[rel]).hexdigest()
        assert mine.st_ino == (store / key[:2] / key).stat().st_ino
        assert mine.st_ino != theirs.st_ino  # the venv's file is the store's, not uv's
        assert (theirs.st_nlink, theirs.st_mode) == (1, modes[rel])  # uv's file untouched
        assert not mine.st_mode & share.WRITE_BITS
    assert verify_records(a) == []


def test_a_second_venv_uv_linked_ends_on_the_stores_files(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    share.add_to_store(a, store)
    b = make_venv(tmp_path / "b", FILES)
    cached = as_uv_would(b, tmp_path / "uv-cache")
    assert share.link_shared(b, store) == 2
    assert share.add_to_store(b, store) == 0
    for rel, path in cached.items():
        assert (b / SP / rel).stat().st_ino == (a / SP / rel).stat().st_ino
        assert path.stat().st_nlink == 1


def test_a_uv_linked_file_that_is_not_its_record_hash_is_never_stored(tmp_path: Path) -> None:
    """Bytes that are not what RECORD says (an edited cache) get the venv its own copy:
    the store never holds a file under a name its bytes do not hash to."""
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    cached = as_uv_would(a, tmp_path / "uv-cache")
    cached["pkg/__init__.py"].write_bytes(b"x = 2\n")  # through uv's name: same inode
    assert share.add_to_store(a, store) == 1
    mine = (a / SP / "pkg/__init__.py").stat()
    assert mine.st_nlink == 1
    assert mine.st_ino != cached["pkg/__init__.py"].stat().st_ino
    bad = hashlib.sha256(b"x = 2\n").hexdigest()
    good = hashlib.sha256(FILES["pkg/__init__.py"]).hexdigest()
    assert not (store / bad[:2] / bad).exists()
    assert not (store / good[:2] / good).exists()


def test_a_uv_linked_file_that_cannot_be_made_the_venvs_own_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    as_uv_would(a, tmp_path / "uv-cache")

    def full(source: str, dest: str, mode: int) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(share, "_copy_hashing", full)
    with pytest.raises(OSError, match="No space"):
        share.add_to_store(a, store)
    assert not list(store.rglob("*.envforge-*"))
    assert not list((a / SP).rglob("*.envforge-*"))


def test_uv_links_only_where_its_cache_the_venv_and_the_store_share_a_file_system(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    store = home / "store" / "sha256"  # not made yet: its nearest parent counts
    home.mkdir()
    assert share.link_mode(home, store, tmp_path / "uv-cache-not-made") == "hardlink"
    assert share.link_mode(home, store, None) == "copy"
    other = Path("/dev/shm")
    if other.is_dir() and other.stat().st_dev != tmp_path.stat().st_dev:
        assert share.link_mode(home, store, other) == "copy"
        assert share.link_mode(other, store, home) == "copy"


def test_the_store_names_the_files_it_replaced_by_checked_copies(tmp_path: Path) -> None:
    """uv's hard-linked files are copied into the store, each hashed while copied: the
    build keeps their scanned values (no second read), and only theirs."""
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    as_uv_would(a, tmp_path / "uv-cache")
    own = a / "lib/python3.11/site-packages/pkg-1.0.dist-info/RECORD"
    copied: list[str] = []
    assert share.add_to_store(a, store, copied) == 2
    sp = a / "lib/python3.11/site-packages"
    assert sorted(copied) == sorted([str(sp / "pkg/big.so"), str(sp / "pkg/__init__.py")])
    assert str(own) not in copied


def _memoized(venv: Path) -> dict[str, str]:
    """``venv``'s content digests, with its memo written (every file read)."""
    (venv / venvscan.MARKERS).mkdir(exist_ok=True)
    found = venvscan.scan(venv, use_memo=False)
    venvscan.save_memo(venv, found)
    return found.digests()


def test_a_build_linking_shared_files_leaves_other_venvs_nothing_to_read(
    tmp_path: Path,
) -> None:
    """Linking a second venv to the store changes the ctime of every venv's shared
    files. The first venv's memo misses them; the store's memo, written by the linking
    build, has their new lstat data: nothing is read again, the digests stay."""
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    share.add_to_store(a, store)
    before = _memoized(a)
    assert venvscan.scan(a).hashed == 0
    assert share.link_shared(make_venv(tmp_path / "b", FILES), store) == 2
    assert venvscan.scan(a).hashed == 2  # without the store's memo: both read again
    again = venvscan.scan(a, shared=share.store_memo(store))
    assert (again.hashed, again.reused) == (0, 2)
    assert again.digests() == before


def test_a_write_through_a_shared_link_is_still_read_and_found(tmp_path: Path) -> None:
    """A write through another venv's link (same size, the mtime put back) moves the
    inode's ctime past what the store's memo says: read, and the change found."""
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    share.add_to_store(a, store)
    before = _memoized(a)
    b = make_venv(tmp_path / "b", FILES)
    share.link_shared(b, store)
    big = b / "lib/python3.11/site-packages/pkg/big.so"
    st = big.stat()
    big.chmod(0o644)
    data = bytearray(FILES["pkg/big.so"])
    data[0] ^= 0xFF
    big.write_bytes(bytes(data))
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = venvscan.scan(a, shared=share.store_memo(store))
    assert (after.hashed, after.reused) == (1, 1)
    assert after.digests() != before
    assert after.files["lib/python3.11/site-packages/pkg/big.so"] == (
        hashlib.sha256(bytes(data)).hexdigest()
    )


def test_a_scan_that_read_shared_files_tells_the_store_memo(tmp_path: Path) -> None:
    """A link count changed by something else (a venv removed): the first scan reads the
    shared files and notes them in the store's memo; the next venv's scan reads none."""
    store = tmp_path / "store"
    a = make_venv(tmp_path / "a", FILES)
    share.add_to_store(a, store)
    b = make_venv(tmp_path / "b", FILES)
    share.link_shared(b, store)
    before_a, before_b = _memoized(a), _memoized(b)
    sp = "lib/python3.11/site-packages/pkg"
    for name in ("big.so", "__init__.py"):
        os.link(a / sp / name, tmp_path / name)
        os.unlink(tmp_path / name)  # as a third venv removed
    memo = share.store_memo(store)
    assert venvscan.content_digests(a, shared=memo) == before_a  # read, and noted
    found = venvscan.scan(b, shared=memo)
    assert (found.hashed, found.reused) == (0, 2)
    assert found.digests() == before_b


def test_the_store_memo_keeps_only_inodes_the_store_still_has(tmp_path: Path) -> None:
    """``gc`` removes store files no venv links; their inodes leave the store's memo, the
    others stay."""
    store = tmp_path / "store"
    share.add_to_store(make_venv(tmp_path / "a", FILES), store)
    b = make_venv(tmp_path / "b", FILES)
    share.link_shared(b, store)
    memo = share.store_memo(store)
    sp = "lib/python3.11/site-packages/pkg"
    keys = {n: venvscan.inode_key(os.lstat(b / sp / n)) for n in ("big.so", "__init__.py")}
    assert set(venvscan.read_list(memo) or {}) == set(keys.values())
    for venv in (tmp_path / "a", b):
        (venv / sp / "big.so").unlink()
    for path, _n in share.unused(store):
        path.unlink()
    share.prune_memo(store)
    assert set(venvscan.read_list(memo) or {}) == {keys["__init__.py"]}


def test_the_store_memo_starts_afresh_over_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo = tmp_path / "files.memo"
    venvscan.note_shared(memo, {"1:1": ("k1", "v1"), "1:2": ("k2", "v2")})
    monkeypatch.setattr(venvscan, "SHARED_MAX", 2)
    venvscan.note_shared(memo, {"1:2": ("k2b", "v2b")})
    assert venvscan.read_list(memo) == {"1:1": ("k1", "v1"), "1:2": ("k2b", "v2b")}
    venvscan.note_shared(memo, {"1:3": ("k3", "v3")})
    assert venvscan.read_list(memo) == {"1:3": ("k3", "v3")}
