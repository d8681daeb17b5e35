"""Every source a user sees is one they can open (issue 20 §5): every source in the shipped
tables (envforge/data/*.yaml) and recipes (recipes/*.yaml), walked from the raw YAML, and
``envforge solve``'s output for every arch the table knows. The accepted shape is
:mod:`envforge.knowledge.links`'s: ``; ``-separated citations, each an http(s) URL, a GitHub
reference (owner/repo#N) or a named public document ("... (named public document)"), or a
doubt marked [?]; at least one reference; never a path to internal notes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from envforge.knowledge import load_table
from envforge.knowledge.links import citations, evidence_links, source_problem
from envforge.knowledge.table import CompatTable
from envforge.recipe.catalogue import Catalogue
from envforge.solve.solver import NoStack, SolveRequest, known_archs, solve
from tests.helpers import paths

ROOT = paths.ROOT
TABLE = load_table()
DATA_FILES = sorted((ROOT / "envforge" / "data").glob("*.yaml"))
RECIPE_FILES = sorted((ROOT / "recipes").glob("*.yaml"))


def _is_source_key(key: object) -> bool:
    """``source``, ``sources``, ``*_source`` and ``evidence`` keys hold sources."""
    return isinstance(key, str) and ("source" in key or key == "evidence")


def _texts(node: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield where, node
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _texts(item, f"{where}[{i}]")
    elif isinstance(node, dict):
        for key, item in node.items():
            yield from _texts(item, f"{where}.{key}")
    else:
        raise AssertionError(f"{where}: a source must be text, got {node!r}")


def raw_sources(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every (path, text) under a source key of a parsed YAML document."""
    if isinstance(node, dict):
        for key, item in node.items():
            if _is_source_key(key):
                yield from _texts(item, f"{where}.{key}")
            else:
                yield from raw_sources(item, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from raw_sources(item, f"{where}[{i}]")


def _file_sources(files: list[Path]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in files:
        found += raw_sources(yaml.safe_load(path.read_text(encoding="utf-8")), path.name)
    return found


RAW_DATA_SOURCES = _file_sources(DATA_FILES)
RAW_RECIPE_SOURCES = _file_sources(RECIPE_FILES)


def test_the_walk_reaches_every_file() -> None:
    for path in DATA_FILES + RECIPE_FILES:
        names = {w.split(".")[0] for w, _ in RAW_DATA_SOURCES + RAW_RECIPE_SOURCES}
        assert path.stem in names, f"{path.name}: no source found"
    assert len(RAW_DATA_SOURCES) > 300


@pytest.mark.parametrize(("where", "text"), RAW_DATA_SOURCES)
def test_every_data_source_can_be_opened(where: str, text: str) -> None:
    problem = source_problem(TABLE.cite(text))
    assert problem is None, f"{where}: {text!r} {problem}"


@pytest.mark.parametrize(("where", "text"), RAW_RECIPE_SOURCES)
def test_every_raw_recipe_source_is_a_url(where: str, text: str) -> None:
    assert text.startswith("https://"), f"{where}: {text!r}"
    assert source_problem(text) is None, f"{where}: {text!r}"


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
    for k in t.cuda_toolkits:
        yield f"cuda_toolkits {k.version}", k.source
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
        (
            "pytorch/pytorch#1 (see also the notes, #2)",
            ["https://github.com/pytorch/pytorch/issues/1"],
        ),
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


@pytest.mark.parametrize(
    "text",
    [
        "https://github.com/pytorch/pytorch/blob/main/RELEASE.md (release matrix)",
        "pytorch/pytorch#107302, #132179 (2.3.0 is the first release supporting NumPy 2)",
        "RFC pytorch/pytorch#190355; unslothai/unsloth PR #8412",
        "PyPI's torch project files (named public document): cp tags",
        "Debian and Ubuntu release notes (named public documents): each release's python3",
        "pytorch/test-infra#8670 (nightly set); release set unconfirmed [?]",
        "WHEEL (TORCH_CUDA_ARCH_LIST 3.7;5.0;6.0) https://example.org/x",
    ],
)
def test_accepted_source_shapes(text: str) -> None:
    assert source_problem(text) is None, text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("https://example.org/x; seen in third-party run logs [secondary]", "third-party"),
        ("PyPI's torch wheels", "PyPI"),  # a document is named only with the mark
        ("pytorch#157517", "pytorch#157517"),  # not owner/repo
        ("unconfirmed [?]", "names no URL"),  # a doubt alone is no source
        ("https://example.org/x; see audit-2026-11-25.md", "internal"),
        ("MOI90", "MOI90"),  # an unexpanded table key is no source either
    ],
)
def test_refused_source_shapes(text: str, why: str) -> None:
    problem = source_problem(text)
    assert problem is not None, text
    assert why in problem, (text, problem)


def test_citations_split_outside_brackets_only() -> None:
    assert citations("A (x; y); B [p; q]; C 3.7;5.0") == ["A (x; y)", "B [p; q]", "C 3.7;5.0"]


def test_solve_notes_cite_no_bare_key() -> None:
    """Notes show an arch's official support with the table's keys expanded."""
    solution = solve(SolveRequest(arch="gfx1035"), TABLE)
    official = next(n for n in solution.notes if "official support" in n)
    assert "PCIIDS" not in official
    assert "https://pci-ids.ucw.cz/" in official
