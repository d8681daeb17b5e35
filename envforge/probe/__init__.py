"""The timed, isolated hardware probe: worker (stdlib only), runner, reports, select_device.

The ``worker`` package runs inside the environment under test, shipped as one file
(``bundle.py``); everything else runs on the host.
"""

from __future__ import annotations

from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import LocalPythonTarget, ProbeTarget, WorkerHandle, run_probe
from envforge.probe.spec import ProbeSpec

__all__ = [
    "LocalPythonTarget",
    "ProbeReport",
    "ProbeSpec",
    "ProbeTarget",
    "StepResult",
    "WorkerHandle",
    "run_probe",
]
