"""``select_device``: the seeds' "smart device selection", without their hangs.

Runs the probe's quick level in an isolated process (the current interpreter unless told
otherwise), each step under ``timeout`` seconds, and returns the torch device string to
use: ``"cuda"`` when a GPU passed every quick step (torch spells ROCm devices ``cuda``
too), else ``"cpu"`` with the reason logged on the ``envforge.select`` logger.
"""

from __future__ import annotations

import logging
import sys

from envforge.errors import EnvforgeError, Interrupted
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import ProbeSpec

log = logging.getLogger("envforge.select")


def select_device(timeout: float = 30.0, python: str | None = None) -> str:
    """``"cuda"`` if the GPU passes the quick probe within ``timeout`` s per step, else ``"cpu"``.

    Never hangs longer than the deadlines and never raises for a missing torch or GPU, a
    hang or a crash: those fall back to ``"cpu"`` with a logged reason. Ctrl-C raises
    :class:`KeyboardInterrupt` after the probe process was stopped.
    """
    spec = ProbeSpec(level="quick", vendor="any", step_timeout=timeout, startup_timeout=timeout)
    target = LocalPythonTarget(python=python or sys.executable)
    try:
        report = run_probe(spec, target)
    except Interrupted:
        raise KeyboardInterrupt from None
    except EnvforgeError as exc:
        log.warning("envforge: using the CPU: the GPU probe could not run: %s", exc.one_line())
        return "cpu"
    problem = report.first_problem
    if report.passed:
        log.info("envforge: using the GPU (quick probe passed in %.1fs)", report.seconds)
        return "cuda"
    if problem is None:
        log.warning("envforge: using the CPU: the GPU probe did not pass")
    else:
        log.warning(
            "envforge: using the CPU: GPU probe step %s: %s: %s",
            problem.name,
            problem.status,
            problem.detail,
        )
    return "cpu"
