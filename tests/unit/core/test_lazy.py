"""``LazyModule``: the module is imported at the first attribute read, not before, and
each read sees the module as it is then."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envforge.core import lazy
from envforge.core.lazy import LazyModule
from tests.helpers import paths


def test_the_module_is_imported_at_the_first_attribute_read_only() -> None:
    script = (
        "import sys\n"
        "from envforge.core.lazy import LazyModule\n"
        "m = LazyModule('envforge.core.archives')\n"
        "before = 'envforge.core.archives' in sys.modules\n"
        "m.__name__\n"
        "print(before, 'envforge.core.archives' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=paths.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]


def test_each_read_sees_the_module_as_it_is_then(monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = LazyModule("envforge.core.lazy")
    assert proxy.LazyModule is LazyModule
    monkeypatch.setattr(lazy, "PATCHED", "by the test", raising=False)
    assert proxy.PATCHED == "by the test"


def test_a_missing_attribute_or_module_raises_as_an_import_would() -> None:
    with pytest.raises(AttributeError):
        _ = LazyModule("envforge.core.lazy").no_such_name
    with pytest.raises(ModuleNotFoundError):
        _ = LazyModule("envforge.no_such_module").anything
    assert repr(LazyModule("envforge.core.lazy")) == "LazyModule('envforge.core.lazy')"
