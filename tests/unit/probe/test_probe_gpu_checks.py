"""The probe's GPU steps as ``build`` and ``certify`` settle them (issue 33 §7):
:class:`envforge.probe.spec.GpuChecks` (the defaults: health for a GPU recipe, the
collective for two or more GPUs chosen), and the flags through ``main()`` reaching the
backend's options (a registered fake backend records them)."""

from __future__ import annotations

import pytest

from envforge import backends
from envforge.cli import main
from envforge.errors import InvalidInput
from envforge.host.detect import OVERRIDE_VARS
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP, GpuChecks, ProbeSpec
from tests.helpers.fake_backend import FakeBackend


@pytest.mark.parametrize(
    ("given", "vendor", "gpus", "want"),
    [
        # nothing said: health for a GPU recipe, the collective from two GPUs chosen
        ((None, False, None), "nvidia", None, (True, False, False)),
        ((None, False, None), "amd", 1, (True, False, False)),
        ((None, False, None), "amd", 2, (True, False, True)),
        ((None, False, None), "none", None, (False, False, False)),
        ((None, False, None), "none", 0, (False, False, False)),
        ((None, False, None), "none", 2, (False, False, False)),  # its probe uses no GPU
        # what is said wins
        ((False, False, False), "nvidia", 8, (False, False, False)),
        ((True, False, True), "none", None, (True, False, True)),
        # --require-healthy implies --health
        ((None, True, None), "none", None, (True, True, False)),
    ],
)
def test_the_defaults_and_what_is_said(
    given: tuple[bool | None, bool, bool | None],
    vendor: str,
    gpus: int | None,
    want: tuple[bool, bool, bool],
) -> None:
    health, require, collective = given
    got = GpuChecks.chosen(
        health=health, require_healthy=require, collective=collective, vendor=vendor, gpus=gpus
    )
    assert (got.health, got.require_healthy, got.collective) == want


def test_require_healthy_without_health_is_refused() -> None:
    with pytest.raises(InvalidInput, match="--require-healthy and --no-health contradict"):
        GpuChecks.chosen(
            health=False, require_healthy=True, collective=None, vendor="amd", gpus=None
        )


def test_applied_to_a_spec_adds_the_steps_and_argv_says_every_choice() -> None:
    spec = ProbeSpec(level="quick")
    assert HEALTH_STEP not in spec.steps
    assert COLLECTIVE_STEP not in spec.steps
    both = GpuChecks(health=True, require_healthy=True, collective=True).applied(spec)
    assert (both.health, both.require_healthy, both.collective) == (True, True, True)
    assert {HEALTH_STEP, COLLECTIVE_STEP} <= set(both.steps)
    assert COLLECTIVE_STEP in both.worker_dict()["steps"]  # the worker runs it
    assert HEALTH_STEP not in both.worker_dict()["steps"]  # the host runs it
    assert GpuChecks().applied(both).steps == spec.steps
    assert GpuChecks(health=True, require_healthy=True, collective=True).argv() == [
        "--health",
        "--require-healthy",
        "--collective",
    ]
    assert GpuChecks().argv() == ["--no-health", "--no-collective"]


# --------------------------------------------------------------------------- build, certify


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    backend = FakeBackend()
    monkeypatch.setitem(backends.BACKENDS, "fake", backend)
    for name in (*OVERRIDE_VARS, "SLURM_JOB_ID", "SLURM_JOB_GPUS", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name in ("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ENVFORGE_RECIPE_PATH"):
        monkeypatch.delenv(name, raising=False)
    return backend


def _checks(fake: FakeBackend) -> GpuChecks | None:
    ((_, _, options),) = fake.calls
    return options.gpu_checks


@pytest.mark.parametrize("command", ["build", "certify"])
@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["gfx1100"], GpuChecks(health=True)),
        (["cpu"], GpuChecks()),
        (["cpu", "--health"], GpuChecks(health=True)),
        (["gfx1100", "--no-health"], GpuChecks()),
        (["gfx1100", "--require-healthy"], GpuChecks(health=True, require_healthy=True)),
        (["gfx1100", "--collective"], GpuChecks(health=True, collective=True)),
    ],
)
def test_build_and_certify_pass_the_settled_choices_to_the_backend(
    fake: FakeBackend, command: str, argv: list[str], want: GpuChecks
) -> None:
    assert main([command, *argv, "--backend", "fake"]) == 0
    assert _checks(fake) == want


@pytest.mark.parametrize("command", ["build", "certify"])
def test_two_gpus_chosen_run_the_collective_unless_told_not_to(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_VENDOR", "amd")
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1100")
    monkeypatch.setenv("ENVFORGE_GPU_COUNT", "2")
    assert main([command, "gfx1100", "--backend", "fake", "--gpu", "0,1"]) == 0
    assert _checks(fake) == GpuChecks(health=True, collective=True)
    fake.calls.clear()
    assert main([command, "gfx1100", "--backend", "fake", "--gpu", "1"]) == 0
    assert _checks(fake) == GpuChecks(health=True, collective=False)
    fake.calls.clear()
    argv = [command, "gfx1100", "--backend", "fake", "--gpu", "all", "--no-collective"]
    assert main(argv) == 0
    assert _checks(fake) == GpuChecks(health=True, collective=False)


@pytest.mark.parametrize("command", ["build", "certify"])
def test_require_healthy_with_no_health_is_exit_2_in_one_line(
    fake: FakeBackend, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "gfx1100", "--backend", "fake", "--no-health", "--require-healthy"]) == 2
    assert "--require-healthy and --no-health contradict" in capsys.readouterr().err
    assert fake.calls == []
