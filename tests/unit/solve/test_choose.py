"""``auto``: the recipe for a detected arch, on fixture hosts and a model catalogue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envforge.errors import InvalidInput
from envforge.host.detect import HostInfo, detect, no_tools
from envforge.recipe.model import EnvVar
from envforge.solve.choose import Choice, choose_recipe, nearest
from tests.helpers import paths
from tests.helpers.recipes import make_recipe

SYSFS = paths.TESTS / "fixtures" / "sysfs"


#: What the model catalogue's recipes share.
MODEL = make_recipe(base_image="ubuntu:22.04", python="3.10", numpy=">=1.24", torch="2.9.1")


def _override(value: str) -> tuple[EnvVar, ...]:
    return (EnvVar("HSA_OVERRIDE_GFX_VERSION", value, "runs as a shipped arch", (), "community"),)


_ROWS: list[tuple[str, str, str | None, str, dict[str, Any]]] = [
    ("cpu", "none", None, "2.13.0", {}),
    ("gfx1010", "amd", "gfx1010", "1.13.1", {"rocm": "5.2", "env": _override("10.3.0")}),
    ("gfx1030", "amd", "gfx1030", "2.13.0", {"rocm": "7.2"}),
    ("gfx1031", "amd", "gfx1031", "2.13.0", {"rocm": "7.2", "env": _override("10.3.0")}),
    ("gfx1100", "amd", "gfx1100", "2.13.0", {"rocm": "7.2"}),
    ("gfx90a", "amd", "gfx90a", "2.13.0", {"rocm": "7.2"}),
    ("gfx942", "amd", "gfx942", "2.13.0", {"rocm": "7.2"}),
    ("gfx906", "amd", "gfx906", "2.9.1", {"rocm": "6.3"}),
    ("sm_90", "nvidia", "sm_90", "2.13.0", {"cuda": "13.0"}),
    ("sm_61", "nvidia", "sm_61", "2.12.0", {"cuda": "12.6"}),
]

#: The shape of the shipped catalogue (issue 2, part 4).
CATALOGUE = [
    make_recipe(MODEL, name=name, description=name, vendor=vendor, arch=arch, torch=torch, **extra)
    for name, vendor, arch, torch, extra in _ROWS
]


def host_for(case: str) -> HostInfo:
    return detect(root=SYSFS / case, environ={}, tools=no_tools)


def host_with(arch: str) -> HostInfo:
    return detect(root=Path("/nonexistent"), environ={"ENVFORGE_GPU_ARCH": arch}, tools=no_tools)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("rx5700xt", "gfx1010"),
        ("rx6700xt", "gfx1031"),
        ("mi300x", "gfx942"),
        ("h100", "sm_90"),
        ("none", "cpu"),
    ],
)
def test_fixture_hosts_pick_their_recipe(case: str, expected: str) -> None:
    choice = choose_recipe(host_for(case), CATALOGUE)
    assert isinstance(choice, Choice)
    assert choice.recipe == expected


def test_no_gpu_is_cpu_with_reason() -> None:
    choice = choose_recipe(host_for("none"), CATALOGUE)
    assert choice == Choice("cpu", None, "no GPU detected", None, None)


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("gfx1032", "gfx1031"),  # RX 6600: same override as the 6700 XT recipe, closest name
        ("gfx1012", "gfx1010"),  # RX 5500 XT: RDNA1 family
        ("gfx1036", "gfx1031"),
    ],
)
def test_override_archs_map_to_their_family(arch: str, expected: str) -> None:
    choice = choose_recipe(host_with(arch), CATALOGUE)
    assert choice.recipe == expected
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in choice.reason


def test_override_target_recipe_when_no_sibling_sets_it() -> None:
    # gfx1101 runs gfx1100 code; no recipe sets 11.0.0, so gfx1100 with a note to set it.
    choice = choose_recipe(host_with("gfx1101"), CATALOGUE)
    assert choice.recipe == "gfx1100"
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in choice.reason


@pytest.mark.parametrize(
    ("arch", "expected"), [("sm_86", "sm_90"), ("sm_60", "sm_61"), ("sm_120", "sm_90")]
)
def test_nvidia_picks_a_variant_that_has_the_sm(arch: str, expected: str) -> None:
    choice = choose_recipe(host_with(arch), CATALOGUE)
    assert choice.recipe == expected
    assert arch in choice.reason


def test_arch_without_recipe_lists_nearest() -> None:
    with pytest.raises(InvalidInput) as err:
        choose_recipe(host_with("gfx1103"), CATALOGUE)
    text = err.value.one_line()
    assert "no recipe for gfx1103" in text
    assert "nearest: gfx1100 (gfx1100), gfx1031 (gfx1031), gfx1030 (gfx1030)" in text


def test_nvidia_arch_too_old_for_every_variant() -> None:
    with pytest.raises(InvalidInput, match=r"no recipe for sm_35.*nearest: sm_61"):
        choose_recipe(host_with("sm_35"), CATALOGUE)


def test_unknown_arch_asks_for_override(tmp_path: Path) -> None:
    card = tmp_path / "sys/class/drm/card0/device"
    card.mkdir(parents=True)
    (card / "vendor").write_text("0x1002\n")
    (card / "device").write_text("0x1234\n")
    host = detect(root=tmp_path, environ={}, tools=no_tools)
    with pytest.raises(InvalidInput) as err:
        choose_recipe(host, CATALOGUE)
    assert "ENVFORGE_GPU_ARCH" in err.value.one_line()


def test_nearest_orders_by_prefix_then_distance() -> None:
    assert [r.name for r in nearest("gfx940", CATALOGUE)] == ["gfx942", "gfx90a", "gfx906"]
