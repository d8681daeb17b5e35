"""ProbeSpec: steps per level, expectations from a recipe, check files, worker JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envforge.errors import InvalidInput
from envforge.probe.spec import (
    FULL_STEPS,
    IMPORT_PREFIX,
    MAX_CHECK_BYTES,
    QUICK_STEPS,
    CheckFile,
    ProbeSpec,
    effective_arch,
    read_checks,
    step_timeout_problem,
)
from envforge.recipe.checks import MAX_STEP_TIMEOUT
from envforge.recipe.model import CertifySettings, EnvVar, Gpu
from envforge.stack import stack_of
from tests.helpers.recipes import make_recipe

#: RDNA1 with ROCm 5.2, its conv workaround and a quick, short certification.
GFX1010 = make_recipe(
    name="gfx1010",
    description="RDNA1",
    vendor="amd",
    arch="gfx1010",
    base_image="ubuntu:22.04",
    python="3.10",
    torch="1.13.1",
    index="https://download.pytorch.org/whl/rocm5.2",
    numpy="<2",
    rocm="5.2",
    env=(EnvVar("MIOPEN_DEBUG_CONV_IMPLICIT_GEMM", "1", "44x44 conv hang", (), "community"),),
    certify=CertifySettings(step_timeout=15.0, level="quick"),
)


def test_levels() -> None:
    assert ProbeSpec(level="quick").steps == QUICK_STEPS
    assert ProbeSpec(level="full").steps == FULL_STEPS
    assert set(QUICK_STEPS) < set(FULL_STEPS)
    assert {"conv2d", "autocast", "grad-checkpoint"} == set(FULL_STEPS) - set(QUICK_STEPS)


def test_from_recipe_takes_pins_device_env_and_certify_settings() -> None:
    spec = ProbeSpec.from_recipe(GFX1010)
    assert spec.level == "quick"
    assert spec.step_timeout == 15.0
    assert spec.vendor == "amd"
    assert spec.expect.torch == "1.13.1"
    assert spec.expect.hip == "5.2"
    assert spec.expect.python == "3.10"
    assert spec.expect.numpy == "<2"
    assert spec.expect.accelerator == "rocm5.2"
    assert spec.expect.arch == "gfx1010"
    assert spec.env_map == {"MIOPEN_DEBUG_CONV_IMPLICIT_GEMM": "1"}
    assert spec.recipe_name == "gfx1010"
    assert spec.recipe_hash is not None
    assert spec.recipe_hash.startswith("sha256:")
    override = ProbeSpec.from_recipe(GFX1010, level="full", step_timeout=3.0)
    assert (override.level, override.step_timeout) == ("full", 3.0)


def test_effective_arch_follows_the_override() -> None:
    override = EnvVar("HSA_OVERRIDE_GFX_VERSION", "10.3.0", "pretend RDNA2", (), "community")
    assert effective_arch(make_recipe(GFX1010, env=(override,))) == "gfx1030"
    mi = EnvVar("HSA_OVERRIDE_GFX_VERSION", "9.0.10", "x", (), "uncertain")
    assert effective_arch(make_recipe(GFX1010, env=(mi,))) == "gfx90a"
    assert effective_arch(GFX1010) == "gfx1010"
    cpu = make_recipe(GFX1010, gpu=Gpu(vendor="none", arch=None), rocm=None)
    assert effective_arch(cpu) is None


def test_checks_get_unique_step_names_and_carry_their_source(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first = tmp_path / "check.py"
    second = tmp_path / "a" / "check.py"
    first.write_text("print(1)\n")
    second.write_text("print(2)\n")
    checks = read_checks([first, second])
    assert [c.step for c in checks] == ["check:check.py", "check:check.py#2"]
    assert checks[1].source == "print(2)\n"
    spec = ProbeSpec(level="quick", checks=checks)
    assert spec.steps[-2:] == ("check:check.py", "check:check.py#2")


def test_a_missing_check_file_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"nope\.py"):
        CheckFile.read(tmp_path / "nope.py")


def test_recipe_extra_checks_come_before_command_line_checks(tmp_path: Path) -> None:
    mine = tmp_path / "mine.py"
    theirs = tmp_path / "theirs.py"
    mine.write_text("")
    theirs.write_text("")
    recipe = make_recipe(GFX1010, certify=CertifySettings(extra_checks=(theirs,)))
    spec = ProbeSpec.from_recipe(recipe, extra_checks=[mine])
    assert spec.steps[-2:] == ("check:theirs.py", "check:mine.py")


def test_worker_json_lists_steps_deadlines_and_expectations() -> None:
    spec = ProbeSpec.from_recipe(GFX1010, step_timeout=7.0)
    data = json.loads(spec.worker_json())
    assert data["steps"] == [*QUICK_STEPS, "import:torch", "import:numpy"]
    assert data["deadlines"]["device"] == 7.0
    assert data["deadlines"]["import:numpy"] == 7.0
    assert data["vendor"] == "amd"
    assert data["expect"]["hip"] == "5.2"


def test_startup_deadline_and_bad_timeouts() -> None:
    assert ProbeSpec(step_timeout=2.0).startup_deadline == 30.0
    assert ProbeSpec(step_timeout=90.0).startup_deadline == 90.0
    assert ProbeSpec(step_timeout=2.0, startup_timeout=5.0).startup_deadline == 5.0
    with pytest.raises(InvalidInput):
        ProbeSpec(step_timeout=0)


@pytest.mark.parametrize(
    "value", [float("inf"), float("-inf"), float("nan"), -1.0, 0.0, 1e300, MAX_STEP_TIMEOUT + 1]
)
def test_step_timeouts_that_no_timer_can_hold_are_refused(value: float) -> None:
    assert step_timeout_problem(value) is not None
    with pytest.raises(InvalidInput, match="must be positive and at most"):
        ProbeSpec(step_timeout=value)
    with pytest.raises(InvalidInput, match="startup timeout"):
        ProbeSpec(step_timeout=1.0, startup_timeout=value)


def test_the_longest_step_timeout_is_accepted() -> None:
    assert step_timeout_problem(MAX_STEP_TIMEOUT) is None
    assert ProbeSpec(step_timeout=MAX_STEP_TIMEOUT).step_timeout == MAX_STEP_TIMEOUT


def test_a_fifo_check_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "check.py"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match=r"not a regular file \(a FIFO\)"):
        CheckFile.read(fifo)


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), ("/dev/null", "a character device")]
)
def test_a_device_check_is_refused(path: str, kind: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"no {path} here")
    with pytest.raises(InvalidInput, match=f"not a regular file \\({kind}\\)"):
        CheckFile.read(path)


def test_a_directory_check_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"not a regular file \(a directory\)"):
        CheckFile.read(tmp_path)


def test_a_huge_or_undecodable_check_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * (MAX_CHECK_BYTES + 1))
    with pytest.raises(InvalidInput, match="too large"):
        CheckFile.read(big)
    binary = tmp_path / "bin.py"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidInput, match="cannot be read"):
        CheckFile.read(binary)


def test_control_characters_in_a_check_name_are_escaped_in_its_step(tmp_path: Path) -> None:
    odd = tmp_path / "e\x1bvil\n.py"
    odd.write_text("pass\n")
    (check,) = read_checks([odd])
    assert check.step == "check:e\\x1bvil\\x0a.py"
    assert check.source == "pass\n"


def test_every_distribution_the_stack_asks_for_gets_an_import_step() -> None:
    recipe = make_recipe(
        GFX1010,
        packages=("torchvision==0.14.1+rocm5.2", "Pillow==10.4.0", "typing_extensions==4.12.2"),
    )
    spec = ProbeSpec.from_recipe(recipe)
    assert spec.distributions == stack_of(recipe).distributions()
    assert spec.distributions[:2] == ("torch", "numpy")
    assert {"torchvision", "pillow", "typing-extensions"} <= set(spec.distributions)
    imports = [s for s in spec.steps if s.startswith(IMPORT_PREFIX)]
    assert imports == [IMPORT_PREFIX + n for n in spec.distributions]
    # after the torch steps, then the companion's device steps, then the host-run audit
    assert spec.steps[: len(QUICK_STEPS)] == QUICK_STEPS
    assert spec.steps[-3:] == ("torchvision-nms", "torchvision-convnet", "audit")


def test_torchaudio_gets_its_device_step_and_a_spec_without_recipe_imports_nothing() -> None:
    steps = ProbeSpec(distributions=("torch", "torchaudio")).steps
    assert steps[-1] == "torchaudio-melspectrogram"
    assert "torchvision-nms" not in steps
    assert ProbeSpec.for_installed().steps == FULL_STEPS
