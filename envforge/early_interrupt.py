"""Ctrl-C before the CLI is loaded: noted, never raised.

Python imports the ``envforge`` package before ``envforge.__main__`` or ``envforge.entry``
runs a line, and a ``KeyboardInterrupt`` raised there ends in runpy's traceback. So the
package's ``__init__``, when this process is the CLI (:func:`run_as_the_cli`), has SIGINT
only noted here from its first lines on; :func:`envforge.entry.main` acts on what was
noted (exit 130, one line) once the CLI is loaded. A program that imports envforge keeps
its own Ctrl-C.

This module imports nothing but ``sys`` (loaded with the interpreter): an interrupt while
it loads is one no program could catch (seen under load: ``typing`` took long enough).
"""

import sys

#: The signals noted so far (read, and added to, by :mod:`envforge.entry`).
NOTED: "list[int]" = []


def note(signum: int, _frame: object) -> None:
    NOTED.append(signum)


def run_as_the_cli() -> bool:
    """``python -m envforge …`` or the ``envforge`` console script."""
    argv = getattr(sys, "orig_argv", ())  # Python >= 3.10
    if any(a == "-m" and b == "envforge" for a, b in zip(argv, argv[1:])):
        return True
    return bool(sys.argv) and sys.argv[0].rpartition("/")[2] == "envforge"
