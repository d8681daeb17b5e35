"""Issue 22 class 3, the rest of the outputs: a device node, FIFO or a link to one where an
output goes is refused in one place (``envforge.core.fsutil``) and left as it was, also
when it appears after the check, for outputs of several files (``fleet plan``), for the
venv folder a build swaps in, and for cache entries (which only cost time).

Real nodes: FIFOs (``os.mkfifo``) everywhere; character devices (``os.mknod``, /dev/null's
numbers, made in ``tmp_path``) where the tests run as root. /dev itself is never written.
The CLI over real processes: tests/acceptance/test_special_file_outputs.py.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.backends import venvfs
from envforge.cli import main
from envforge.core import fsutil
from envforge.errors import BadPath, ExitCode
from envforge.knowledge.index import IndexClient


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _char(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name(path.name + ".real"))
    os.symlink(path.name + ".real", path)


def _link_to_char(path: Path) -> None:
    _char(path.with_name(path.name + ".real"))
    os.symlink(path.name + ".real", path)


MAKERS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "char-device": _char,
    "link-to-fifo": _link_to_fifo,
    "link-to-char-device": _link_to_char,
}


def _node(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_mode, st.st_rdev, st.st_ino


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --------------------------------------------------------------------------- the race


@pytest.mark.parametrize("kind", ["fifo", "char-device", "folder"])
def test_a_node_that_takes_the_files_place_after_the_check_is_put_back(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the check and the rename (the file is being staged) a FIFO, device or
    folder replaces the old file: it is moved back, never replaced nor removed."""
    target = tmp_path / "out.txt"
    target.write_text("old")
    other = tmp_path / "other.txt"
    stage = fsutil._stage

    def racing(path: Path, data: bytes, mode: int) -> Path:
        staged = stage(path, data, mode)
        if path == target:
            target.unlink()
            if kind == "folder":
                target.mkdir()
            else:
                MAKERS[kind](target)
        return staged

    monkeypatch.setattr(fsutil, "_stage", racing)
    with pytest.raises(BadPath) as info:
        fsutil.write_files([(other, "new", 0o644), (target, "new", 0o644)], setting="-o")
    assert info.value.exit_code is ExitCode.INVALID_INPUT
    line = info.value.one_line()
    assert f"cannot write {target}" in line
    assert ("is a folder" if kind == "folder" else "not a regular file") in line
    assert fsutil.TMP_PREFIX not in line  # names the output, not where it was moved
    st = os.lstat(target)
    expected = {"fifo": stat.S_ISFIFO, "char-device": stat.S_ISCHR, "folder": stat.S_ISDIR}
    assert expected[kind](st.st_mode)
    if kind == "char-device":
        assert st.st_rdev == os.makedev(1, 3)
    assert _listing(tmp_path) == ["out.txt"]  # all or none: other.txt not left either


# --------------------------------------------------------------------------- fleet plan


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize(
    ("engine", "name"),
    [("github", "plan.json"), ("github", "workflow.yml"), ("slurm", "plan.json")],
)
def test_fleet_plan_onto_a_node_writes_none_of_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, engine: str, name: str
) -> None:
    out = tmp_path / "plan"
    out.mkdir()
    MAKERS[kind](out / name)
    before = _node(out / name)
    listing = _listing(out)
    assert (
        main(
            [
                "fleet",
                "plan",
                "--engine",
                engine,
                "--recipe",
                "cpu",
                "--backend",
                "venv",
                "-o",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("envforge: error:")]
    assert len(errors) == 1, err
    assert f"cannot write {out / name}" in errors[0]
    assert "Traceback" not in err
    assert _node(out / name) == before
    assert _listing(out) == listing  # no logs/, no scheduler files, no temporary file


def test_fleet_plan_with_a_fifo_where_logs_goes_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    out.mkdir()
    os.mkfifo(out / "logs")
    assert main(["fleet", "plan", "--engine", "github", "--recipe", "cpu", "-o", str(out)]) == 2
    assert f"{out / 'logs'} is a FIFO, not a folder" in capsys.readouterr().err
    assert _listing(out) == ["logs"]


# --------------------------------------------------------------------------- venv folder


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_venv_is_never_swapped_onto_a_node(tmp_path: Path, kind: str) -> None:
    new = tmp_path / "new"
    new.mkdir()
    (new / "marker").write_text("x")
    target = tmp_path / "venv"
    MAKERS[kind](target)
    before = _node(target)
    with pytest.raises(NotADirectoryError):
        venvfs.swap_dirs(new, target)
    assert _node(target) == before
    assert (new / "marker").read_text() == "x"


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
def test_a_venv_build_onto_a_node_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from envforge.backends.venv import building
    from envforge.backends.venv.layout import venv_location
    from envforge.recipe.catalogue import Catalogue

    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    recipe = Catalogue.default().load("cpu")
    target = venv_location(recipe)
    target.parent.mkdir(parents=True)
    MAKERS[kind](target)
    before = _node(target)

    def no_install(*_args: object, **_kw: object) -> None:
        raise AssertionError("installed onto a device node")

    monkeypatch.setattr(building, "_build_aside", no_install)
    with pytest.raises(BadPath) as info:
        building.make(recipe)
    line = info.value.one_line()
    assert f"{target} is a {'FIFO' if kind == 'fifo' else 'character device'}, not a folder" in line
    assert "ENVFORGE_HOME" in line
    assert _node(target) == before


# --------------------------------------------------------------------------- caches


def test_an_index_cache_entry_that_is_a_fifo_is_neither_read_nor_replaced(
    tmp_path: Path,
) -> None:
    client = IndexClient(cache_dir=tmp_path / "cache")
    url, accept = "http://127.0.0.1:9/simple/torch/", "application/json"
    entry = client._path(url, accept)
    assert entry is not None
    entry.parent.mkdir(parents=True)
    os.mkfifo(entry)
    before = _node(entry)
    assert client._load(url, accept) is None  # never blocks on the FIFO
    client._save(url, accept, {"url": url, "stored": 0.0, "body": ""})  # no error: a cache
    assert _node(entry) == before
    assert _listing(tmp_path / "cache") == [
        entry.parent.name,
        str(entry.relative_to(tmp_path / "cache")),
    ]


# --------------------------------------------------------------------------- state inputs
# (class 8: what envforge reads back is bounded and regular too)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (k, n)
        for k in ("fifo", "char-device", "link-to-fifo")
        for n in ("evidence.sqlite", "evidence.sqlite-wal")
    ]
    + [("garbage", "evidence.sqlite")],
)
def test_an_evidence_store_that_is_a_node_or_no_database_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    name: str,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("ENVFORGE_HOME", str(home))
    if kind == "garbage":
        (home / name).write_bytes(bytes(range(256)) * 20)
    else:
        MAKERS[kind](home / name)
    before = _node(home / name)
    code = main(["evidence", "export", "-o", str(tmp_path / "out.jsonl")])
    assert code == ExitCode.INVALID_INPUT
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("envforge: error:")]
    assert str(home / name) in line
    assert ("not a database" if kind == "garbage" else "not a regular file") in line
    assert _node(home / name) == before
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("kind", ["fifo", "char-device", "link-to-fifo", "dev-zero", "sparse"])
def test_fleet_status_reads_plan_json_bounded_and_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    folder = tmp_path / "plan"
    folder.mkdir()
    plan = folder / "plan.json"
    if kind == "dev-zero":
        os.symlink("/dev/zero", plan)
    elif kind == "sparse":
        with open(plan, "wb") as fh:
            fh.truncate(20 << 30)  # 20 GB announced, nothing on disk
    else:
        MAKERS[kind](plan)
    assert main(["fleet", "status", str(folder)]) == ExitCode.INVALID_INPUT
    line = _one_error(capsys)
    assert f"{plan}: cannot read: " in line
    assert ("larger than" if kind == "sparse" else "not a regular file") in line
    assert "no such file" not in line


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("envforge: error:")]
    return line


@pytest.mark.parametrize("kind", ["fifo", "char-device", "dev-zero", "sparse"])
def test_a_lock_file_is_read_bounded_and_regular_only(tmp_path: Path, kind: str) -> None:
    from envforge import lock
    from envforge.errors import InvalidInput

    path = tmp_path / "cpu.lock.txt"
    if kind == "dev-zero":
        os.symlink("/dev/zero", path)  # readline() on it never returned
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(20 << 30)
    else:
        MAKERS[kind](path)
    assert lock.lock_digest(path) is None
    for read in (lambda: lock.check_lock(path, "cpu"), lambda: lock.split_lock(path)):
        with pytest.raises(InvalidInput) as info:
            read()
        line = info.value.one_line()
        assert f"{path}: cannot read the lock: " in line
        assert ("larger than" if kind == "sparse" else "not a regular file") in line


# --------------------------------------------------------------------------- empty paths


EMPTY_TARGETS = [
    ["solve", "gfx1100", "--write"],
    ["evidence", "export", "-o"],
    ["render", "cpu", "-o"],
    ["render", "--all", "-o"],
    ["render", "cpu", "--format", "venv", "-o"],
    ["lock", "cpu", "-o"],
    ["probe", "--report"],
    ["probe", "--summary"],
    ["matrix", "-o"],
    ["fleet", "plan", "--engine", "github", "--recipe", "cpu", "-o"],
    ["knowledge", "refresh", "--index", "http://127.0.0.1:9/", "--no-pytorch-index", "-o"],
    ["keys", "generate", "-o"],
]


@pytest.mark.parametrize(
    "args", EMPTY_TARGETS, ids=[" ".join(a[:2]) + " " + a[-1] for a in EMPTY_TARGETS]
)
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_output_path_is_exit_2_and_writes_nothing_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    value: str,
) -> None:
    """``-o ""`` (an unset ``$VAR``) was the current folder: render, probe --report,
    matrix and fleet plan wrote their files here unasked."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    assert main([*args, value]) == ExitCode.INVALID_INPUT
    assert "is empty" in capsys.readouterr().err
    assert _listing(here) == []


def test_dot_is_still_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["render", "cpu", "-o", "."]) == 0
    assert (tmp_path / "cpu" / "Dockerfile").is_file()


# --------------------------------------------------------------------------- output folders


@pytest.mark.parametrize("kind", ["fifo", "char-device", "link-to-fifo"])
@pytest.mark.parametrize(
    "args",
    [
        ["matrix", "-o", "{T}"],
        ["keys", "generate", "-o", "{T}"],
        ["render", "cpu", "-o", "{T}"],
        ["fleet", "plan", "--engine", "github", "--recipe", "cpu", "-o", "{T}"],
    ],
    ids=["matrix", "keys", "render", "fleet-plan"],
)
def test_an_output_folder_that_is_a_node_is_named_for_what_it_is(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    args: list[str],
) -> None:
    """One check (fsutil.check_folder_target) for every output folder: matrix said 'is a
    file' and keys 'not a folder' for a device or FIFO."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    target = tmp_path / "out"
    MAKERS[kind](target)
    before = _node(target)
    assert main([a.replace("{T}", str(target)) for a in args]) == ExitCode.INVALID_INPUT
    line = _one_error(capsys)
    what = {
        "fifo": "a FIFO",
        "char-device": "a character device",
        "link-to-fifo": "a symbolic link to a FIFO",
    }[kind]
    assert f"{target} is {what}, not a folder" in line
    assert _node(target) == before
