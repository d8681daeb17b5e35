"""Collect an environment on this host: the collector runs with the target interpreter
(under a deadline, :mod:`envforge.core.proc`), the shared objects are read here.

:func:`resolve_python` turns ``--python PATH`` or a virtualenv folder into an
interpreter; :func:`collect_local` runs :mod:`envforge.audit.inventory` with it and
:func:`scan_all` reads each shared object's ELF facts (:mod:`envforge.audit.elfscan`).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path
from shutil import which

from envforge.audit.elfscan import ElfFacts, scan
from envforge.audit.factcache import cached_scan
from envforge.audit.model import Collected, Inventory, inventory_from_dict
from envforge.core import proc
from envforge.core.jsonlimits import BadJSON, loads
from envforge.errors import InvalidInput, Unavailable, printable

#: Seconds the collector may take (it reads metadata and walks the site folders).
COLLECT_TIMEOUT = 120.0
#: The most the collector may print (a large CUDA environment prints about 1 MB).
MAX_INVENTORY_BYTES = 64 * 1024 * 1024
#: Files from which the ELF facts are read by a pool of processes.
PARALLEL_FROM = 64


def collector_source() -> str:
    """The collector's text (stdlib only), run with ``python -I -B -c``."""
    return resources.files("envforge.audit").joinpath("inventory.py").read_text(encoding="utf-8")


def venv_python(folder: Path) -> Path:
    """The interpreter of the virtualenv (or conda prefix) at ``folder``; exit 2 if none."""
    for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise InvalidInput(
        f"{printable(str(folder))} is a folder but not a virtualenv (no bin/python)",
        hint="pass a virtualenv folder, --python PATH, or an image reference",
    )


def resolve_python(python: str) -> str:
    """``python`` as a path that can be run; exit 4 when it is not there."""
    found = which(python) if os.sep not in python else python
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise Unavailable(
            f"interpreter {printable(python)!r} not found or not executable",
            hint="pass --python PATH to a Python interpreter (e.g. VENV/bin/python)",
        )
    return found


def parse_inventory(text: str, where: str) -> Inventory:
    """The collector's output line as an :class:`Inventory`; exit 4 when it is not one."""
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith("{")), "")
    try:
        data = loads(line, max_bytes=MAX_INVENTORY_BYTES)
    except BadJSON as exc:
        raise Unavailable(
            f"the audit's collector in {where} printed no inventory: {exc}",
            hint="run the interpreter by hand: is it Python 3.9 or newer?",
        ) from None
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise Unavailable(f"the audit's collector in {where} printed an unknown inventory")
    return inventory_from_dict(data)


def collect_local(
    python: str, timeout: float = COLLECT_TIMEOUT, env: Mapping[str, str] | None = None
) -> Inventory:
    """Run the collector with ``python`` (isolated: no PYTHONPATH, no user site, as
    ``python -I``; ``env`` added to this process's environment) and read what it found."""
    exe = resolve_python(python)
    environ = None if not env else {**os.environ, **env}
    try:
        # -B: the audit never writes into what it audits (bytecode of site-packages
        # modules a .pth imports would change a certified venv)
        done = proc.run([exe, "-I", "-B", "-c", collector_source()], timeout=timeout, env=environ)
    except OSError as exc:
        raise Unavailable(
            f"cannot run {printable(exe)}: {exc.strerror or exc}",
            hint="pass --python PATH to a working interpreter",
        ) from None
    if done.timed_out:
        raise Unavailable(
            f"the audit's collector in {printable(exe)} ran past {timeout:g} s",
            hint="is the interpreter's file system responding?",
        )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise Unavailable(
            f"the audit's collector failed in {printable(exe)}: {printable(tail)}",
            hint="the interpreter must be Python 3.9 or newer",
        )
    return parse_inventory(done.stdout, printable(exe))


def workers(count: int) -> int:
    """Processes to read ``count`` files with: 1 for a few files or where forking is not
    safe (another thread running), else one per CPU this process may use, at most 16."""
    if count < PARALLEL_FROM or threading.active_count() > 1 or not hasattr(os, "fork"):
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 16, count // (PARALLEL_FROM // 2)))


def scan_all(paths: Iterable[str]) -> dict[str, ElfFacts]:
    """The ELF facts of each file (read once even if listed twice); many files are read
    by a pool of forked processes (pyelftools spends ~1-5 ms of CPU a file)."""
    unique = sorted(set(paths))
    n = workers(len(unique))
    if n == 1:
        return {path: scan(path) for path in unique}

    chunk = max(1, len(unique) // (n * 4))
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
        return dict(zip(unique, pool.map(scan, unique, chunksize=chunk)))


def collect_python(
    python: str, description: str | None = None, env: Mapping[str, str] | None = None
) -> Collected:
    """Inventory through ``python``, ELF facts read on this host."""
    inventory = collect_local(python, env=env)
    facts = cached_scan((so.real for so in inventory.shared_objects), scan_all)
    return Collected(inventory, facts, description or f"python {printable(python)}")
