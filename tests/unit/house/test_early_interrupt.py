"""Ctrl-C while the ``envforge`` package itself loads: noted for the CLI, never taken from a
program that imports envforge (:mod:`envforge.early_interrupt`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envforge import early_interrupt


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
    assert early_interrupt.run_as_the_cli() is cli


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
        "from envforge import early_interrupt\n"
        "assert signal.getsignal(signal.SIGINT) is early_interrupt.note\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "assert early_interrupt.NOTED == [signal.SIGINT]\n"
        "from envforge.entry import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.lstrip("\n") == "envforge: interrupted\n"
