"""Judge a collected environment: every check, one :class:`AuditReport`.

:func:`judge` runs the checks (:mod:`.judge_gpu`, :mod:`.judge_libs`, :mod:`.judge_torch`)
on what :mod:`.collect` (this host) or :mod:`.image` (an image) collected;
:func:`host_arch` is the default ``--arch``: this host's detected GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from envforge.audit.judge_gpu import check_gpu_code
from envforge.audit.judge_libs import check_duplicates
from envforge.audit.judge_torch import check_companions, check_extensions, check_numpy
from envforge.audit.model import AuditReport, CheckResult, Collected, Finding
from envforge.host.detect import detect
from envforge.knowledge.arch import is_device_arch, strip_features


def host_arch() -> tuple[str | None, str]:
    """(this host's GPU arch, where it came from); (None, why) without one. The first GPU
    whose arch detection stated (not guessed from a product name)."""
    host = detect()
    for gpu in host.gpus:
        if gpu.arch and not gpu.arch_guessed:
            return gpu.arch, "detected"
    if host.gpus:
        return None, "this host's GPU arch is not known (pass --arch ARCH)"
    return None, "no GPU on this host (pass --arch ARCH, e.g. sm_90 or gfx1030)"


def check_arch(arch: str) -> str | None:
    """Why ``arch`` cannot be an audit target, or None (``sm_90``, ``gfx90a:xnack-``)."""
    if not is_device_arch(strip_features(arch)):
        return f"{arch!r} is not a GPU arch (sm_XY or gfxNNN, e.g. sm_90, gfx1030)"
    return None


Check = Callable[[Collected], tuple[CheckResult, list[Finding]]]
CHECKS: tuple[Check, ...] = (check_duplicates, check_extensions, check_numpy, check_companions)


def judge(
    collected: Collected,
    arch: str | None,
    *,
    arch_source: str,
    skip_reason: str = "no GPU arch to check against",
    started: float | None = None,
) -> AuditReport:
    """Every check of ``collected`` against ``arch`` (None: GPU code is skipped, saying
    ``skip_reason``)."""
    began = time.monotonic() if started is None else started
    results: list[CheckResult] = []
    findings: list[Finding] = []
    result, found = check_gpu_code(collected, arch, skip_reason)
    results.append(result)
    findings.extend(found)
    for check in CHECKS:
        result, found = check(collected)
        results.append(result)
        findings.extend(found)
    libraries = collected.libraries()
    torch = collected.inventory.dist("torch")
    return AuditReport(
        target=collected.target,
        arch=arch,
        arch_source=arch_source,
        python=collected.inventory.python,
        torch=torch.version if torch is not None else None,
        checks=tuple(results),
        findings=tuple(findings),
        distributions=sum(1 for d in collected.inventory.distributions if not d.shadowed),
        shared_objects=len(libraries),
        gpu_libraries=sum(1 for _, f in libraries if f.nvidia is not None or f.amd is not None),
        seconds=time.monotonic() - began,
        unreadable=tuple(
            sorted(
                collected.name(so)
                for so, f in libraries
                if f.problem and f.problem != "not an ELF file"
            )
        ),
    )
