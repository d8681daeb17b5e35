"""A long build on a log: a heartbeat at most every N seconds, never every progress line;
a failed build shows the tail and keeps the full log in the file its error names."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.cli.heartbeat import (
    TAIL_LINES,
    Heartbeat,
    build_display,
    build_output,
    heartbeat_every,
)
from envforge.errors import BuildFailed, InvalidInput


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _beat(tmp_path: Path, every: float = 30.0) -> tuple[Heartbeat, io.StringIO, FakeClock]:
    out = io.StringIO()
    clock = FakeClock()
    beat = Heartbeat(out, every=every, log_dir=tmp_path / "logs", clock=clock, ticker=False)
    return beat, out, clock


def _feed(beat: Heartbeat, clock: FakeClock, lines: list[tuple[float, str]]) -> None:
    """The fake line source: each line arrives at its second since the build began."""
    start = clock.now
    for at, line in lines:
        clock.now = start + at
        beat(line)


def _failing_build(
    beat: Heartbeat,
    clock: FakeClock,
    lines: list[tuple[float, str]],
    error: BaseException | None = None,
) -> None:
    with build_output(beat):
        _feed(beat, clock, lines)
        raise error or BuildFailed(
            "step RUN uv pip install failed (BuildKit): exit 1", hint="see above"
        )


BUILDKIT = [
    (0.5, "#1 [internal] load build definition from Dockerfile"),
    (1.0, "#5 [build 2/6] RUN apt-get update"),
    *(
        (1.0 + i * 0.5, f"#5 {i:.2f} Get:{i} http://deb.example/ubuntu jammy InRelease")
        for i in range(1, 60)
    ),
    (31.0, "#5 DONE 30.1s"),
    (32.0, "#6 [build 3/6] RUN uv pip install torch"),
    (40.0, "#6 8.123 Downloading torch (2.1GiB)"),
    (62.5, "#6 30.500 Prepared 12 packages in 30.2s"),
    (63.0, "#6 DONE 31.0s"),
]


def test_a_log_gets_heartbeats_not_every_line(tmp_path: Path) -> None:
    beat, out, clock = _beat(tmp_path)
    _feed(beat, clock, BUILDKIT)
    beat.finish()
    shown = out.getvalue().splitlines()
    # 65 lines over 63 s: each step's first line once, one beat per 30 s
    assert len(shown) == 4
    assert all(line.startswith("envforge: [") for line in shown)
    assert shown[0] == "envforge: [    1s] [build 2/6] RUN apt-get update"
    assert shown[2] == "envforge: [   32s] [build 3/6] RUN uv pip install torch"
    first, second = shown[1], shown[3]
    assert "30s]" in first
    assert "[build 2/6] RUN apt-get update" in first
    assert "Get:58" in first  # the last meaningful line, without BuildKit's "#5 30.50"
    assert "#5 DONE" not in first
    assert "62s]" in second
    assert "[build 3/6] RUN uv pip install torch" in second
    assert "Prepared 12 packages" in second


def test_no_beat_before_the_interval(tmp_path: Path) -> None:
    beat, out, clock = _beat(tmp_path, every=10)
    _feed(beat, clock, [(1.0, "Step 1/3 : FROM ubuntu:22.04"), (9.9, "Collecting numpy")])
    step = "envforge: [    1s] Step 1/3 : FROM ubuntu:22.04"
    assert out.getvalue().splitlines() == [step]  # the step once; no beat yet
    clock.now += 0.2  # 10.1 s: a silent step beats when the ticker ticks
    beat.tick()
    assert out.getvalue().splitlines() == [
        step,
        "envforge: [   10s] Step 1/3 : FROM ubuntu:22.04 | Collecting numpy",
    ]
    beat.tick()  # not due again yet
    beat.finish()
    assert len(out.getvalue().splitlines()) == 2


def test_a_stage_said_names_the_step(tmp_path: Path) -> None:
    beat, out, clock = _beat(tmp_path)
    beat.step("installing 12 requirement(s) with uv")
    clock.now += 45
    beat.tick()
    assert out.getvalue() == "envforge: [   45s] installing 12 requirement(s) with uv\n"


def test_zero_streams_every_line(tmp_path: Path) -> None:
    beat, out, clock = _beat(tmp_path, every=0)
    _feed(beat, clock, [(0.0, "Step 1/2 : FROM x"), (0.1, " ---> abc")])
    beat.tick()
    beat.finish()
    assert out.getvalue() == "Step 1/2 : FROM x\n ---> abc\n"  # every line, as it came


def test_a_success_removes_the_log(tmp_path: Path) -> None:
    beat, _out, clock = _beat(tmp_path)
    with build_output(beat):
        _feed(beat, clock, BUILDKIT)
    assert beat.log_path is not None
    assert not beat.log_path.exists()


def test_a_failure_shows_the_tail_and_names_the_kept_log(tmp_path: Path) -> None:
    beat, out, clock = _beat(tmp_path)
    lines = [(i * 0.1, f"#9 {i * 0.1:.3f} line {i}") for i in range(100)]
    with pytest.raises(BuildFailed) as raised:
        _failing_build(beat, clock, lines)
    log = beat.log_path
    assert log is not None
    assert log.is_file()
    assert log.parent == tmp_path / "logs"
    assert len(log.read_text(encoding="utf-8").splitlines()) == 100  # every line kept
    assert str(log) in (raised.value.hint or "")
    assert "see above" in (raised.value.hint or "")
    text = out.getvalue()
    assert f"line {100 - TAIL_LINES}" in text
    assert "line 99" in text
    assert f"line {100 - TAIL_LINES - 1}\n" not in text


def test_another_error_removes_the_log(tmp_path: Path) -> None:
    beat, out, clock = _beat(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        _failing_build(beat, clock, [(0.0, "Step 1/2 : FROM x")], KeyboardInterrupt())
    assert beat.log_path is not None
    assert not beat.log_path.exists()
    assert out.getvalue() == "envforge: [    0s] Step 1/2 : FROM x\n"  # the step; no tail


def test_a_failure_before_any_line_says_nothing_more(tmp_path: Path) -> None:
    beat, out, _clock = _beat(tmp_path)
    with pytest.raises(BuildFailed) as raised, build_output(beat):
        raise BuildFailed("no engine", hint="start it")
    assert raised.value.hint == "start it"
    assert out.getvalue() == ""
    assert beat.log_path is None


def test_the_interval_from_the_environment() -> None:
    assert heartbeat_every({}) == 30.0
    assert heartbeat_every({"ENVFORGE_HEARTBEAT": "5"}) == 5.0
    assert heartbeat_every({"ENVFORGE_HEARTBEAT": "0"}) == 0.0
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(InvalidInput, match="ENVFORGE_HEARTBEAT"):
            heartbeat_every({"ENVFORGE_HEARTBEAT": bad})


def test_a_terminal_keeps_the_live_display() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    display = build_display(Tty())
    assert not isinstance(display, Heartbeat)
    pipe = build_display(io.StringIO())
    assert isinstance(pipe, Heartbeat)
    pipe.finish()


def test_the_ticker_thread_beats_a_silent_build(tmp_path: Path) -> None:
    out = io.StringIO()
    clock = FakeClock()
    beat = Heartbeat(out, every=5, log_dir=tmp_path, clock=clock)
    beat.step("installing with uv")
    clock.now += 6
    for _ in range(40):  # the thread ticks once a second
        if out.getvalue():
            break
        time.sleep(0.1)
    beat.finish()
    assert "installing with uv" in out.getvalue()


def test_a_build_refused_before_it_starts_leaves_no_ticker_running(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Options refused after the recipe loaded (exit 2) come before the heartbeat's
    ticker starts: no thread outlives the command to write on a closed stream."""

    def tickers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if "_tick_loop" in t.name}

    before = tickers()
    code = main(["build", "gfx1030", "--backend", "venv", "--no-health", "--require-healthy"])
    assert code == 2
    assert "--require-healthy" in capsys.readouterr().err
    assert tickers() == before
