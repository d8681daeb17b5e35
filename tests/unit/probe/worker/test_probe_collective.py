"""The worker's ``collective`` step: a timed all-reduce, asked for by the spec only.

The gloo path runs for real here (two CPU processes, torch in this interpreter); the nccl
path needs two GPUs and is not run here. Below two devices the step is skipped, saying so
(a pass: a one-GPU node's report must not fail for it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envforge.probe.bundle import worker_source
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP, QUICK_STEPS, ProbeSpec


def _run(tmp_path: Path, spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The worker's end events by step, run as every target runs it."""
    worker = tmp_path / "envforge_probe_worker.py"
    worker.write_text(worker_source(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(worker), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    return {e["step"]: e for e in events if e["event"] == "end"}


def test_the_step_is_listed_only_when_asked() -> None:
    assert COLLECTIVE_STEP not in ProbeSpec(level="quick").steps
    asked = ProbeSpec(level="quick", collective=True)
    assert asked.steps[: len(QUICK_STEPS)] == QUICK_STEPS
    assert COLLECTIVE_STEP in asked.worker_dict()["steps"]
    assert COLLECTIVE_STEP in asked.worker_dict()["deadlines"]


def test_the_health_step_is_the_hosts_not_the_workers() -> None:
    spec = ProbeSpec(level="quick", health=True)
    assert HEALTH_STEP in spec.steps
    assert HEALTH_STEP not in spec.worker_dict()["steps"]
    assert HEALTH_STEP in ProbeSpec(level="quick", require_healthy=True).steps


@pytest.mark.needs_torch
def test_one_device_skips_with_the_reason(tmp_path: Path) -> None:
    """Skipped, saying why, as a pass: a one-GPU node's report must not fail for it."""
    ends = _run(tmp_path, {"vendor": "none", "steps": ["device", "collective"]})
    assert ends["collective"]["status"] == "pass"
    assert ends["collective"]["detail"].startswith("skipped: 1 device visible")
    assert ends["collective"]["data"] == {"skipped": True, "world": 1}


@pytest.mark.needs_torch
def test_gloo_all_reduce_across_two_cpu_processes(tmp_path: Path) -> None:
    spec = {
        "vendor": "none",
        "steps": ["device", "collective"],
        "deadlines": {"collective": 90},
        "collective_world": 2,
    }
    ends = _run(tmp_path, spec)
    end = ends["collective"]
    assert end["status"] == "pass", end["detail"]
    assert end["data"]["backend"] == "gloo"
    assert end["data"]["world"] == 2
    assert end["data"]["bytes"] == 4 << 20
    assert len(end["data"]["seconds"]) == 5
    assert all(s > 0 for s in end["data"]["seconds"])
    assert "across 2 CPU processes" in end["detail"]


def test_a_failed_rank_ends_the_step_at_once(tmp_path: Path) -> None:
    """The others would wait for it in the all-reduce: the step does not wait for them."""
    boot = ModuleType("envforge_probe_worker_boot_under_test")
    exec(compile(worker_source(), "worker.py", "exec"), boot.__dict__)
    collective = boot.load("envforge_probe_worker_collective_test")["collective"]
    ranks: list[tuple[subprocess.Popen[bytes], Any, Any]] = []
    for code in (
        "import sys; sys.stderr.write('NCCL error: unhandled\\n'); sys.exit(3)",
        "import time; time.sleep(60)",
    ):
        out, err = (
            (tmp_path / f"o{len(ranks)}").open("w+b"),
            (tmp_path / f"e{len(ranks)}").open("w+b"),
        )
        ranks.append(
            (subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err), out, err)
        )
    started = time.monotonic()
    with pytest.raises(collective.StepFailed, match="rank 0 failed: NCCL error: unhandled"):
        collective.judge(ranks, 50.0, "nccl", 2, "GPUs")
    assert time.monotonic() - started < 20
    assert all(child.poll() is not None for child, _, _ in ranks)  # none left running
    for _, out, err in ranks:
        out.close()
        err.close()
