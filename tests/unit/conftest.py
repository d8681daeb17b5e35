"""Unit tests never talk to a Docker engine (cibuildwheel's ``mock_protection``).

Every way envforge makes an SDK client (``docker.DockerClient`` and its ``from_env``,
``docker.from_env``, ``docker.APIClient``), and so ``envforge.backends.docker.engine.connect``
once it would reach an engine, fails the test instead. Unit tests use the fake engine in
``tests/helpers/fake_engine.py``; real-engine tests are acceptance tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import docker
import docker.client
import pytest

MESSAGE = (
    "unit tests never talk to an engine: pass tests.helpers.fake_engine.FakeEngine as the "
    "client, or write an acceptance test"
)


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    pytest.fail(MESSAGE, pytrace=True)


class _NoEngine:
    """Stands in for ``docker.DockerClient``: constructing it fails the test."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    @classmethod
    def from_env(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse()


@pytest.fixture(autouse=True)
def private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unit tests keep envforge's state (caches, certificates) out of the user's home,
    and read no settings file of the user's (envforge.core.settings)."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path_factory.mktemp("envforge-home")))
    monkeypatch.setenv("ENVFORGE_CACHE_DIR", str(tmp_path_factory.mktemp("envforge-cache")))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("envforge-config")))
    monkeypatch.delenv("ENVFORGE_CONFIG", raising=False)


@pytest.fixture(autouse=True)
def plenty_of_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor's findings must not depend on this machine's free space (the disk test
    puts the real reading back)."""
    from envforge.host import doctor

    monkeypatch.setattr(doctor, "free_bytes", lambda _path: 1 << 50)


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (docker, docker.client):
        monkeypatch.setattr(module, "DockerClient", _NoEngine)
        monkeypatch.setattr(module, "from_env", _refuse)
    monkeypatch.setattr(docker, "APIClient", _NoEngine)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site folder first on ``sys.path``; the modules imported from it are forgotten
    afterwards (the probe worker's package steps import what a test puts there)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        del sys.modules[name]
