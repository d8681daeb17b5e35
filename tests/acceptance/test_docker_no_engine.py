"""No engine answers: exit 4 with one line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import Envforge

pytestmark = pytest.mark.engine

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.mark.parametrize(
    "args",
    [
        ("build", "cpu"),
        ("certify", "cpu"),
        ("publish", "cpu", "--registry", "127.0.0.1:5000"),
        ("verify", "--pull", "127.0.0.1:5000/cpu:x"),
        ("pull", "127.0.0.1:5000/cpu:x"),
        # Without --backend, shell falls back to the venv backend when no engine answers.
        ("shell", "cpu", "--backend", "docker", "--", "true"),
    ],
)
def test_no_engine_exits_4_without_traceback(
    envforge: Envforge, tmp_path: Path, args: tuple[str, ...]
) -> None:
    done = envforge(*args, extra_env=NO_ENGINE, cwd=tmp_path, timeout=60)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no Docker engine answers" in lines[0]


def test_no_certify_cannot_take_a_certified_name(envforge: Envforge, tmp_path: Path) -> None:
    """Refused before any engine is needed: the envforge/ namespace is for certified images."""
    done = envforge(
        "build",
        "cpu",
        "--no-certify",
        "--tag",
        "envforge/cpu:mine",
        extra_env=NO_ENGINE,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--no-certify" in done.stderr
    assert "Traceback" not in done.stderr
