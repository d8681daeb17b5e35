"""Synthetic evidence for the matrix tests and bench/matrix_bench.py.

Reports are made with the real :class:`envforge.probe.report.ProbeReport` (and
certificates with the real :func:`envforge.publish.certificate.issue`), so their JSON is
exactly what ``envforge probe --report`` and the certificate store hold.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from envforge.probe.report import ProbeReport, ReportGpu, ReportHost, StepResult
from envforge.probe.spec import FULL_STEPS, QUICK_STEPS
from envforge.publish.certificate import issue

#: (vendor, arch, products, drivers, recipe, stack)
FLEET: tuple[tuple[str, str | None, tuple[str, ...], tuple[str, ...], str, str], ...] = (
    (
        "amd",
        "gfx1010",
        ("AMD Radeon RX 5700 XT", "AMD Radeon RX 5700"),
        ("amdgpu 6.2.4", "amdgpu 6.8.5", "amdgpu 6.10.5"),
        "gfx1010",
        "torch1.13.1-rocm5.2-py3.10",
    ),
    (
        "amd",
        "gfx1030",
        ("AMD Radeon RX 6800 XT", "AMD Radeon RX 6900 XT"),
        ("amdgpu 6.8.5", "amdgpu 6.12.12"),
        "gfx1030",
        "torch2.13.0-rocm7.1-py3.12",
    ),
    (
        "amd",
        "gfx1031",
        ("AMD Radeon RX 6700 XT",),
        ("amdgpu 6.8.0", "amdgpu 6.10.5"),
        "gfx1031",
        "torch2.13.0-rocm7.1-py3.12",
    ),
    (
        "amd",
        "gfx1100",
        ("AMD Radeon RX 7900 XTX",),
        ("amdgpu 6.10.5", "amdgpu 6.12.12"),
        "gfx1100",
        "torch2.13.0-rocm7.1-py3.12",
    ),
    (
        "amd",
        "gfx90a",
        ("AMD Instinct MI210",),
        ("amdgpu 6.8.5",),
        "gfx90a",
        "torch2.13.0-rocm7.1-py3.12",
    ),
    (
        "nvidia",
        None,
        ("NVIDIA GeForce RTX 4090",),
        ("nvidia 570.86.16", "nvidia 580.65.06"),
        "sm_90",
        "torch2.13.0-cu130-py3.12",
    ),
    (
        "nvidia",
        None,
        ("NVIDIA H100 80GB HBM3",),
        ("nvidia 580.65.06",),
        "sm_90",
        "torch2.13.0-cu130-py3.12",
    ),
    (
        "nvidia",
        None,
        ("NVIDIA GeForce GTX 1080 Ti",),
        ("nvidia 535.183.01",),
        "sm_61",
        "torch2.5.1-cu118-py3.11",
    ),
    ("none", None, (), ("",), "cpu", "torch2.13.0-cpu-py3.11"),
)
BAD = {
    "fail": ("matmul", "max abs difference vs CPU 0.37 > 1e-3"),
    "hang": ("conv2d", "no result within 180 s (deadline); the worker was killed"),
    "crash": ("small-tensor", "worker died: SIGSEGV\nMemory access fault by GPU node-1"),
    "oom": ("memory", "torch.OutOfMemoryError: HIP out of memory"),
    "no-device": ("device", "torch sees no GPU (torch.cuda.is_available() is False)"),
}


@dataclass(frozen=True)
class Spec:
    vendor: str
    arch: str | None
    product: str
    driver: str
    recipe: str
    stack: str
    outcome: str
    created: datetime
    detail: str = ""
    kernel: str = "Linux 6.8.0-45-generic"
    level: str = "full"


def snapshot_for(stack: str) -> dict[str, Any]:
    torch_part, variant, py = stack.split("-")
    snap: dict[str, Any] = {
        "python": py[2:] + ".4",
        "torch": torch_part[5:],
        "hip": None,
        "cuda": None,
        "executable": "/home/alice/venv/bin/python",
        "platform": "Linux-6.8.0-x86_64-with-glibc2.36 on alice-ws",
    }
    if variant.startswith("rocm"):
        snap["hip"] = variant[4:] + ".32830"
        snap["torch"] += "+" + variant
    elif variant.startswith("cu"):
        snap["cuda"] = variant[2:-1] + "." + variant[-1]
        snap["torch"] += "+" + variant
    else:
        snap["torch"] += "+cpu"
    return snap


def make_report(spec: Spec) -> ProbeReport:
    names = FULL_STEPS if spec.level == "full" else QUICK_STEPS
    bad = BAD.get(spec.outcome)
    steps: list[StepResult] = []
    failed = False
    for i, name in enumerate(names):
        jitter = 0.8 + (int(spec.created.timestamp()) * 7 + i * 13) % 41 / 100
        seconds = round((0.05 + (i % 4) * 0.4) * jitter, 3)
        if failed:
            steps.append(StepResult(name, "skip", 0.0, "not run after the failure"))
        elif bad and name == bad[0]:
            detail = spec.detail or bad[1]
            steps.append(StepResult(name, spec.outcome, seconds, detail))  # type: ignore[arg-type]
            failed = True
        else:
            steps.append(StepResult(name, "pass", seconds, f"{name} ok"))
    gpus = (
        ()
        if spec.vendor == "none"
        else (ReportGpu(name=spec.product, arch=spec.arch, vendor=spec.vendor),)
    )
    return ProbeReport(
        steps=tuple(steps),
        level=spec.level,
        target="/home/alice/.local/share/envforge/venvs/x/bin/python",
        host=ReportHost(
            kernel=spec.kernel, machine="x86_64", gpus=gpus, driver=spec.driver or None
        ),
        envforge_version="0.1.0",
        created=spec.created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        seconds=sum(s.seconds for s in steps),
        recipe_name=spec.recipe,
        recipe_hash="sha256:" + "ab" * 32,
        snapshot=snapshot_for(spec.stack),
    )


def make_certificate(spec: Spec, report: ProbeReport | None = None) -> dict[str, Any]:
    report = report or make_report(spec)
    cert = issue(
        report=report.to_dict(),
        recipe_name=spec.recipe,
        recipe_hash="sha256:" + "ab" * 32,
        stack_tag=spec.stack,
        layers=["sha256:" + "01" * 32],
        config={"Env": ["PATH=/opt/venv/bin:/usr/bin"]},
        candidate_id="sha256:" + "cd" * 32,
        now=spec.created.timestamp(),
    )
    return dict(cert.data)


def corpus(n: int, seed: int = 12) -> list[Spec]:
    """``n`` runs over :data:`FLEET` over 90 days, most passing; 10 % run the cpu recipe
    and 5 % another arch's recipe."""
    rng = random.Random(seed)
    start = datetime(2026, 8, 25, tzinfo=timezone.utc)
    outcomes = ["pass"] * 14 + ["fail", "fail", "hang", "crash", "oom", "no-device"]
    specs: list[Spec] = []
    stacks = {f[4]: f[5] for f in FLEET}
    offsets = rng.sample(range(90 * 86400), n)  # distinct times: no two runs are equal
    for offset in offsets:
        vendor, arch, products, drivers, recipe, stack = rng.choice(FLEET)
        roll = rng.random()
        if roll < 0.1:  # the cpu stack runs anywhere
            recipe = "cpu"
        elif roll < 0.15:  # someone tries another arch's recipe
            recipe = rng.choice(sorted(stacks))
        stack = stacks[recipe]
        specs.append(
            Spec(
                vendor=vendor,
                arch=arch,
                product=rng.choice(products) if products else "",
                driver=rng.choice(drivers),
                recipe=recipe,
                stack=stack,
                outcome=rng.choice(outcomes),
                created=start + timedelta(seconds=offset),
            )
        )
    return specs


def write_corpus(folder: Path, specs: list[Spec], *, certificates_every: int = 2) -> None:
    """One sub-folder per run: ``probe.json``, and for every ``certificates_every``-th run
    a ``certificate.json`` of the same run too (as ``--report DIR`` writes them)."""
    for i, spec in enumerate(specs):
        sub = folder / f"run-{i:05d}"
        sub.mkdir(parents=True)
        report = make_report(spec)
        (sub / "probe.json").write_text(report.to_json() + "\n", encoding="utf-8")
        if certificates_every and i % certificates_every == 0:
            text = json.dumps(make_certificate(spec, report), indent=2, sort_keys=True)
            (sub / "certificate.json").write_text(text + "\n", encoding="utf-8")
