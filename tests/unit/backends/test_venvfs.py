"""The venv backend's files: content binding, RECORD checks, leftovers, the swap, commands."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envforge.backends import venv, venvfs, venvscan
from envforge.backends.venv import (
    MARKER_DIR,
    CommandNotRunnable,
    VenvOptions,
    fingerprint,
    resolve_command,
    venv_location,
)
from envforge.backends.venv.certifying import CONTENT_FORMAT
from envforge.backends.venvfs import (
    VENV_KEY,
    content_digests,
    describe_changes,
    is_stale,
    parse_record,
    swap_dirs,
    sweep_leftovers,
    verify_records,
)
from envforge.errors import CertificationFailed
from envforge.recipe.model import Recipe
from tests.helpers.recipes import make_recipe

SP = "lib/python3.11/site-packages"


def record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_venv(root: Path, files: dict[str, bytes] | None = None) -> Path:
    """A venv-shaped folder with one distribution ``pkg 1.0`` whose RECORD is right."""
    files = files or {"pkg/__init__.py": b"x = 1\n", "pkg/core.py": b"def f():\n    return 2\n"}
    sp = root / SP
    info = sp / "pkg-1.0.dist-info"
    info.mkdir(parents=True)
    lines = []
    for rel, data in files.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_bytes(data)
        lines.append(f"{rel},sha256={record_hash(data)},{len(data)}")
    (info / "METADATA").write_text("Name: pkg\nVersion: 1.0\n")
    lines.append("pkg-1.0.dist-info/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    (root / "bin").mkdir()
    os.symlink(sys.executable, root / "bin" / "python")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return root


def test_record_rows_with_commas_quotes_and_no_hash() -> None:
    rows = parse_record('a/b.py,sha256=abc,12\n"we,ird/x.py",sha256=def,3\nX.dist-info/RECORD,,\n')
    assert [(r.path, r.sha256, r.size) for r in rows] == [
        ("a/b.py", "abc", 12),
        ("we,ird/x.py", "def", 3),
        ("X.dist-info/RECORD", None, None),
    ]


def test_digests_are_stable_and_survive_a_rename_of_the_venv(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "one")
    first = content_digests(venv)
    assert set(first) == {"pkg-1.0.dist-info", VENV_KEY}
    assert content_digests(venv) == first
    os.rename(venv, tmp_path / "two")  # what the swap does
    assert content_digests(tmp_path / "two") == first


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("append", "pkg/__init__.py modified"),
        ("same-size", "pkg/__init__.py modified"),
        ("delete", "pkg/core.py missing"),
    ],
)
def test_an_edited_replaced_or_deleted_file_is_seen_and_named(
    tmp_path: Path, change: str, named: str
) -> None:
    venv = make_venv(tmp_path / "v")
    target = venv / SP / ("pkg/core.py" if change == "delete" else "pkg/__init__.py")
    for name in ("pkg/__init__.py", "pkg/core.py", "pkg-1.0.dist-info/RECORD"):
        os.utime(venv / SP / name, ns=(10**9, 10**9))  # installed long ago, RECORD last
    before = content_digests(venv)
    if change == "append":
        with target.open("ab") as fh:
            fh.write(b"import os\n")
    elif change == "same-size":
        target.write_bytes(b"x = 9\n")
    else:
        target.unlink()
    assert content_digests(venv) != before
    assert describe_changes(venv, before) == f"pkg 1.0: {named}"
    problems = verify_records(venv)
    what = "missing" if change == "delete" else "modified"
    assert problems == [f"pkg 1.0: {target.relative_to(venv / SP).as_posix()} {what}"]


def test_a_touched_file_is_hashed_again_and_is_the_same_content(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "v")
    (venv / MARKER_DIR).mkdir()
    before = content_digests(venv)  # every file read once, the memo written
    assert venvscan.scan(venv).hashed == 0  # nothing moved: nothing read
    init = venv / SP / "pkg" / "__init__.py"
    st = init.stat()
    os.utime(init, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert venvscan.scan(venv).hashed == 1  # only what moved is read again
    assert content_digests(venv) == before  # by content: touched is not changed
    assert verify_records(venv) == []


def test_restat_keeps_what_a_link_or_mode_change_left_and_drops_a_rewrite(
    tmp_path: Path,
) -> None:
    """A build moves its files into the store (a hard link, write bits cleared: new
    ctimes, the same bytes); the memo's stat data are read again, the bytes never. A file
    rewritten since (a new mtime) loses its memo entry and is read again."""
    venv = make_venv(tmp_path / "v")
    (venv / MARKER_DIR).mkdir()
    found = venvscan.scan(venv, use_memo=False)
    init, core = venv / SP / "pkg" / "__init__.py", venv / SP / "pkg" / "core.py"
    os.link(init, tmp_path / "stored")
    init.chmod(0o444)
    st = core.stat()
    core.write_bytes(b"def f():\n    return 3\n")
    os.utime(core, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    venvscan.save_memo(venv, venvscan.restat(venv, found))
    again = venvscan.scan(venv)
    assert again.hashed == 1  # core.py only: the linked, read-only __init__.py is known
    rel = (SP + "/pkg/core.py").lstrip("/")
    assert again.files[rel] == hashlib.sha256(b"def f():\n    return 3\n").hexdigest()


def test_restat_keeps_a_file_replaced_by_a_checked_copy_and_only_that(tmp_path: Path) -> None:
    """A file the store replaced by its own copy (hashed while copied) has a new inode:
    kept when the build names it, read again when not."""
    venv = make_venv(tmp_path / "v")
    (venv / MARKER_DIR).mkdir()
    found = venvscan.scan(venv, use_memo=False)
    init, core = venv / SP / "pkg" / "__init__.py", venv / SP / "pkg" / "core.py"
    for path in (init, core):
        copy = path.with_name(path.name + ".copy")
        copy.write_bytes(path.read_bytes())
        os.replace(copy, path)
    venvscan.save_memo(venv, venvscan.restat(venv, found, [str(init)]))
    assert venvscan.scan(venv).hashed == 1  # core.py, not named


def test_refresh_memo_follows_a_link_count_change_and_drops_a_rewrite(tmp_path: Path) -> None:
    """A build that swapped its venv in removes the one it replaced: files they shared
    change link count (ctime), not bytes. The memo on disk keeps them; a file rewritten
    since (a new mtime) is read again."""
    venv = make_venv(tmp_path / "v")
    (venv / MARKER_DIR).mkdir()
    venvscan.save_memo(venv, venvscan.scan(venv, use_memo=False))
    init, core = venv / SP / "pkg" / "__init__.py", venv / SP / "pkg" / "core.py"
    os.link(init, tmp_path / "other-venvs-link")
    (tmp_path / "other-venvs-link").unlink()  # the replaced venv, removed
    assert venvscan.scan(venv).hashed == 1  # its ctime moved: without a refresh, read again
    venvscan.save_memo(venv, venvscan.scan(venv, use_memo=False))
    os.link(init, tmp_path / "other-venvs-link")
    st = core.stat()
    core.write_bytes(b"def f():\n    return 3\n")
    os.utime(core, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    venvscan.refresh_memo(venv)
    again = venvscan.scan(venv)
    assert again.hashed == 1  # core.py only
    rel = (SP + "/pkg/core.py").lstrip("/")
    assert again.files[rel] == hashlib.sha256(b"def f():\n    return 3\n").hexdigest()


def test_a_scan_takes_what_was_just_read_and_reads_the_rest(tmp_path: Path) -> None:
    """``just_read``: files whose bytes this process read a moment ago (the store's copy,
    checked before the venv was linked to it) are not read again; every other file is,
    and one whose lstat data moved since is read again too."""
    venv = make_venv(tmp_path / "v")
    init, core = venv / SP / "pkg" / "__init__.py", venv / SP / "pkg" / "core.py"
    rel_init, rel_core = (str(p.relative_to(venv)) for p in (init, core))
    first = venvscan.scan(venv, use_memo=False)
    told = {rel_init: (venvscan.stat_key(os.lstat(init)), first.files[rel_init])}
    assert venvscan.scan(venv, use_memo=False, just_read=told).hashed == first.hashed - 1
    stale = {rel_core: (venvscan.stat_key(os.lstat(core)), "0" * 64)}
    core.write_bytes(b"changed\n")
    again = venvscan.scan(venv, use_memo=False, just_read=stale)
    assert again.files[rel_core] == hashlib.sha256(b"changed\n").hexdigest()


def test_added_and_removed_distributions_and_pth_files(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "v")
    before = content_digests(venv)
    (venv / SP / "evil.pth").write_text("import os\n")
    assert describe_changes(venv, before) == "files no RECORD lists changed"
    (venv / SP / "evil.pth").unlink()
    assert describe_changes(venv, before) is None
    (venv / SP / "other-2.0.dist-info").mkdir()
    assert describe_changes(venv, before) == "added: other 2.0"
    assert describe_changes(venv, {**before, "gone-3.1.dist-info": "x"}) == (
        "removed: gone 3.1; added: other 2.0"
    )


def test_the_python_link_is_part_of_the_content(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "v")
    before = content_digests(venv)
    (venv / "bin" / "python").unlink()
    os.symlink("/bin/sh", venv / "bin" / "python")
    assert content_digests(venv)[VENV_KEY] != before[VENV_KEY]


# --------------------------------------------------------------------------- leftovers


def dead_owner() -> str:
    """``pid.start`` of a process that ran and is gone."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = venvfs.owner_tag(proc.pid)
    proc.wait()
    return tag


def test_staleness_by_owner() -> None:
    mine = venvfs.owner_tag()
    assert not is_stale(f".torch2.13.0-cpu-py3.11-abc.tmp-{mine}-x1y2", 0.0)
    assert not is_stale(f".torch2.13.0-cpu-py3.11-abc.old-{mine}-x1y2", 0.0)
    assert is_stale(".torch2.13.0-cpu-py3.11-abc.tmp-123.456-x1y2", 0.0, lambda p, s: False)
    assert not is_stale(".torch2.13.0-cpu-py3.11-abc.tmp-123.456-x1y2", 0.0, lambda p, s: True)
    # Same pid, another start time: the pid was reused by another process.
    pid, start = mine.split(".")
    assert is_stale(f".x.tmp-{pid}.{int(start) + 1}-ab", 0.0) == (int(start) != 0)
    # Older names without an owner: only after a day.
    assert not is_stale(".torch2.13.0-cpu-py3.11-abc.tmp-k3j4l5m6", 3600.0)
    assert is_stale(".torch2.13.0-cpu-py3.11-abc.tmp-k3j4l5m6", 2 * 24 * 3600.0)
    # Not ours at all.
    assert not is_stale("torch2.13.0-cpu-py3.11-abc", 10**9)
    assert not is_stale(".cache", 10**9)


def test_sweep_removes_only_what_a_dead_envforge_left(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "torch2.13.0-cpu-py3.11-abc")
    dead = tmp_path / f".{venv.name}.tmp-{dead_owner()}-q1w2"
    (dead / "lib").mkdir(parents=True)
    (dead / "lib" / "f").write_text("x")
    old = tmp_path / f".{venv.name}.old-{dead_owner()}-q1w2"
    old.mkdir()
    alive = tmp_path / f".{venv.name}.tmp-{venvfs.owner_tag()}-e3r4"
    alive.mkdir()
    assert sorted(sweep_leftovers(tmp_path)) == sorted([dead, old])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([venv.name, alive.name])


# --------------------------------------------------------------------------- swap


def test_swap_puts_the_new_folder_in_place_and_hands_back_the_old(tmp_path: Path) -> None:
    target = tmp_path / "venv"
    target.mkdir()
    (target / "which").write_text("old")
    new = tmp_path / ".venv.tmp-1"
    new.mkdir()
    (new / "which").write_text("new")
    previous = swap_dirs(new, target)
    assert previous is not None
    assert (target / "which").read_text() == "new"
    assert (previous / "which").read_text() == "old"
    fresh = tmp_path / ".other.tmp-2"
    fresh.mkdir()
    assert swap_dirs(fresh, tmp_path / "other") is None
    assert (tmp_path / "other").is_dir()


def test_swap_without_renameat2_renames_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(venvfs, "exchange", lambda a, b: False)
    target = tmp_path / "venv"
    target.mkdir()
    (target / "which").write_text("old")
    new = tmp_path / ".venv.tmp-1"
    new.mkdir()
    previous = swap_dirs(new, target)
    assert previous is not None
    assert previous.name.startswith(f".venv.old-{venvfs.owner_tag()}-")
    assert (previous / "which").read_text() == "old"
    assert not new.exists()


# --------------------------------------------------------------------------- commands


def test_commands_as_a_shell_finds_them(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "bin" / "plain"
    plain.write_text("data")
    path_var = f"{tmp_path / 'bin'}:/usr/bin"
    assert resolve_command("tool", path_var, "PATH") == str(tool)
    assert resolve_command(str(tool), path_var, "PATH") == str(tool)
    cases = {
        str(tmp_path): (126, f"{tmp_path}: command not executable ({tmp_path} is a folder)"),
        str(plain): (126, f"{plain}: command not executable ({plain} is not executable)"),
        "plain": (126, f"plain: command not executable ({plain} is not executable)"),
        "no-such-tool-here": (127, "no-such-tool-here (searched PATH): command not found"),
        str(tmp_path / "nope"): (127, f"{tmp_path / 'nope'}: command not found"),
    }
    for command, (code, message) in cases.items():
        with pytest.raises(CommandNotRunnable) as caught:
            resolve_command(command, path_var, "PATH")
        assert (caught.value.code, caught.value.message) == (code, message)
        assert "\n" not in caught.value.one_line()


# --------------------------------------------------------------------------- the backend's use


def certified_venv(tmp_path: Path) -> tuple[Recipe, dict[str, str], Path]:
    """A fake certified venv for a recipe at its location in a temporary ENVFORGE_HOME."""
    home = {"ENVFORGE_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")}
    recipe = make_recipe(python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    target = make_venv(venv_location(recipe, home))
    markers = target / MARKER_DIR
    markers.mkdir()
    fp, content = fingerprint(target), content_digests(target)
    (markers / "build.json").write_text(
        json.dumps({"fingerprint": fp, "content": content, "content_format": CONTENT_FORMAT})
    )
    cert = {
        "recipe_hash": recipe.hash,
        "fingerprint": fp,
        "content": content,
        "level": "full",
        "content_format": CONTENT_FORMAT,
    }
    (markers / "certified.json").write_text(json.dumps(cert))
    (markers / venvscan.CERTIFIED_LIST).write_bytes(venvscan.certified_list(target))
    return recipe, home, target


def test_state_is_certified_only_while_the_files_are_the_certified_ones(tmp_path: Path) -> None:
    recipe, home, target = certified_venv(tmp_path)
    assert venv.state(recipe, home).certified
    assert venv.ensure(recipe, VenvOptions(environ=home)) == (target, False)
    core = target / SP / "pkg" / "core.py"
    core.write_bytes(core.read_bytes() + b"# edited\n")
    now = venv.state(recipe, home)
    assert not now.certified
    assert now.changed == f"{SP}/pkg/core.py modified"
    with pytest.raises(CertificationFailed) as caught:
        venv.ensure(recipe, VenvOptions(environ=home))
    assert caught.value.exit_code == 1
    assert caught.value.one_line() == (
        f"{target} changed since it was certified: {SP}/pkg/core.py modified"
        f" (fix: `envforge build {recipe.name} --backend venv` re-certifies it,"
        " reinstalling what changed)"
    )


def test_a_package_added_since_certification_is_used_saying_once_it_is_stale(
    tmp_path: Path,
) -> None:
    recipe, home, target = certified_venv(tmp_path)
    sp = target / SP
    info = sp / "extra-2.0.dist-info"  # as `pip install extra` leaves it
    info.mkdir()
    (sp / "extra.py").write_text("y = 2\n")
    (info / "METADATA").write_text("Name: extra\nVersion: 2.0\n")
    digest = record_hash(b"y = 2\n")
    (info / "RECORD").write_text(f"extra.py,sha256={digest},6\n")
    now = venv.state(recipe, home)
    assert (now.certified, now.added, now.changed) == (False, ("extra 2.0",), None)
    said: list[str] = []
    options = VenvOptions(environ=home, say=said.append)
    assert venv.ensure(recipe, options) == (target, False)  # used, not rebuilt
    assert venv.ensure(recipe, options) == (target, False)
    assert len(said) == 1  # said once
    assert "extra 2.0 installed since" in said[0]
    assert f"envforge certify {recipe.name} --backend venv" in said[0]
    # a certified file changed as well: refused as before
    core = sp / "pkg" / "core.py"
    core.write_bytes(core.read_bytes() + b"# edited\n")
    assert venv.state(recipe, home).added == ()
    with pytest.raises(CertificationFailed):
        venv.ensure(recipe, options)


def test_what_a_build_does_with_changed_files(tmp_path: Path) -> None:
    recipe, home, target = certified_venv(tmp_path)
    built = json.loads((target / MARKER_DIR / "build.json").read_text())
    built["install_key"] = "k"
    options = VenvOptions(environ=home)
    why, content = venv._reinstall_reason(target, built, "k", options)
    assert (why, content) == (None, built["content"])
    assert venv._reinstall_reason(target, built, "other", options)[0] == (
        "the install inputs changed"
    )
    init = target / SP / "pkg" / "__init__.py"
    os.utime(init, ns=(init.stat().st_atime_ns, init.stat().st_mtime_ns + 10**9))
    why, content = venv._reinstall_reason(target, built, "k", options)
    assert why is None  # touched, same bytes: still the certified content
    assert content == built["content"]
    assert venv.valid_certificate(recipe, target) is not None
    init.write_bytes(b"x = 2\n")
    assert venv._reinstall_reason(target, built, "k", options)[0] == (
        f"files changed since the install: {SP}/pkg/__init__.py modified"
    )
    older = {**built, "content_format": None}
    assert str(venv._reinstall_reason(target, older, "k", options)[0]).startswith(
        "made by an older envforge"
    )
