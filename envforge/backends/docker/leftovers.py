"""What a killed envforge leaves on the Docker path, and how it goes away.

Ctrl-C, SIGTERM and SIGHUP unwind (``finally`` blocks remove containers and folders). A
SIGKILL runs nothing, so:

* every container envforge creates carries :data:`OWNER_LABEL` naming the envforge process
  (``<boot id>:<pid namespace>:<pid>.<start time>``), and every build context folder in
  TMPDIR is called ``envforge-build-<pid>.<start time>-*``;
* :func:`bound` binds a container's lifetime to this process: a watcher process
  (:mod:`envforge.backends.docker.reaper`, a session of its own) removes the container
  once this process ends without having removed it itself;
* :func:`~envforge.backends.docker.containers.sweep` runs whenever envforge connects to
  an engine: it removes the containers whose owner is gone (same boot and pid namespace
  as this process, owner pid no longer running with that start time) and the build
  contexts whose owner is gone. Containers of another host or container (a shared or
  remote engine) and of a running envforge are
  left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from envforge.core import proc

#: The label naming the envforge process a container belongs to.
OWNER_LABEL = "io.envforge.owner"
#: Build context folders (and BuildKit's ``.iid`` file beside them) in TMPDIR.
CONTEXT_PREFIX = "envforge-build-"
_OWNED_CONTEXT = re.compile(r"^envforge-build-(\d+)\.(\d+)-")
#: A context without an owner in its name (an older envforge) is swept after a day.
UNOWNED_MAX_AGE = 24 * 3600.0

Running = Callable[[int, "int | None"], bool]


@dataclass(frozen=True)
class Owner:
    """An envforge process: the boot and pid namespace it runs in, its pid and start time."""

    boot: str
    pidns: str
    pid: int
    start: int

    @property
    def label(self) -> str:
        return f"{self.boot}:{self.pidns}:{self.pid}.{self.start}"

    @classmethod
    def parse(cls, value: str) -> Owner | None:
        found = re.fullmatch(r"([0-9a-f-]{1,64}):(\d{1,20}):(\d{1,10})\.(\d{1,20})", value)
        if found is None:
            return None
        return cls(found.group(1), found.group(2), int(found.group(3)), int(found.group(4)))


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(100).strip()
    except OSError:
        return ""


def this_process() -> Owner | None:
    """This process as an :class:`Owner`; None where /proc does not say (then nothing is
    labelled as ours and nothing is swept)."""
    boot = _read_small("/proc/sys/kernel/random/boot_id")
    try:
        pidns = re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
    except OSError:
        pidns = ""
    start = proc.start_time(os.getpid())
    if not boot or not pidns or start is None:
        return None
    return Owner(boot, pidns, os.getpid(), start)


def owner_labels() -> dict[str, str]:
    """The labels that name this process as a container's owner (none where unknown)."""
    me = this_process()
    return {OWNER_LABEL: me.label} if me is not None else {}


def stale(value: str, here: Owner, running: Running = proc.is_running) -> bool:
    """Whether a container labelled ``value`` belongs to an envforge that is gone: one of
    this boot and pid namespace whose pid no longer runs with that start time."""
    owner = Owner.parse(value)
    if owner is None or (owner.boot, owner.pidns) != (here.boot, here.pidns):
        return False
    if owner.pid == here.pid:
        return owner.start != here.start
    return not running(owner.pid, owner.start)


def context_prefix() -> str:
    """The name prefix of this process's build context folders."""
    return f"{CONTEXT_PREFIX}{os.getpid()}.{proc.start_time(os.getpid()) or 0}-"


def stale_context(name: str, age: float, running: Running = proc.is_running) -> bool:
    """Whether a TMPDIR entry called ``name`` is a build context an envforge left."""
    if not name.startswith(CONTEXT_PREFIX):
        return False
    owned = _OWNED_CONTEXT.match(name)
    if owned is None:
        return age > UNOWNED_MAX_AGE
    pid, start = int(owned.group(1)), int(owned.group(2))
    if pid == os.getpid():
        return False
    return not running(pid, start or None)


def sweep_contexts(parent: Path | None = None) -> list[Path]:
    """Remove the build contexts in ``parent`` (TMPDIR) whose envforge is gone."""
    where = Path(tempfile.gettempdir()) if parent is None else parent
    removed: list[Path] = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid != os.getuid() or not stale_context(entry.name, now - info.st_mtime):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with suppress(OSError):
                os.unlink(entry.path)
        removed.append(Path(entry.path))
    return removed


@contextmanager
def bound(name: str) -> Iterator[None]:
    """While the block runs, the container called ``name`` (created inside it, or about
    to be) is removed by a watcher process if this process ends without leaving the block
    (SIGKILL). The watcher talks to the engine this process's environment names."""
    argv = [sys.executable, "-m", "envforge.backends.docker.reaper", name]
    with proc.watcher(argv):
        yield
