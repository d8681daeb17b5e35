"""A lazy import holds Ctrl-C back until the module is loaded (:func:`import_module`): a
``KeyboardInterrupt`` inside an import can be swallowed by the import lock's callback, and
the command would go on."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from envforge.core.lazy import LazyModule, import_module

BODY = """\
import os, signal
os.kill(os.getpid(), signal.SIGINT)
for _ in range(1000):
    pass
LOADED = True
"""


def test_ctrl_c_inside_a_lazy_import_comes_after_the_module_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "interrupted_mod.py").write_text(BODY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "interrupted_mod", raising=False)
    with pytest.raises(KeyboardInterrupt):
        import_module("interrupted_mod")
    assert sys.modules["interrupted_mod"].LOADED is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert LazyModule("interrupted_mod").LOADED is True  # loaded: a lookup, no signal
