"""The /proc helpers of envforge.core.proc on fake /proc trees and on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envforge.core.proc import (
    ProcStat,
    descendants,
    environ_has,
    is_running,
    kill_marked,
    kill_tree,
    parse_stat,
    process_table,
    start_time,
)

LINUX = Path("/proc/self/stat").exists()


def _stat(pid: int, ppid: int, state: str = "S", name: str = "sleep") -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags ... starttime is field 22
    rest = [state, str(ppid), str(pid), str(pid)] + ["0"] * 15 + [str(1000 + pid)]
    return f"{pid} ({name}) " + " ".join(rest) + " 0 0\n"


def _fake_proc(tmp_path: Path, rows: list[tuple[int, int, str]], env: dict[int, bytes]) -> Path:
    root = tmp_path / "proc"
    for pid, ppid, state in rows:
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(_stat(pid, ppid, state))
        (root / str(pid) / "environ").write_bytes(env.get(pid, b"PATH=/bin\0"))
    (root / "self").mkdir(parents=True, exist_ok=True)
    return root


def test_parse_stat_reads_a_name_with_parentheses_and_spaces() -> None:
    stat = parse_stat(_stat(42, 7, "T", name="a) (b c"))
    assert stat == ProcStat(pid=42, state="T", ppid=7, pgid=42, sid=42, start=1042)


@pytest.mark.parametrize("text", ["", "garbage", "12 (x) S", "x (y) S 1 2 3"])
def test_parse_stat_refuses_what_is_not_a_stat_line(text: str) -> None:
    assert parse_stat(text) is None


def test_descendants_follow_the_tree_and_skip_other_branches(tmp_path: Path) -> None:
    rows = [
        (1, 0, "S"),
        (10, 1, "S"),
        (11, 10, "S"),
        (12, 11, "Z"),
        (13, 10, "S"),
        (20, 1, "S"),
        (21, 20, "S"),
    ]
    table = process_table(_fake_proc(tmp_path, rows, {}))
    assert sorted(table) == [1, 10, 11, 12, 13, 20, 21]
    assert descendants(10, table) == [11, 13, 12]
    assert descendants(20, table) == [21]
    assert descendants(21, table) == []
    assert table[12].zombie


def test_start_time_and_is_running_on_a_fake_tree(tmp_path: Path) -> None:
    root = _fake_proc(tmp_path, [(5, 1, "S"), (6, 1, "Z")], {})
    assert start_time(5, root) == 1005
    assert is_running(5, root=root)
    assert is_running(5, 1005, root)
    assert not is_running(5, 999, root)  # the pid was reused by another process
    assert not is_running(6, root=root)  # a zombie is not running
    assert not is_running(7, root=root)


def test_environ_has_matches_whole_entries_only(tmp_path: Path) -> None:
    root = _fake_proc(tmp_path, [(5, 1, "S")], {5: b"A=1\0MARK=abc\0B=2\0"})
    assert environ_has(5, "MARK", "abc", root)
    assert not environ_has(5, "MARK", "ab", root)
    assert not environ_has(6, "MARK", "abc", root)


def test_no_proc_means_an_empty_table(tmp_path: Path) -> None:
    assert process_table(tmp_path / "missing") == {}


def _alive(pid: int) -> bool:
    return is_running(pid)


def _wait_for(path: Path) -> str:
    deadline = time.monotonic() + 20
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "the child never wrote its pids"
        time.sleep(0.02)
    return path.read_text()


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_kill_tree_reaches_a_grandchild_in_another_session(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    code = f"""
import os, subprocess, sys, time
d = subprocess.Popen(["setsid", "sleep", "600"])
open({str(marker)!r}, "w").write("%d\\n" % d.pid)
time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        daemon = int(_wait_for(marker))
        assert _alive(daemon)
        killed = kill_tree(proc.pid)
        assert daemon in killed
        assert proc.pid not in killed  # only what is below it
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while _alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(daemon)


@pytest.mark.skipif(not LINUX, reason="needs /proc")
def test_kill_marked_finds_a_double_forked_daemon_by_its_environment(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    code = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open({str(marker)!r}, "w").write("%d\\n" % os.getpid())
        time.sleep(600)
    os._exit(0)
os.wait()
"""
    token = os.urandom(8).hex()
    env = dict(os.environ, ENVFORGE_TEST_MARK=token)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
    daemon = int(_wait_for(marker))
    try:
        assert _alive(daemon)  # re-parented away: no tree leads to it
        assert kill_marked("ENVFORGE_TEST_MARK", "someone-else") == []
        assert daemon in kill_marked("ENVFORGE_TEST_MARK", token)
        deadline = time.monotonic() + 5
        while _alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(daemon)
    finally:
        if _alive(daemon):
            os.kill(daemon, 9)
