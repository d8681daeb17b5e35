"""Build progress for logs: when stderr is not a terminal (CI, ``| tee``), a build prints
each step's first line once (``Step 3/9 : RUN ...``, BuildKit's ``[build 3/9] RUN ...``)
and, during a long step, one heartbeat line at most every ``ENVFORGE_HEARTBEAT`` seconds
(default 30) -- the step, the time since the build began and the last meaningful line --
instead of every BuildKit or uv progress line. The lines come printable (the backend's
``plain``: envforge/backends/docker/buildkit_lines.py). Every line still goes to a log
file; a build that fails shows the log's tail and names the file (kept), a build that ends
otherwise removes it.

On a terminal :class:`~envforge.cli.display.BuildDisplay` is used as before
(:func:`build_display` picks). ``ENVFORGE_HEARTBEAT=0`` streams every line to a log too.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, TextIO

from envforge.cli.display import BuildDisplay
from envforge.core import paths
from envforge.errors import BuildFailed, InvalidInput, Unavailable, clip

HEARTBEAT_ENV = "ENVFORGE_HEARTBEAT"
DEFAULT_EVERY = 30.0
#: Lines of the log shown when a build fails.
TAIL_LINES = 30

Clock = Callable[[], float]

#: A step's first line: the classic builder's ``Step 3/9 : RUN ...``, BuildKit's
#: ``#7 [build 3/9] RUN ...``, a stage envforge names (``installing ... with uv``).
_STEP_RES = (
    re.compile(r"^(Step \d+/\d+ : .*)$"),
    re.compile(r"^#\d+ (\[[^\]]*\d+/\d+\] .*)$"),
)
#: BuildKit's line prefix (``#7 12.34 ``) and its bookkeeping lines (no news in them).
_BUILDKIT_PREFIX = re.compile(r"^#\d+ (?:\d+\.\d+ )?")
_NOISE = re.compile(r"^(?:#\d+ (?:DONE|CACHED)\b.*|---> .*|Removing intermediate container .*)$")


def heartbeat_every(environ: Mapping[str, str] | None = None) -> float:
    """``ENVFORGE_HEARTBEAT`` seconds (exit 2 when it is not a number >= 0)."""
    env = os.environ if environ is None else environ
    raw = env.get(HEARTBEAT_ENV, "").strip()
    if not raw:
        return DEFAULT_EVERY
    try:
        every = float(raw)
    except ValueError:
        every = -1.0
    if not every >= 0 or every == float("inf"):
        raise InvalidInput(
            f"{HEARTBEAT_ENV}={raw!r} is not a number of seconds",
            hint=f"e.g. {HEARTBEAT_ENV}=60 (0: every build line)",
        )
    return every


class Heartbeat:
    """A build's output for a log (a ``LineSink``): see the module docstring.

    ``clock`` and ``ticker`` are for tests: with ``ticker`` False no thread calls
    :meth:`tick` (a silent step still beats when the thread does, once a second)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        every: float = DEFAULT_EVERY,
        log_dir: Path | None = None,
        clock: Clock = time.monotonic,
        ticker: bool = True,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.clock = clock
        self.started = clock()
        self._last_beat = self.started
        self._step = "starting"
        self._last = ""
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._lock = threading.Lock()
        self._log_dir = log_dir
        self.log_path: Path | None = None
        self._log: IO[str] | None = None
        self._keep = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if ticker and every > 0:
            self._thread = threading.Thread(target=self._tick_loop, daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ the line sink

    def __call__(self, line: str) -> None:
        with self._lock:
            self._record(line)
            if self.every == 0:
                self._write(line)
                return
            self._note(line)
            self._beat_if_due()

    def step(self, text: str) -> None:
        """A stage the backend said (``installing 12 requirement(s) with uv``): the step
        the next heartbeat names."""
        with self._lock:
            self._step = " ".join(text.split())

    def tick(self) -> None:
        """A heartbeat when one is due (the thread calls this; tests call it)."""
        with self._lock:
            if self.every > 0:
                self._beat_if_due()

    def close(self) -> None:
        """Stop the ticker and close the log (idempotent; the log stays until
        :meth:`finish`)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def finish(self) -> None:
        """The build is over: remove the log unless :meth:`failed` kept it."""
        self.close()
        if self.log_path is not None and not self._keep:
            self.log_path.unlink(missing_ok=True)

    def failed(self, exc: BuildFailed | Unavailable) -> None:
        """Show the log's tail and keep the log; ``exc``'s hint names the file."""
        self.close()
        if not self._tail:
            return
        self._keep = True
        shown = list(self._tail)
        self.stream.write(f"envforge: the build's last {len(shown)} line(s):\n")
        for line in shown:
            self.stream.write(f"  {line}\n")
        self.stream.flush()
        if self.log_path is not None:
            exc.hint = f"{exc.hint}; " if exc.hint else ""
            exc.hint += f"the full build log: {self.log_path}"

    # ------------------------------------------------------------------ inside

    def _record(self, line: str) -> None:
        self._tail.append(line)
        if self._log is None and self.log_path is None:
            self._open_log()
        if self._log is not None:
            try:
                self._log.write(line + "\n")
            except OSError:
                self._log = None

    def _open_log(self) -> None:
        folder = self._log_dir if self._log_dir is not None else paths.state_dir() / "logs"
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        path = folder / f"build-{stamp}-{os.getpid()}.log"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._log = open(path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
        except OSError:
            return  # no log file: the tail is still shown
        self.log_path = path

    def _note(self, line: str) -> None:
        for pattern in _STEP_RES:
            found = pattern.match(line)
            if found:
                step = clip(found.group(1), 100)
                if step != self._step:  # each step once, as it starts
                    self._step = step
                    self._last = ""
                    self._write(f"envforge: [{self.clock() - self.started:5.0f}s] {step}")
                return
        if _NOISE.match(line):
            return
        text = " ".join(_BUILDKIT_PREFIX.sub("", line, count=1).split())
        if text:
            self._last = text

    def _beat_if_due(self) -> None:
        now = self.clock()
        if now - self._last_beat < self.every:
            return
        self._last_beat = now
        elapsed = now - self.started
        last = f" | {clip(self._last, 120)}" if self._last else ""
        self._write(f"envforge: [{elapsed:5.0f}s] {self._step}{last}")

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def _tick_loop(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()


def build_display(stream: TextIO | None = None) -> BuildDisplay | Heartbeat:
    """A terminal's live display, else the heartbeat for logs."""
    out = stream if stream is not None else sys.stderr
    if out.isatty():
        return BuildDisplay(out, tty=True)
    return Heartbeat(out, every=heartbeat_every())


@contextlib.contextmanager
def build_output(display: BuildDisplay | Heartbeat) -> Iterator[None]:
    """Around a build: a failed one shows the heartbeat's log tail and keeps its file."""
    if not isinstance(display, Heartbeat):
        try:
            yield
        finally:
            display.close()
        return
    try:
        yield
    except (BuildFailed, Unavailable) as exc:
        display.failed(exc)
        raise
    finally:
        display.finish()
