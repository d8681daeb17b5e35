"""``envforge doctor``'s run: the host's checks, then every backend's, in one report.

Above the backends: :func:`diagnose` asks each backend in
:data:`envforge.backends.BACKENDS` for its findings, next to the host checks of
:mod:`envforge.host.doctor` (which the backends build on, so it stays below them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from envforge.backends import BACKENDS, HostCheck, default_backend
from envforge.host import gpumem
from envforge.host.detect import HostInfo
from envforge.host.doctor import (
    DoctorReport,
    Finding,
    Identity,
    check_busy,
    check_device_nodes,
    check_disk,
    check_driver,
    check_gpu_present,
    check_groups,
    check_memory,
    vendor_of,
)
from envforge.host.hostinfo import ToolRunner
from envforge.recipe.model import Recipe


def diagnose(
    recipe: Recipe | None,
    host: HostInfo,
    *,
    root: Path = Path("/"),
    identity: Identity | None = None,
    space_dir: Path | None = None,
    backend: str | None = None,
    stand_ins: Mapping[str, Callable[[], Any]] | None = None,
    chosen_for: str | None = None,
    tools: ToolRunner | None = None,
) -> DoctorReport:
    """Run every check for ``recipe`` (None: just the host) and collect the findings.

    The host checks are here; each backend (``backend``, else every backend, none of them
    blocking) adds its own through the protocol (``findings``; ``stand_ins`` stand in for
    what a backend would ask this machine). The disk check counts the space the backend
    (else the default one) needs. ``chosen_for``: the arch ``auto`` chose ``recipe`` for.
    ``tools``: runs nvidia-smi, amd-smi, rocm-smi (None: the real ones, under a deadline,
    on ``/``; none under a fixture root).
    """
    who = identity or Identity.current()
    asked = [backend] if backend is not None else list(BACKENDS)
    check = HostCheck(root=root, required=backend is not None, stand_ins=stand_ins or {})
    need = BACKENDS[backend or default_backend()].disk_need(vendor_of(recipe, host))
    findings = [
        *check_gpu_present(recipe, host, chosen_for=chosen_for),
        *check_device_nodes(recipe, host, root, who),
        *check_groups(recipe, host, root, who),
        *check_driver(recipe, host),
        *check_busy(recipe, host, root),
        *check_memory(recipe, host, root, tools or _tools_for(root)),
        *(f for name in asked for f in BACKENDS[name].findings(recipe, host, check)),
        *check_disk(recipe, space_dir, need, host),
    ]
    for note in host.notes:
        findings.append(Finding("detect", "warn", note))
    return DoctorReport(recipe=recipe.name if recipe else None, host=host, findings=tuple(findings))


def _tools_for(root: Path) -> ToolRunner:
    """The real tools on this host's root; none under a fixture root (tests)."""
    return gpumem.tool_runner() if root == Path("/") else gpumem.no_tools
