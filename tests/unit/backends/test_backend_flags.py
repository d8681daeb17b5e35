"""A backend's flags come from a light module of their own: a command line is parsed
without importing the backends it does not use (``shell --backend venv`` never loads the
Docker SDK), and the flags are the ones the backend itself declares."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from envforge.backends import BACKENDS, _Backends
from envforge.backends.base import BackendOption, unique_options


def test_the_flags_modules_are_the_backends_own_flags() -> None:
    for name in ("docker", "venv"):
        assert BACKENDS[name].cli_options() == BACKENDS.cli_options(name)  # type: ignore[attr-defined]


def test_reading_the_flags_imports_no_backend() -> None:
    code = (
        "import sys\n"
        "from envforge.backends import BACKENDS\n"
        "from envforge.backends.base import unique_options\n"
        "flags = [o.flag for o in unique_options(BACKENDS, 'shell')]\n"
        "assert '--python' in flags and '--shm-size' in flags, flags\n"
        "loaded = [m for m in ('envforge.backends.docker', 'envforge.backends.venv')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_backend_registered_in_place_of_one_brings_its_own_flags() -> None:
    mine = BackendOption("--mine", "mine", "a fake backend's flag", ("shell",))
    fake = SimpleNamespace(cli_options=lambda: (mine,))
    backends = _Backends(
        {"docker": "envforge.backends.docker"}, flags={"docker": "envforge.backends.flags.docker"}
    )
    backends["docker"] = fake
    assert unique_options(backends, "shell") == [mine]
