"""The probe's GPU steps (issue 33 §7) inside the backends: the command's settled
:class:`GpuChecks` reach the Docker certification's probe and the venv's, and the
certificate records the health facts (without the GPUs' serial UUIDs: it travels with
the image)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envforge.backends import docker
from envforge.backends.base import Options
from envforge.backends.docker.options import docker_options
from envforge.backends.venv import venv_options
from envforge.backends.venv.certifying import full_steps, has_gpu_steps
from envforge.backends.venv.layout import VenvOptions
from envforge.container.refs import CERTIFICATE_LABEL, certified_ref
from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import ProbeListener, ProbeTarget
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP, GpuChecks, ProbeSpec
from envforge.publish.certificate import Certificate
from envforge.stack import stack_of
from tests.helpers.recipes import make_recipe
from tests.unit.backends.docker.test_docker_pipeline import _engine

RECIPE = make_recipe()
FACTS = {
    "gpus": [{"index": "0", "source": "nvidia-smi", "uuid": "GPU-1234", "ecc_volatile": 0}],
    "tools": {"nvidia-smi": "read"},
}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))


class SpyProbe:
    """Stands in for ``run_probe``: keeps the spec; every step passes; health facts."""

    def __init__(self) -> None:
        self.specs: list[ProbeSpec] = []

    def __call__(
        self, spec: ProbeSpec, target: ProbeTarget, listener: ProbeListener | None
    ) -> ProbeReport:
        self.specs.append(spec)
        data: dict[str, Any] = {
            "steps": [StepResult(s, "pass", 0.1, "").to_dict() for s in spec.steps],
            "level": spec.level,
            "recipe": {"name": spec.recipe_name, "hash": spec.recipe_hash},
            "environment": {"target": target.description},
            "host": {"kernel": "test", "machine": "x86_64", "node": "gpu01"},
            "envforge_version": "test",
            "created": "2026-01-01T00:00:00Z",
        }
        if spec.health:
            data["health"] = FACTS
        return ProbeReport.from_dict(data)


def test_docker_options_carry_the_checks() -> None:
    checks = GpuChecks(health=True, collective=True)
    assert docker_options(Options(gpu_checks=checks)).gpu_checks == checks
    assert docker_options(Options()).gpu_checks is None
    assert venv_options(Options(gpu_checks=checks)).gpu_checks == checks


def test_the_docker_certification_probes_with_them_and_records_the_facts() -> None:
    engine = _engine()
    probe = SpyProbe()
    checks = GpuChecks(health=True, require_healthy=True, collective=True)
    result = docker.build(
        RECIPE, docker.DockerOptions(gpu_checks=checks), client=engine, prober=probe
    )
    assert result.certified
    (spec,) = probe.specs
    assert (spec.health, spec.require_healthy, spec.collective) == (True, True, True)
    assert {HEALTH_STEP, COLLECTIVE_STEP} <= set(spec.steps)
    label = engine.images.get(certified_ref(RECIPE.name, RECIPE.stack_tag)).attrs["Config"][
        "Labels"
    ][CERTIFICATE_LABEL]
    report = Certificate.from_json(label).report
    assert report["health"]["gpus"] == [{"index": "0", "source": "nvidia-smi", "ecc_volatile": 0}]
    assert report["health"]["tools"] == {"nvidia-smi": "read"}
    assert "node" not in report["host"]


def test_without_checks_the_docker_probe_is_as_before() -> None:
    probe = SpyProbe()
    docker.build(RECIPE, docker.DockerOptions(), client=_engine(), prober=probe)
    (spec,) = probe.specs
    assert HEALTH_STEP not in spec.steps
    assert COLLECTIVE_STEP not in spec.steps


def test_the_venv_probe_has_them_and_a_certificate_without_them_is_not_enough() -> None:
    stack = stack_of(RECIPE)
    options = VenvOptions(gpu_checks=GpuChecks(health=True, collective=True))
    steps = full_steps(RECIPE, "quick", options, stack)
    assert {HEALTH_STEP, COLLECTIVE_STEP} <= set(steps)
    assert HEALTH_STEP not in full_steps(RECIPE, "quick", VenvOptions(), stack)

    def cert(*names: str) -> dict[str, Any]:
        return {"level": "full", "report": {"steps": [{"name": n} for n in names]}}

    health = GpuChecks(health=True)
    assert has_gpu_steps(cert("matmul"), None)
    assert has_gpu_steps(cert("matmul"), GpuChecks())
    assert not has_gpu_steps(cert("matmul"), health)  # certified again, to record them
    assert has_gpu_steps(cert("matmul", HEALTH_STEP), health)
    both = GpuChecks(health=True, collective=True)
    assert not has_gpu_steps(cert("matmul", HEALTH_STEP), both)
    assert has_gpu_steps(cert(HEALTH_STEP, COLLECTIVE_STEP), both)
    assert not has_gpu_steps({"level": "full"}, health)
