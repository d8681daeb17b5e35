"""Running a command in a certified venv, with signals passed on and its exit code returned."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envforge.errors import (
    EnvforgeError,
    ExitCode,
    InvalidInput,
)
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    pass

#: Seconds one ``uv`` install may run (a ROCm torch wheel is several GB).

from envforge.backends.venv.install import venv_environ

#: Signals sent to envforge (by ``kill``, a supervisor, a CI runner) that are passed on to
#: the command. The terminal's own signals (Ctrl-C, Ctrl-\, a resize) reach the command
#: directly, as it runs in envforge's process group; those are not sent twice.
FORWARDED_SIGNALS: tuple[str, ...] = (
    "SIGINT",
    "SIGTERM",
    "SIGHUP",
    "SIGQUIT",
    "SIGUSR1",
    "SIGUSR2",
    "SIGWINCH",
)


#: si_code of a signal the kernel generated (the terminal's Ctrl-C) rather than kill().
_SI_KERNEL = 0x80


class CommandNotRunnable(EnvforgeError):
    """The command given to ``shell`` cannot be run: 127 not found, 126 not executable."""

    def __init__(self, message: str, *, hint: str, code: int) -> None:
        super().__init__(message, hint=hint)
        self.code = code


def resolve_command(command: str, path_var: str, where: str) -> str:
    """The executable ``command`` names (a path, or a name looked up on ``path_var``), as a
    shell finds it; :class:`CommandNotRunnable` 127 (not found) or 126 (found, but a folder
    or not executable), as shells report them."""
    if not command:
        raise CommandNotRunnable(
            "the command is an empty string", hint="give a command after --", code=127
        )
    if os.sep in command:
        candidates = [command]
    else:
        candidates = [os.path.join(d or ".", command) for d in path_var.split(os.pathsep)]
    blocked: str | None = None
    for candidate in candidates:
        if not os.path.exists(candidate):
            continue
        if os.path.isdir(candidate):
            blocked = blocked or f"{candidate} is a folder"
            continue
        if not os.access(candidate, os.X_OK):
            blocked = blocked or f"{candidate} is not executable"
            continue
        return candidate
    if blocked is not None:
        raise CommandNotRunnable(
            f"{command}: command not executable ({blocked})",
            hint="name a program, or make the file executable (chmod +x)",
            code=int(ExitCode.NOT_EXECUTABLE),
        )
    what = command if os.sep in command else f"{command} (searched {where})"
    raise CommandNotRunnable(
        f"{what}: command not found",
        hint="check the name; `envforge shell RECIPE -- which NAME` shows what is on PATH",
        code=int(ExitCode.NOT_FOUND),
    )


def _not_runnable(exc: CommandNotRunnable) -> int:
    sys.stderr.write(f"envforge: error: {exc.one_line()}\n")
    sys.stderr.flush()
    return exc.code


def run_in_venv(
    venv: Path, recipe: Recipe, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> int:
    """Run ``argv`` in the foreground with the venv's environment; its exit code.

    The command stays in envforge's process group, so the terminal's Ctrl-C (and Ctrl-\\,
    Ctrl-Z, resizes) reach it directly. Signals sent to envforge itself
    (:data:`FORWARDED_SIGNALS`: ``kill -TERM``, a supervisor's SIGINT) are passed on to it.
    The command's status is passed through: its own exit code, or 128+N when it died of
    signal N, as shells do. A command that cannot be run is 127 (not found) or 126 (not
    executable), with one line on stderr.
    """
    if not argv:
        raise InvalidInput(
            "no command given", hint="envforge shell RECIPE --backend venv -- python"
        )
    env = venv_environ(venv, recipe, environ)
    try:
        exe = resolve_command(argv[0], env["PATH"], f"the {recipe.name} venv and PATH")
    except CommandNotRunnable as exc:
        return _not_runnable(exc)
    return run_forwarding(argv, env, executable=exe)


def run_forwarding(argv: Sequence[str], env: Mapping[str, str], *, executable: str) -> int:
    """Run ``executable`` with ``argv`` (``argv[0]`` as typed, as a shell passes it) in this
    process group; forward the signals envforge is sent; its status (128+N for death by
    signal N)."""
    argv0 = argv[0]
    sigs = [sig for name in FORWARDED_SIGNALS if (sig := getattr(signal, name, None)) is not None]
    waitset = [*sigs, signal.SIGCHLD]
    early: list[int] = []
    handlers: dict[int, Any] = {}
    for sig in sigs:
        # Until the child runs and the signals are blocked: note them, forward them later.
        handlers[int(sig)] = signal.signal(sig, lambda signum, _frame: early.append(signum))
    masked = False
    try:
        try:
            child = subprocess.Popen(list(argv), executable=executable, env=dict(env))
        except OSError as exc:
            status = 127 if isinstance(exc, FileNotFoundError) else 126
            what = "command not found" if status == 127 else "command not executable"
            return _not_runnable(
                CommandNotRunnable(
                    f"{argv0}: {what} ({exc.strerror or exc})",
                    hint="check the command and, for a script, its #! line",
                    code=status,
                )
            )
        for sig in sigs:  # a signal some other thread takes has no siginfo: forward it
            signal.signal(sig, lambda signum, _frame: _send(child, signum))
        if hasattr(signal, "sigtimedwait"):
            signal.pthread_sigmask(signal.SIG_BLOCK, waitset)
            masked = True
        for signum in early:
            _send(child, signum)
        while True:
            polled = child.poll()
            if polled is not None:
                code = polled
                break
            if not masked:
                code = child.wait()
                break
            info = signal.sigtimedwait(waitset, 1.0)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code != _SI_KERNEL:  # sent to envforge, not by the terminal
                _send(child, info.si_signo)
    finally:
        if masked:
            while signal.sigtimedwait(waitset, 0) is not None:
                pass  # the command has ended: what came meanwhile was for it
        for signum, old in handlers.items():
            signal.signal(signum, old)
        if masked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, waitset)
    return 128 + (-code) if code < 0 else code


def _send(child: subprocess.Popen[bytes], signum: int) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)
