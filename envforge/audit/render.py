"""The audit report as text (one line per check and per finding, then a summary)."""

from __future__ import annotations

from envforge.audit.model import AuditReport
from envforge.errors import printable

_MARK = {"error": "FAIL", "warning": "WARN", "info": "INFO"}
_STATUS = {"pass": "ok", "fail": "FAIL", "warn": "WARN", "skip": "skip"}


def text_lines(report: AuditReport) -> list[str]:
    """Each finding on a line (``FAIL  check  message``), each check's outcome, a summary."""
    lines = [
        f"{_MARK[f.severity]:<5} {f.check:<20} {printable(f.message)}" for f in report.findings
    ]
    for check in report.checks:
        lines.append(
            f"{_STATUS[check.status]:<5} {check.name:<20} check: {printable(check.detail)}"
        )
    errors, warnings = report.count("error"), report.count("warning")
    arch = report.arch or "no GPU arch"
    verdict = "problems found" if not report.ok else "clean"
    lines.append(
        f"audit of {printable(report.target)}: {verdict}: {errors} error(s), "
        f"{warnings} warning(s); {report.distributions} distributions, "
        f"{report.shared_objects} shared objects ({report.gpu_libraries} with GPU code), "
        f"python {report.python}, torch {report.torch or 'not installed'}, {arch} "
        f"in {report.seconds:.2f} s"
    )
    return lines
