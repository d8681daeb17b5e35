"""Engine selection like the docker CLI: DOCKER_HOST, DOCKER_CONTEXT, current context."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from envforge.backends.docker.engine import connect, resolve_engine
from envforge.errors import Unavailable


def _context(config_dir: Path, name: str, host: str) -> None:
    meta = config_dir / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(
        json.dumps(
            {
                "Name": name,
                "Metadata": {},
                "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": False}},
            }
        )
    )


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    _context(tmp_path, "remote", "unix:///nonexistent/remote.sock")
    (tmp_path / "config.json").write_text("{}")  # the SDK finds contexts next to it
    return tmp_path


def test_docker_host_wins(config_dir: Path) -> None:
    (config_dir / "config.json").write_text(json.dumps({"currentContext": "remote"}))
    address = resolve_engine({"DOCKER_HOST": "tcp://10.0.0.1:2376"})
    assert address.base_url is None  # the SDK reads DOCKER_HOST itself
    assert address.source == "DOCKER_HOST=tcp://10.0.0.1:2376"


def test_current_context_is_used(config_dir: Path) -> None:
    (config_dir / "config.json").write_text(json.dumps({"currentContext": "remote"}))
    address = resolve_engine({})
    assert address.base_url == "unix:///nonexistent/remote.sock"
    assert address.source == "docker context remote"
    with pytest.raises(Unavailable, match="docker context remote"):
        connect({})


def test_docker_context_variable_and_default(config_dir: Path) -> None:
    assert resolve_engine({"DOCKER_CONTEXT": "remote"}).source == "docker context remote"
    assert resolve_engine({}).base_url is None  # no currentContext: default socket
    with pytest.raises(Unavailable, match="does not exist"):
        resolve_engine({"DOCKER_CONTEXT": "nosuch"})
