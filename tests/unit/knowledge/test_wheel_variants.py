"""Wheel variants (PEP 825): the metadata read, provider properties made from an arch,
and the variant chosen, each against the primary source it follows.

Sources: PEP 825 https://peps.python.org/pep-0825/ (python/peps ``peps/pep-0825.rst``);
the NVIDIA provider https://github.com/wheelnext/nvidia-variant-provider
(``nvidia_variant_provider/plugin.py``); rocm-bootstrap's README
(https://github.com/pmoutsias-amd/rocm-systems/tree/develop/python/rocm-bootstrap); the
variants of torch 2.8.0 on WheelNext's demo variant index (``torch-2.8.0-variants.json``
as the README of WheelNext's pip fork quotes it).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from envforge.errors import InvalidInput
from envforge.knowledge.wheel_variants import (
    Supported,
    WheelVariant,
    amd_properties,
    choose,
    lock_variants,
    nvidia_properties,
    parse_variant_json,
    supported_for,
    variant_of,
    wheel_label,
    wheel_variant_json,
)
from tests.helpers.wheels import pure_wheel, variant_wheel

SCHEMA = "https://variants-schema.wheelnext.dev/v0.0.3.json"

#: torch 2.8.0's variants on WheelNext's demo index (labels and properties as served),
#: with the current schema URL (the served file names the older, unversioned one).
TORCH_28: dict[str, Any] = {
    "$schema": SCHEMA,
    "default-priorities": {"namespace": ["nvidia"]},
    "providers": {"nvidia": {"plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin"}},
    "variants": {
        "cu126": {
            "nvidia": {
                "cuda_version_lower_bound": ["12.6"],
                "sm_arch": [
                    "50_real",
                    "60_real",
                    "70_real",
                    "75_real",
                    "80_real",
                    "86_real",
                    "90_real",
                ],
            }
        },
        "cu128": {
            "nvidia": {
                "cuda_version_lower_bound": ["12.8"],
                "sm_arch": ["100_real", "120_real", "75_real", "80_real", "86_real", "90_real"],
            }
        },
        "cu129": {
            "nvidia": {
                "cuda_version_lower_bound": ["12.9"],
                "sm_arch": [
                    "100_real",
                    "120_real",
                    "120_virtual",
                    "75_real",
                    "80_real",
                    "86_real",
                    "90_real",
                ],
            }
        },
    },
}

#: PEP 825's own example (section "Index-level metadata"), comments taken out.
PEP_EXAMPLE: dict[str, Any] = {
    "$schema": SCHEMA,
    "default-priorities": {
        "namespace": ["x86_64", "aarch64", "blas_lapack"],
        "feature": {"blas_lapack": ["library"]},
        "property": {"blas_lapack": {"library": ["mkl", "openblas"]}},
    },
    "variants": {
        "x8664v3_openblas": {"blas_lapack": {"library": ["openblas"]}, "x86_64": {"level": ["v3"]}},
        "x8664v4_mkl": {"blas_lapack": {"library": ["mkl"]}, "x86_64": {"level": ["v4"]}},
    },
}


# --------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    ("filename", "label"),
    [
        # PEP 825 "Variant label" examples
        ("numpy-2.3.2-cp313-cp313t-musllinux_1_2_x86_64.whl", None),
        ("numpy-2.3.2-cp313-cp313t-musllinux_1_2_x86_64-x86_64_v3.whl", "x86_64_v3"),
        ("numpy-2.3.2-cp313-cp313t-musllinux_1_2_x86_64-null.whl", "null"),
        # a build tag starts with a digit (PEP 427): six parts, no label
        ("numpy-2.3.2-1-cp313-cp313t-musllinux_1_2_x86_64.whl", None),
        # build tag and label: seven parts
        ("numpy-2.3.2-1-cp313-cp313t-musllinux_1_2_x86_64-cu129.whl", "cu129"),
        ("torch-2.8.0-cp313-cp313-manylinux_2_28_x86_64-cu129.whl", "cu129"),
        # a label outside ^[0-9a-z_.]+$ is none
        ("torch-2.8.0-cp313-cp313-manylinux_2_28_x86_64-CU129.whl", None),
        ("torch-2.8.0.tar.gz", None),
    ],
)
def test_the_variant_label_is_read_from_the_wheel_file_name(
    filename: str, label: str | None
) -> None:
    assert wheel_label(filename) == label


# --------------------------------------------------------------------------- the metadata


def test_the_pep_example_is_read_with_its_priorities() -> None:
    found = parse_variant_json(PEP_EXAMPLE)
    assert found.format == "0.0.3"
    assert found.supported_format
    assert found.namespaces == ("x86_64", "aarch64", "blas_lapack")
    assert found.features == {"blas_lapack": ("library",)}
    assert found.values == {"blas_lapack": {"library": ("mkl", "openblas")}}
    assert found.variants["x8664v4_mkl"] == {
        "blas_lapack": {"library": ("mkl",)},
        "x86_64": {"level": ("v4",)},
    }


def _broken(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(TORCH_28)
    here = data
    for key in path[:-1]:
        here = here[key]
    if value is _DELETE:
        del here[path[-1]]
    else:
        here[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("$schema",), _DELETE, "$schema"),
        (("default-priorities",), _DELETE, "default-priorities"),
        (("default-priorities", "namespace"), ["amd"], "namespace nvidia is not in"),
        (("variants", "CU130"), {}, "variant label 'CU130'"),
        (("variants", "null"), {"nvidia": {"sm_arch": ["90_real"]}}, "reserved"),
        (("variants", "cu126", "nvidia", "sm_arch"), ["90 real"], "sm_arch"),
        (("variants", "cu126", "nvidia", "sm_arch"), "90_real", "sm_arch"),
        (("variants", "cu126", "Nvidia"), {}, "namespace 'Nvidia'"),
        (("variants",), [], "variants is not an object"),
    ],
)
def test_metadata_off_the_format_is_refused_naming_what(
    path: tuple[str, ...], value: Any, said: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_variant_json(_broken(path, value), source="torch-2.8.0-variants.json")
    assert "torch-2.8.0-variants.json" in str(info.value)
    assert said in str(info.value)


def test_a_variant_wheel_carries_its_own_label_in_variant_json(tmp_path: Path) -> None:
    wheel = variant_wheel(tmp_path, "torch", "2.8.0", "cu128", TORCH_28)
    found = wheel_variant_json(wheel)
    assert list(found.variants) == ["cu128"]
    assert found.source.endswith("torch-2.8.0.dist-info/variant.json")


def test_a_wheel_without_variant_json_is_no_variant_wheel(tmp_path: Path) -> None:
    plain = pure_wheel(tmp_path, "torch", "2.8.0", "here")
    labelled = plain.rename(plain.with_name("torch-2.8.0-py3-none-any-cu128.whl"))
    with pytest.raises(InvalidInput, match=r"0 \*\.dist-info/variant\.json"):
        wheel_variant_json(labelled)


# --------------------------------------------------------------------------- providers


def test_the_nvidia_values_follow_the_provider() -> None:
    props = nvidia_properties("sm_89", "12.8")
    # plugin.py: same-major real code at or below the minor, then {major}0_virtual
    assert props["sm_arch"] == ("89_real", *(f"8{n}_real" for n in range(8, -1, -1)), "80_virtual")
    lower = props["cuda_version_lower_bound"]
    assert lower[:3] == ("12.8", "12.7", "12.6")
    assert "12" in lower
    assert "11.20" in lower
    assert "12.9" not in lower
    assert "13" not in lower
    upper = props["cuda_version_upper_bound"]
    assert upper[0] == "15.20"
    assert "13" in upper
    assert "12.9" in upper
    assert "12.8" not in upper
    assert "12" not in upper


def test_blackwell_and_arch_specific_names_map_to_their_compute_capability() -> None:
    assert nvidia_properties("sm_120", "13.0")["sm_arch"] == ("120_real", "120_virtual")
    assert nvidia_properties("sm_90a", "12.8")["sm_arch"] == ("90_real", "90_virtual")
    # below 5.0 the provider reports no sm_arch; a driver outside 11..15 no CUDA bounds
    assert "sm_arch" not in nvidia_properties("sm_37", "11.4")
    assert nvidia_properties("sm_80", "10.2") == {"sm_arch": ("80_real", "80_virtual")}


@pytest.mark.parametrize(
    ("gfx", "chain"),
    [
        ("gfx1151", ("gfx1151", "gfx11_5", "gfx11")),  # rocm-bootstrap packaging_chain
        ("gfx1201", ("gfx1201", "gfx12_0", "gfx12")),  # rocm-bootstrap-detect --hierarchy
        ("gfx1100", ("gfx1100", "gfx11_0", "gfx11")),
        ("gfx942", ("gfx942", "gfx9_4", "gfx9")),
        ("gfx90a", ("gfx90a", "gfx9_0", "gfx9")),
    ],
)
def test_the_amd_values_are_the_target_then_its_sub_family_and_family(
    gfx: str, chain: tuple[str, ...]
) -> None:
    assert amd_properties(gfx) == {"gfx_arch": chain}
    assert supported_for(gfx).properties == {"amd": {"gfx_arch": chain}}


# --------------------------------------------------------------------------- choosing


@pytest.mark.parametrize(
    ("arch", "cuda", "label"),
    [
        ("sm_90", "12.9", "cu129"),  # every variant fits: the highest lower bound wins
        ("sm_90", "12.8", "cu128"),  # cu129 needs CUDA 12.9
        ("sm_90", "12.6", "cu126"),
        ("sm_120", "12.8", "cu128"),
        ("sm_61", "12.9", "cu126"),  # Pascal: 60_real code runs on 6.1
        ("sm_50", "12.9", "cu126"),
        ("sm_120", "12.6", None),  # cu126 has no Blackwell code, the rest need newer CUDA
        ("sm_37", "12.9", None),
        ("gfx1100", None, None),  # no provider for the nvidia namespace on AMD
    ],
)
def test_the_variant_chosen_for_a_target(arch: str, cuda: str | None, label: str | None) -> None:
    choice = choose(parse_variant_json(TORCH_28), supported_for(arch, cuda))
    assert choice.label == label
    if label is None:
        assert set(choice.refused) == {"cu126", "cu128", "cu129"}
    else:
        assert choice.ranked[0] == label
        assert (
            f"nvidia :: cuda_version_lower_bound :: {label[2:4]}.{label[4:]}" in choice.properties
        )


def test_why_no_variant_fits_names_each_label() -> None:
    choice = choose(parse_variant_json(TORCH_28), supported_for("sm_120", "12.6"))
    why = choice.why_none()
    assert "cu126: nvidia :: sm_arch" in why
    assert "sm_120, CUDA 12.6" in why
    assert "cu128: nvidia :: cuda_version_lower_bound :: 12.8" in why


def test_an_unknown_format_version_is_unsupported() -> None:
    # the demo index serves torch 2.8.0 with the unversioned, older schema URL
    old = {**TORCH_28, "$schema": "https://variants-schema.wheelnext.dev/"}
    choice = choose(parse_variant_json(old), supported_for("sm_90", "12.9"))
    assert choice.label is None
    assert "unknown variant format" in choice.why_none()


def test_default_priorities_order_values_before_the_provider() -> None:
    # PEP 825's example: "mkl" is preferred to "openblas" by default-priorities even
    # where the provider lists openblas first; level v4 is listed first by the provider.
    target = Supported(
        {"x86_64": {"level": ("v4", "v3")}, "blas_lapack": {"library": ("openblas", "mkl")}}
    )
    found = parse_variant_json(PEP_EXAMPLE)
    assert choose(found, target).ranked == ("x8664v4_mkl", "x8664v3_openblas")
    v3_only = Supported(
        {"x86_64": {"level": ("v3",)}, "blas_lapack": {"library": ("openblas", "mkl")}}
    )
    assert choose(found, v3_only).label == "x8664v3_openblas"


def test_more_properties_win_a_tie_then_the_label_and_null_comes_last() -> None:
    data = {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": ["amd"]},
        "variants": {
            "null": {},
            "b_family": {"amd": {"gfx_arch": ["gfx11"]}},
            "a_family": {"amd": {"gfx_arch": ["gfx11"]}},
            "target": {"amd": {"gfx_arch": ["gfx1151"]}},
        },
    }
    choice = choose(parse_variant_json(data), supported_for("gfx1151"))
    assert choice.ranked == ("target", "a_family", "b_family", "null")
    assert choose(parse_variant_json(data), supported_for("gfx1100")).ranked == (
        "a_family",
        "b_family",
        "null",
    )
    assert choose(parse_variant_json(data), supported_for("gfx942")).label == "null"


def test_only_the_labels_asked_for_are_considered() -> None:
    choice = choose(parse_variant_json(TORCH_28), supported_for("sm_90", "12.9"), labels=("cu126",))
    assert choice.label == "cu126"
    assert choice.ranked == ("cu126",)


# --------------------------------------------------------------------------- recorded


def test_the_lock_line_reads_back_and_older_locks_have_none() -> None:
    chosen = WheelVariant(
        "torch",
        "2.8.0",
        "cu128",
        ("nvidia :: cuda_version_lower_bound :: 12.8", "nvidia :: sm_arch :: 90_real"),
        "http://127.0.0.1:1/simple/torch/torch-2.8.0-variants.json",
        ("sha256:" + "a" * 64,),
    )
    text = "# envforge-lock: recipe=x inputs=sha256:" + "0" * 64 + "\n" + chosen.lock_line()
    assert chosen.lock_line().count("\n") == 1
    assert lock_variants(text) == (chosen,)
    assert lock_variants("torch==2.8.0 \\\n    --hash=sha256:" + "0" * 64 + "\n") == ()
    assert variant_of({"variant": chosen.to_dict()}) == chosen
    assert variant_of({"torch": "torch==2.8.0"}) is None


def test_a_source_that_would_break_the_line_is_left_out() -> None:
    odd = WheelVariant("torch", "2.8.0", "cu128", (), "http://x/a\nrequests==1.0", ())
    line = odd.lock_line()
    assert line.count("\n") == 1
    assert "requests" not in line
    assert lock_variants(line)[0].source == ""
