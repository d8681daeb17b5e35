"""A module imported when it is first used: :class:`LazyModule`.

The one way a module defers a heavy import (the docker SDK, cryptography, the knowledge
table) so that light commands stay light: ``signing = LazyModule("envforge.publish.signing")``
at the top, ``signing.load_trust(...)`` where it is needed. The name is a literal, so
``tests/unit/house/test_import_graph.py`` reads it as an import edge like any other.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from types import ModuleType
from typing import Any


def import_module(name: str) -> ModuleType:
    """:func:`importlib.import_module`, with Ctrl-C held back while the module loads (in
    the main thread, where the default handler is set): a ``KeyboardInterrupt`` raised
    inside an import can be swallowed by the import lock's callback ("Exception ignored
    ... Traceback") and the command would go on. A Ctrl-C noted meanwhile is raised once
    the import is done."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    in_main = threading.current_thread() is threading.main_thread()
    if not in_main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return importlib.import_module(name)
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        module = importlib.import_module(name)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        raise KeyboardInterrupt
    return module


class LazyModule:
    """Stands for the module ``name``: each attribute read imports it (Python's module
    cache makes every read after the first a lookup) and reads the attribute there, so a
    test's ``monkeypatch`` of the module is seen."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(import_module(self.name), attribute)

    def __repr__(self) -> str:
        return f"LazyModule({self.name!r})"
