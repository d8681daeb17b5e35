"""A module imported when it is first used: :class:`LazyModule`.

The one way a module defers a heavy import (the docker SDK, cryptography, the knowledge
table) so that light commands stay light: ``signing = LazyModule("envforge.publish.signing")``
at the top, ``signing.load_trust(...)`` where it is needed. The name is a literal, so
``tests/unit/house/test_import_graph.py`` reads it as an import edge like any other.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module ``name``: each attribute read imports it (Python's module
    cache makes every read after the first a lookup) and reads the attribute there, so a
    test's ``monkeypatch`` of the module is seen."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self.name), attribute)

    def __repr__(self) -> str:
        return f"LazyModule({self.name!r})"
