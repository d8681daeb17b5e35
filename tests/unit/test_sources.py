"""Every source a user sees is one they can open (issue 20 §5): the table's rows and keys,
the shipped recipes' evidence and sources, and ``envforge solve``'s output for every arch
the table knows. A source is a URL, a GitHub reference (owner/repo#N) or a named public
document; a path to internal notes is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.knowledge import load_table
from envforge.knowledge.links import evidence_links, source_problem
from envforge.knowledge.table import CompatTable
from envforge.recipe.catalogue import Catalogue
from envforge.solve.solver import NoStack, SolveRequest, known_archs, solve

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_table()


def _table_sources(t: CompatTable) -> Iterator[tuple[str, str]]:
    for key, text in t.sources:
        yield f"sources.{key}", text
    yield "numpy_releases.source", t.numpy_source
    for r in t.releases:
        yield f"releases {r.series}.source", r.source
        if r.numpy_source:
            yield f"releases {r.series}.numpy_source", r.numpy_source
        for v in r.variants:
            where = f"releases {r.series} {v.name}"
            yield f"{where}.source", v.source
            yield f"{where}.python_source", v.python_source
            for arch, text in v.arch_sources:
                yield f"{where} {arch}", text
            for broken in v.broken:
                yield f"{where} broken {broken.arch}", broken.source
            for p in v.platforms:
                if p.archs:
                    yield f"{where} {p.platform}.sm_source", p.arch_source
                yield f"{where} {p.platform}.python_source", p.python_source
    for o in t.overrides:
        yield f"hsa_overrides {o.arch}", o.source
    for f in t.driver_floors:
        yield f"nvidia_driver_floor {f.cuda_major}", f.source
    for b in t.base_images:
        yield f"base_images {b.distro}", b.source
    if t.tegra is not None:
        yield "tegra.source", t.tegra.source


TABLE_SOURCES = sorted(set(_table_sources(TABLE)))


@pytest.mark.parametrize(("where", "text"), TABLE_SOURCES)
def test_every_table_source_can_be_opened(where: str, text: str) -> None:
    problem = source_problem(TABLE.cite(text))
    assert problem is None, f"{where}: {text!r} {problem}"


def _recipe_sources() -> Iterator[tuple[str, str]]:
    for recipe in Catalogue(folders=(ROOT / "recipes",)).load_all():
        for s in recipe.sources:
            yield f"{recipe.name}.sources", s
        for k in recipe.known_issues:
            for e in k.evidence:
                yield f"{recipe.name}.known_issues", e
        for env in recipe.env:
            for e in env.evidence:
                yield f"{recipe.name}.env.{env.name}", e


@pytest.mark.parametrize(("where", "text"), sorted(set(_recipe_sources())))
def test_every_recipe_source_is_a_url(where: str, text: str) -> None:
    assert text.startswith("https://"), f"{where}: {text!r}"
    assert source_problem(text) is None, f"{where}: {text!r}"


def test_solve_output_sources_can_be_opened_for_every_arch() -> None:
    solved = 0
    for arch in known_archs(TABLE):
        try:
            solution = solve(SolveRequest(arch=arch), TABLE)
        except NoStack:
            continue
        solved += 1
        for pick in solution.picks:
            assert source_problem(pick.source) is None, (arch, pick.key, pick.source)
        for link in solution.recipe_dict()["sources"]:
            assert link.startswith("https://"), (arch, link)
    assert solved > 30


@pytest.mark.parametrize(
    ("text", "links"),
    [
        # C10: the RFC belongs to pytorch/pytorch, never to a repo named before it
        (
            "pytorch/test-infra#8497 (release/2.14); RM; pytorch/pytorch RFC #190355",
            [
                "https://github.com/pytorch/test-infra/issues/8497",
                "https://github.com/pytorch/pytorch/issues/190355",
            ],
        ),
        (
            "ROCm/legacy-rocm-build#1797, #3015; ROCm/Tensile#1907",
            [
                "https://github.com/ROCm/legacy-rocm-build/issues/1797",
                "https://github.com/ROCm/legacy-rocm-build/issues/3015",
                "https://github.com/ROCm/Tensile/issues/1907",
            ],
        ),
        # a bare #N that does not continue a repo's list is attributed to no repo
        ("pytorch/pytorch#1 (see also the notes, #2)", ["https://github.com/pytorch/pytorch/issues/1"]),
        ("unslothai/unsloth PR #8412", ["https://github.com/unslothai/unsloth/issues/8412"]),
    ],
)
def test_evidence_links_name_the_right_repository(text: str, links: list[str]) -> None:
    assert evidence_links(text) == links


@pytest.mark.parametrize(
    "text",
    [
        "envforge knowledge audit (../shared/knowledge/audit-2026-11-25.md)",
        "AUDIT E12",
        "matrix 1b (widely used)",
        "widely used",
    ],
)
def test_internal_or_missing_sources_are_refused(text: str) -> None:
    assert source_problem(text) is not None
