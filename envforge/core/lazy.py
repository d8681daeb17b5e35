"""A module imported when it is first used: :class:`LazyModule`.

The one way a module defers a heavy import (the docker SDK, cryptography, the knowledge
table) so that light commands stay light: ``signing = LazyModule("envforge.publish.signing")``
at the top, ``signing.load_trust(...)`` where it is needed. The name is a literal, so
``tests/unit/house/test_import_graph.py`` reads it as an import edge like any other.
"""

from __future__ import annotations

import builtins
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any


def _holding_ctrl_c(load: Callable[[], ModuleType]) -> ModuleType:
    """``load()``, with Ctrl-C held back meanwhile where it would raise (the main thread,
    the default handler set): a ``KeyboardInterrupt`` raised inside an import can be
    swallowed by the import lock's callback ("Exception ignored ... Traceback") and the
    command would go on. A Ctrl-C noted meanwhile is raised once ``load`` is done."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return load()
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        return load()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if noted:
            raise KeyboardInterrupt


def import_module(name: str) -> ModuleType:
    """:func:`importlib.import_module`, with Ctrl-C held back while the module loads
    (:func:`_holding_ctrl_c`)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    return _holding_ctrl_c(lambda: importlib.import_module(name))


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


def _loaded(name: str, fromlist: Any, level: int) -> bool:
    """Whether ``import name`` / ``from name import fromlist`` finds everything loaded."""
    module = sys.modules.get(name) if level == 0 else None
    if module is None:
        return False
    return not fromlist or all(n == "*" or hasattr(module, n) for n in fromlist)


@contextmanager
def imports_hold_ctrl_c() -> Iterator[None]:
    """While inside, an ``import`` statement that loads a module (the main thread, the
    default Ctrl-C handler) holds Ctrl-C back until it is done, as :func:`import_module`
    does: the CLI's deferred imports (a cache miss, ``render``'s templates) would else be
    open to a ``KeyboardInterrupt`` that the import lock's callback swallows ("Exception
    ignored ... Traceback", the command going on). Statements whose modules are loaded
    run as they are."""
    real: Callable[..., ModuleType] = builtins.__import__

    def held(
        name: str,
        globals: Any = None,  # the signature of builtins.__import__
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> ModuleType:
        if _loaded(name, fromlist, level):
            return real(name, globals, locals, fromlist, level)
        return _holding_ctrl_c(lambda: real(name, globals, locals, fromlist, level))

    builtins.__import__ = held
    try:
        yield
    finally:
        builtins.__import__ = real
