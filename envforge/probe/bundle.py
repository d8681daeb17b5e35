"""The probe worker as the one text file every target runs.

The worker is the stdlib-only package :mod:`envforge.probe.worker` (Python 3.7 syntax,
nothing outside the standard library). Targets take one text file: the local target writes
it next to the spec, the container target puts it into the container, Kubernetes mounts it
from a ConfigMap key, and ``python -c SOURCE SPEC`` runs it too. So the package is shipped
as its ``boot.py`` with every other module's source in it (``SOURCES``); run, the file
imports the package from memory and calls ``driver.main`` (see ``boot.py``).
"""

from __future__ import annotations

from importlib import resources

#: The worker package, and its module that becomes the shipped file.
PACKAGE = "envforge.probe.worker"
BOOT = "boot.py"
#: The line of ``boot.py`` the sources replace.
SOURCES_LINE = "SOURCES = {}  # filled in by envforge.probe.bundle\n"


def worker_modules() -> dict[str, str]:
    """Module within the package ("" for ``__init__``) -> its source; ``boot.py`` aside."""
    folder = resources.files(PACKAGE)
    modules: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".py") and entry.name != BOOT:
            stem = entry.name.removesuffix(".py")
            modules["" if stem == "__init__" else stem] = entry.read_text(encoding="utf-8")
    return modules


def worker_source() -> str:
    """The worker file's text, to ship into any target: ``python FILE SPEC``."""
    boot = resources.files(PACKAGE).joinpath(BOOT).read_text(encoding="utf-8")
    head, found, tail = boot.partition(SOURCES_LINE)
    if not found:
        raise RuntimeError(f"{PACKAGE}/{BOOT} has no line {SOURCES_LINE.strip()!r}")
    return f"{head}SOURCES = {worker_modules()!r}\n{tail}"
