"""The store of shared files: venvs that install the same bytes hold one copy."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

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
