"""The engine's transfers (pull for ``pull``/``verify --pull``, push for ``publish``) are
bounded by their progress (envforge.core.net.follow): no progress for ``--deadline`` /
``ENVFORGE_NET_DEADLINE`` seconds ends them, exit 4 naming the image; the engine's retry
countdowns are no progress. The real engine against a registry on 127.0.0.1 that stops
answering is in tests/acceptance/test_net_hostile.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from envforge.backends.docker.images import pull, push
from envforge.cli import main
from envforge.core.net import NetError, NotAnswered, follow
from envforge.errors import ExitCode
from tests.helpers.fake_engine import FakeEngine

REF = "127.0.0.1:5000/team/cpu:v1"


def _stalled(
    first: list[dict[str, Any]], *, every: float = 0.0, then: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """``first``, then ``then`` every ``every`` seconds (or nothing) until the test ends."""
    yield from first
    end = time.monotonic() + 30
    while time.monotonic() < end:
        time.sleep(every or 0.05)
        if then is not None:
            yield then


def test_follow_yields_every_item_and_ends_with_the_stream() -> None:
    assert list(follow(lambda: iter(range(5)), stall=1.0, what="x")) == [0, 1, 2, 3, 4]


def test_follow_raises_what_the_stream_raised() -> None:
    def broken() -> Iterator[int]:
        yield 1
        raise OSError("engine went away")

    got: list[int] = []
    with pytest.raises(OSError, match="engine went away"):
        got.extend(follow(broken, stall=1.0, what="x"))
    assert got == [1]


def test_a_stalled_stream_is_a_timeout_naming_it_at_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(NetError) as info:
        list(follow(lambda: _stalled([{"status": "Preparing"}]), stall=0.5, what="push of X"))
    took = time.monotonic() - started
    assert info.value.kind == "timeout"
    assert info.value.url == "push of X"
    assert "no progress for 0.5 s" in info.value.reason
    assert 0.5 <= took < 5  # a hang guard: the stream itself never ends


def test_items_that_are_no_progress_do_not_hold_the_deadline() -> None:
    retry = {"status": "Retrying in 5 seconds"}
    stream = follow(
        lambda: _stalled([], every=0.05, then=retry),
        stall=0.5,
        what="x",
        moved=lambda item: item is not retry,
    )
    with pytest.raises(NetError, match=r"no progress for 0\.5 s"):
        list(stream)


def test_ctrl_c_is_not_held_by_the_stream() -> None:
    """The caller waits in slices: an interrupt raised in it ends the wait at once."""
    stream = follow(lambda: _stalled([]), stall=60, what="x")
    started = time.monotonic()
    import _thread

    threading.Timer(0.3, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        next(stream)
    assert time.monotonic() - started < 5


def test_a_push_that_stops_moving_is_exit_4_naming_the_image() -> None:
    engine = FakeEngine()
    retry = {"status": "Retrying in 3 seconds", "id": "a880"}
    engine.api.push = (  # type: ignore[method-assign]
        lambda *_a, **_k: _stalled([{"status": "Preparing", "id": "a880"}], every=0.05, then=retry)
    )
    with pytest.raises(NotAnswered) as info:
        push(engine, REF, stall=0.5)
    assert info.value.exit_code is ExitCode.UNAVAILABLE
    assert f"push of {REF} failed: timeout: no progress for 0.5 s" in str(info.value)


def test_a_pull_that_stops_moving_is_exit_4_naming_the_image() -> None:
    engine = FakeEngine()
    engine.api.pull = (  # type: ignore[method-assign]
        lambda *_a, **_k: _stalled([{"status": "Pulling from team/cpu"}])
    )
    with pytest.raises(NotAnswered) as info:
        pull(engine, REF, stall=0.5)
    assert info.value.exit_code is ExitCode.UNAVAILABLE
    assert f"cannot pull {REF}: timeout: no progress for 0.5 s" in str(info.value)


def test_an_error_line_of_the_pull_is_exit_4_naming_it() -> None:
    engine = FakeEngine()
    engine.api.pull = (  # type: ignore[method-assign]
        lambda *_a, **_k: iter([{"status": "Pulling"}, {"error": "manifest unknown"}])
    )
    with pytest.raises(NotAnswered.__mro__[1]) as info:
        pull(engine, REF, stall=5)
    assert "cannot pull 127.0.0.1:5000/team/cpu:v1: manifest unknown" in str(info.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["pull", REF],
        ["verify", "--pull", REF],
        ["verify", REF],
        ["publish", "cpu", "--registry", "127.0.0.1:5000"],
    ],
)
def test_a_bad_deadline_variable_is_exit_2_before_anything_is_asked(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from envforge.backends.docker import engine as engine_module

    asked: list[str] = []
    monkeypatch.setattr(engine_module, "connect", lambda *_a, **_k: asked.append("engine"))
    monkeypatch.setenv("ENVFORGE_NET_DEADLINE", "soon")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "ENVFORGE_NET_DEADLINE='soon' is not a number of seconds" in err
    assert len(err.strip().splitlines()) == 1
    assert asked == []


class _Versioned:
    """An engine client whose API answers only /version (``api.version()``)."""

    def __init__(self, version: object) -> None:
        self.api = self
        self._version = version

    def version(self) -> object:
        if isinstance(self._version, Exception):
            raise self._version
        return self._version


def test_a_push_through_podman_may_be_silent_longer_than_through_docker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Podman says nothing while it compresses a layer: its push gets the deadline times
    PODMAN_PUSH_STALL_FACTOR; Docker, or an engine that does not say, the deadline."""
    from envforge.backends.docker import push as push_module

    monkeypatch.delenv("ENVFORGE_NET_DEADLINE", raising=False)
    podman = _Versioned({"Components": [{"Name": "Podman Engine"}]})
    docker_engine = _Versioned({"Components": [{"Name": "Engine"}]})
    silent = _Versioned(OSError("no answer"))
    factor = push_module.PODMAN_PUSH_STALL_FACTOR
    assert factor > 1
    assert push_module._push_stall(podman, 30.0) == 30.0 * factor  # type: ignore[arg-type]
    assert push_module._push_stall(docker_engine, 30.0) == 30.0  # type: ignore[arg-type]
    assert push_module._push_stall(silent, 30.0) == 30.0  # type: ignore[arg-type]
