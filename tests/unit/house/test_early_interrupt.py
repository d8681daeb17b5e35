"""Ctrl-C while the ``envforge`` package itself loads: noted for the CLI, never taken from a
program that imports envforge (``envforge/__init__.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import envforge


@pytest.mark.parametrize(
    ("orig_argv", "argv0", "cli"),
    [
        (["python3", "-m", "envforge", "list"], "-m", True),
        (["python3", "/usr/local/bin/envforge", "list"], "/usr/local/bin/envforge", True),
        (["python3", "-m", "envforge.probe.worker"], "-m", False),
        (["python3", "train.py"], "train.py", False),
        (["python3", "-c", "import envforge"], "-c", False),
    ],
)
def test_only_the_cli_is_the_cli(
    monkeypatch: pytest.MonkeyPatch, orig_argv: list[str], argv0: str, cli: bool
) -> None:
    monkeypatch.setattr(sys, "orig_argv", orig_argv, raising=False)
    monkeypatch.setattr(sys, "argv", [argv0])
    assert envforge._run_as_the_cli() is cli


def test_a_program_importing_envforge_keeps_its_ctrl_c() -> None:
    code = (
        "import signal, envforge\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"


def test_the_cli_notes_ctrl_c_from_its_first_lines() -> None:
    """Under ``python -m envforge`` the package has SIGINT noted before envforge.entry runs;
    the CLI then exits 130 with one line (here: the interrupt is raised at once)."""
    code = (
        "import os, signal, sys\n"
        "sys.orig_argv = [sys.executable, '-m', 'envforge']\n"
        "import envforge\n"
        "assert signal.getsignal(signal.SIGINT) is envforge._note\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "assert envforge._NOTED == [signal.SIGINT]\n"
        "from envforge.entry import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.lstrip("\n") == "envforge: interrupted\n"


def test_the_package_imports_nothing_before_its_ctrl_c_handler() -> None:
    """Every statement above the one that sets the handler names only what the interpreter
    loaded before envforge (``sys``, ``_signal``): an import that reads a file there is a
    window in which Ctrl-C ends in runpy's traceback (seen: ``from __future__``)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(envforge.__file__).read_text(encoding="utf-8"))
    before: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and "_signal.signal" in ast.unparse(node):
            break
        before.append(node)
    else:
        raise AssertionError("no statement sets the SIGINT handler")
    imported: set[str] = {
        alias.name
        for node in before
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    } | {node.module for node in before if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"sys", "_signal"}, imported
    for name in imported:
        assert name in sys.builtin_module_names, name
