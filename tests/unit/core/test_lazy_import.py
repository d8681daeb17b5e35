"""A lazy import holds Ctrl-C back until the module is loaded (:func:`import_module`): a
``KeyboardInterrupt`` inside an import can be swallowed by the import lock's callback, and
the command would go on."""

from __future__ import annotations

import builtins
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from envforge.core.lazy import LazyModule, import_module, imports_hold_ctrl_c
from tests.helpers.paths import ROOT

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


def test_an_import_statement_inside_the_guard_comes_after_the_module_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``imports_hold_ctrl_c`` (the CLI's commands run inside it): the same for a plain
    ``import`` statement, and the previous ``__import__`` is back afterwards."""
    (tmp_path / "interrupted_stmt.py").write_text(BODY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "interrupted_stmt", raising=False)
    before = builtins.__import__
    with pytest.raises(KeyboardInterrupt), imports_hold_ctrl_c():
        import interrupted_stmt  # type: ignore[import-not-found]  # noqa: F401
    assert sys.modules["interrupted_stmt"].LOADED is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert builtins.__import__ is before


#: Records each ``import`` that loads a module while Ctrl-C would raise (the default
#: handler), during a command run the way ``python -m envforge`` runs it.
_RECORDER = """\
import builtins, json, signal, sys
real = builtins.__import__
seen = []
def record(name, globals=None, locals=None, fromlist=(), level=0):
    key = name if level == 0 else f"{(globals or {}).get('__package__')}.{name}"
    if key not in sys.modules and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        seen.append(key)
    return real(name, globals, locals, fromlist, level)
args = sys.argv[1:]
sys.argv, sys.orig_argv = ["envforge", *args], [sys.executable, "-m", "envforge", *args]
import envforge
from envforge.entry import main
builtins.__import__ = record
try:
    main()
except SystemExit:
    pass
sys.stderr.write("\\nUNGUARDED " + json.dumps(seen) + "\\n")
"""


@pytest.mark.parametrize(
    "args", [["list"], ["show", "cpu"], ["render", "cpu", "--output", "OUT"]], ids=" ".join
)
def test_a_commands_deferred_imports_never_run_open_to_ctrl_c(
    args: list[str], tmp_path: Path
) -> None:
    """With cold caches (the recipe loader, the table's parser and render's templates are
    imported while the command runs): no module loads while Ctrl-C would raise inside
    it. (Before the guard: 58 such imports in ``list``, 121 in ``render``.)"""
    env = {
        **os.environ,
        "ENVFORGE_HOME": str(tmp_path / "home"),
        "ENVFORGE_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PYTHONPATH": str(ROOT),
    }
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    done = subprocess.run(
        [sys.executable, "-c", _RECORDER, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    marker = [ln for ln in done.stderr.splitlines() if ln.startswith("UNGUARDED ")]
    assert marker, done.stderr[-3000:]
    assert json.loads(marker[-1][len("UNGUARDED ") :]) == []
    assert done.returncode == 0, done.stderr[-3000:]
