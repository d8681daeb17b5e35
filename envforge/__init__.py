"""envforge: known-good GPU PyTorch stacks, built, probed under deadlines, certified.

When this process is the CLI (``python -m envforge`` or the ``envforge`` console script),
Ctrl-C is only noted from the first lines below on, never raised: Python runs this file
before ``envforge.__main__`` or :mod:`envforge.entry`, and a ``KeyboardInterrupt`` raised
while it loads ends in runpy's traceback. :func:`envforge.entry.main` acts on what was
noted (exit 130, one line) once the CLI is loaded. Nothing is imported before the handler
is in place (no ``from __future__``: seen under load, an interrupt while ``__future__``
loaded); ``sys`` and ``_signal`` are built in and loaded with the interpreter, so naming
them reads no file. A program that imports envforge keeps its own Ctrl-C.
"""

import _signal  # type: ignore[import-not-found]  # ``signal`` imports ``enum``; no stub
import sys

#: The signals noted so far, for :mod:`envforge.entry` (which notes there too).
_NOTED: "list[int]" = []


def _note(signum: int, _frame: object) -> None:
    _NOTED.append(signum)


def _run_as_the_cli() -> bool:
    """``python -m envforge …`` or the ``envforge`` console script."""
    argv = getattr(sys, "orig_argv", ())  # Python >= 3.10
    if any(a == "-m" and b == "envforge" for a, b in zip(argv, argv[1:])):
        return True
    return bool(sys.argv) and sys.argv[0].rpartition("/")[2] == "envforge"


if _run_as_the_cli() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _note)

from envforge.version import __version__  # noqa: E402 - after the Ctrl-C handler (above)

__all__ = ["__version__", "select_device"]


def select_device(timeout: float = 30.0, python: "str | None" = None) -> str:
    """The torch device to use, ``"cuda"`` or ``"cpu"``, after an isolated, timed GPU probe.

    See :func:`envforge.probe.select.select_device`; imported lazily so that
    ``import envforge`` stays light.
    """
    from envforge.probe.select import (  # noqa: PLC0415 - keeps `import envforge` light
        select_device as _select_device,
    )

    return _select_device(timeout=timeout, python=python)
