"""envforge: known-good GPU PyTorch stacks, built, probed under deadlines, certified."""

from __future__ import annotations

from envforge import early_interrupt

if early_interrupt.run_as_the_cli():  # Ctrl-C from here on is noted, for envforge.entry
    # built in, no file read (``signal`` imports ``enum`` first); typeshed has no stub
    import _signal  # type: ignore[import-not-found]

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, early_interrupt.note)

from envforge.version import __version__

__all__ = ["__version__", "select_device"]


def select_device(timeout: float = 30.0, python: str | None = None) -> str:
    """The torch device to use, ``"cuda"`` or ``"cpu"``, after an isolated, timed GPU probe.

    See :func:`envforge.probe.select.select_device`; imported lazily so that
    ``import envforge`` stays light.
    """
    from envforge.probe.select import (  # noqa: PLC0415 - keeps `import envforge` light
        select_device as _select_device,
    )

    return _select_device(timeout=timeout, python=python)
