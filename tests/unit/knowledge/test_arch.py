"""envforge.knowledge.arch: one model of GPU archs; round trips and ordering as properties."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from envforge.knowledge import arch
from envforge.knowledge.arch import Gfx, Sm

pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

GFX = st.builds(
    Gfx,
    major=st.integers(min_value=1, max_value=99),
    minor=st.integers(min_value=0, max_value=15),
    stepping=st.integers(min_value=0, max_value=15),
)
SM = st.builds(
    Sm, major=st.integers(min_value=1, max_value=99), minor=st.integers(min_value=0, max_value=9)
)


@given(GFX)
@example(Gfx(10, 3, 0))
@example(Gfx(9, 0, 10))
@example(Gfx(11, 5, 1))
def test_gfx_round_trips(gfx: Gfx) -> None:
    assert arch.parse_gfx(gfx.name) == gfx
    assert arch.gfx_from_isa(gfx.isa) == gfx.name
    assert arch.isa_from_gfx(gfx.name) == gfx.isa
    assert arch.gfx_from_target_version(gfx.target_version) == gfx.name
    assert arch.target_version(gfx.name) == gfx.target_version
    assert arch.gfx_from_hsa_isa(gfx.hsa_isa + ":sramecc+:xnack-") == gfx.name
    assert arch.vendor_of(gfx.name) == "amd"
    assert arch.family(gfx.name) == gfx.name[:-1] + "x"


@given(GFX, GFX)
def test_gfx_order_is_numeric(a: Gfx, b: Gfx) -> None:
    assert (a < b) == (arch.sort_key(a.name) < arch.sort_key(b.name))
    assert (a < b) == ((arch.ordinal(a.name) or 0) < (arch.ordinal(b.name) or 0))


@given(SM)
def test_sm_round_trips(sm: Sm) -> None:
    assert arch.parse_sm(sm.name) == sm
    assert arch.sm_from_compute_cap(sm.compute_cap) == sm.name
    assert arch.compute_cap(sm.name) == sm.compute_cap
    assert arch.vendor_of(sm.name) == "nvidia"
    assert arch.is_device_arch(sm.name)


@given(SM, SM)
def test_sass_runs_within_a_major_upwards_only(built: Sm, gpu: Sm) -> None:
    expected = built.major == gpu.major and built.minor <= gpu.minor
    assert arch.sass_runs_on(built.name, gpu.name) == expected
    assert arch.sm_covered(gpu.name, [built.name]) == expected
    specific = Sm(built.major, built.minor, "a")
    assert not arch.sass_runs_on(specific.name, gpu.name)
    assert arch.sass_runs_on(specific.name, specific.name)


@given(SM, SM)
def test_ptx_runs_on_every_newer_arch(ptx: Sm, gpu: Sm) -> None:
    newer = (gpu.major, gpu.minor) >= (ptx.major, ptx.minor)
    assert arch.sm_covered(gpu.name, [], ptx.name) == newer


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (100100, "gfx1010"),
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (110501, "gfx1151"),
        (120001, "gfx1201"),
        (90012, "gfx90c"),
        (0, None),
        (-1, None),
        (91600, None),
        (90016, None),
        (50_000_000, None),
    ],
)
def test_kfd_target_versions(value: int, name: str | None) -> None:
    # probe/report.py's old copy gave gfx9160 for 91600 and wrote the minor in decimal.
    assert arch.gfx_from_target_version(value) == name


@pytest.mark.parametrize(
    "bad",
    [
        "gfx000",
        "gfx",
        "gfx10300",
        "gfxabc",
        "gfx1030\n",
        "gfx\u0661030",
        "GFX1030",
        "gfx1030:xnack-",
    ],
)
def test_not_gfx_names(bad: str) -> None:
    assert arch.parse_gfx(bad) is None
    assert arch.vendor_of(bad) is None


@pytest.mark.parametrize("bad", ["10.3", "10.16.0", "10.3.16", "1\u0660.3.0", "gfx1030", ""])
def test_not_isa_versions(bad: str) -> None:
    assert arch.gfx_from_isa(bad) is None


@pytest.mark.parametrize("bad", ["[N/A]", "9", "9.10", "\u0669.0", "100.0", ""])
def test_not_compute_caps(bad: str) -> None:
    assert arch.sm_from_compute_cap(bad) is None


def test_families_and_device_archs() -> None:
    assert arch.family("gfx1031") == "gfx103x"
    assert arch.family("gfx1100") == "gfx110x"
    assert arch.family("gfx90a") == "gfx90x"
    assert arch.family("sm_86") == "sm_8x"
    assert arch.family("cpu") is None
    assert not arch.is_device_arch("sm_90a")
    assert arch.same_major_lower("sm_89") == ["sm_87", "sm_86", "sm_80"]
    assert sorted(["gfx1100", "gfx90a", "gfx906", "sm_90", "gfx1030"], key=arch.sort_key) == [
        "gfx906",
        "gfx90a",
        "gfx1030",
        "gfx1100",
        "sm_90",
    ]
