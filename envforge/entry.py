"""The process entry point of ``envforge`` (console script) and ``python -m envforge``.

Ctrl-C must give exit 130 and one line at any moment, including the first ~0.3 s while
the CLI's modules load (click, jinja2, the Docker SDK). So:

* this module imports at its top only ``os`` and ``sys``, which the interpreter loaded
  before any of this (a lookup, no module code runs); ``signal`` is imported inside the
  ``try`` that turns ``KeyboardInterrupt`` into exit 130;
* while the CLI's modules load, Ctrl-C is only noted and acted on once they are loaded: a
  ``KeyboardInterrupt`` raised inside an import can be swallowed (a weakref callback of
  the import lock prints "Exception ignored … Traceback" and goes on) or, inside the
  ``eval``/``exec`` that ``namedtuple`` and ``dataclasses`` use, mark the interpreter so that
  it kills itself with SIGINT at exit (status -2) even though the interrupt was handled;
* after an interrupt the process ends with ``os._exit(130)`` once stdout/stderr are
  flushed and the ``atexit`` handlers ran, for that same reason; everything the command
  started was stopped by then (``finally`` blocks run while the interrupt unwinds);
* once the command has finished (or is being abandoned) Ctrl-C is ignored, so that the
  exit itself cannot turn into a traceback.

Only Python's own start-up (the interpreter, ``site``, ``runpy``; ~10 ms) comes before any
of this: ``envforge/__init__.py``, which Python runs first (for ``-m`` and the console
script alike), has a Ctrl-C noted from its first lines on (its docstring says how), for
:func:`_run` to act on.
"""

import os
import sys

from envforge import _NOTED, _note  # loaded already: the package ran first

INTERRUPTED = 130  # envforge.errors.ExitCode.INTERRUPTED, not imported: see above


def main() -> int:
    """Run the CLI and return its exit code; after Ctrl-C, exit the process with 130."""
    try:
        code = _run()
    except KeyboardInterrupt:
        _interrupted()
        code = INTERRUPTED
    if code == INTERRUPTED:
        exit_now(code)
    return code


def _run() -> int:
    import signal

    pending = _NOTED  # noted while the package loaded, if any
    current = signal.getsignal(signal.SIGINT)
    defer = current in (signal.default_int_handler, _note)
    try:
        if defer:
            signal.signal(signal.SIGINT, _note)
        try:
            from envforge.cli import main as cli_main
        finally:
            if defer:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        if pending:
            raise KeyboardInterrupt
        return cli_main()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupted() -> None:
    try:
        sys.stderr.write("envforge: interrupted\n")
    except (OSError, ValueError):  # stderr closed or gone: nothing to say it on
        return


def exit_now(code: int) -> None:
    """Flush stdout/stderr, run the ``atexit`` handlers, then end the process with ``code``."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:  # whatever a handler raised (a second Ctrl-C), the process ends here
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed stream: nothing to flush
                continue
        os._exit(code)
