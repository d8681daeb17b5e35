"""``--mem`` serves Slurm and Kubernetes alike, in binary units for both."""

from __future__ import annotations

import pytest

from envforge.fleet import values


@pytest.mark.parametrize(
    ("given", "slurm", "k8s"),
    [("64G", "64G", "64Gi"), ("16Gi", "16G", "16Gi"), ("5000", "5000", "5000Mi"), ("", "", "16Gi")],
)
def test_one_memory_size_reads_the_same_on_both_engines(given: str, slurm: str, k8s: str) -> None:
    assert values.mem_problem(given) is None
    assert values.slurm_mem(given) == slurm
    assert values.k8s_mem(given) == k8s


@pytest.mark.parametrize("bad", ["16GB", "5000i", "1.5G", "64g", "-1G"])
def test_other_sizes_are_refused_naming_the_forms(bad: str) -> None:
    assert (
        values.mem_problem(bad)
        == "not a memory size (a whole number with K, M, G or T: 64G, or 64Gi)"
    )
