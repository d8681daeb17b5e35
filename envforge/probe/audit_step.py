"""The probe's ``audit`` step: the same audit, run by the host side of the probe after
the worker, its outcome one :class:`~envforge.probe.report.StepResult`.

A local interpreter is collected with the collector and read on this host
(:func:`envforge.audit.collect.collect_python`); a target that says it can run the
bundled audit (``audit_in_target``: the Docker backend's container) runs it inside.
Errors fail the step (certification refuses them), warnings make it ``warn``; an
audit that cannot run is a ``warn`` naming why (an interpreter older than 3.9), never
a silent pass. The arch: the recipe's effective one (AMD), else this host's GPU, none
for a CPU recipe.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from envforge.audit.collect import collect_python
from envforge.audit.image import collect_target
from envforge.audit.run import host_arch, judge
from envforge.errors import Unavailable
from envforge.probe.local import LocalPythonTarget
from envforge.probe.report import StepResult

if TYPE_CHECKING:
    from envforge.audit.model import AuditReport, Collected
    from envforge.probe.report import Status
    from envforge.probe.spec import ProbeSpec
    from envforge.probe.target import ProbeTarget

STEP = "audit"
#: Findings named in the step's detail at most (the rest: envforge audit).
DETAIL_FINDINGS = 5


def _arch(spec: ProbeSpec) -> tuple[str | None, str]:
    if spec.vendor == "none":
        return None, "the recipe runs on the CPU"
    if spec.expect.arch:
        return spec.expect.arch, ""

    return host_arch()


def _collect(spec: ProbeSpec, target: ProbeTarget) -> Collected | None:
    if isinstance(target, LocalPythonTarget):
        return collect_python(target.python, target.description, env=spec.env_map)
    if getattr(target, "audit_in_target", False):
        return collect_target(target, env=spec.env_map)
    return None


def detail_of(report: AuditReport) -> str:
    """The findings (errors first), then a count of the rest."""
    ordered = sorted(report.findings, key=lambda f: f.severity != "error")
    lines = [f"{f.severity}: {f.message}" for f in ordered[:DETAIL_FINDINGS]]
    if len(ordered) > DETAIL_FINDINGS:
        lines.append(f"... and {len(ordered) - DETAIL_FINDINGS} more (envforge audit)")
    if not lines:
        lines.append(
            f"clean: {report.distributions} distributions, {report.shared_objects} "
            f"shared objects ({report.gpu_libraries} with GPU code), "
            f"arch {report.arch or 'none'}"
        )
    return "\n".join(lines)


def audit_step(spec: ProbeSpec, target: ProbeTarget) -> StepResult:
    began = time.monotonic()
    try:
        collected = _collect(spec, target)
    except Unavailable as exc:
        return StepResult(STEP, "warn", time.monotonic() - began, f"not audited: {exc.one_line()}")
    if collected is None:
        return StepResult(
            STEP,
            "warn",
            time.monotonic() - began,
            f"not audited: {target.description} cannot run the audit",
        )
    arch, reason = _arch(spec)
    report = judge(collected, arch, arch_source="probe", skip_reason=reason, started=began)
    status: Status = "fail" if not report.ok else "warn" if report.count("warning") else "pass"
    return StepResult(STEP, status, time.monotonic() - began, detail_of(report))
