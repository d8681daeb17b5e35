"""torchcodec and torchao as companions (envforge/data/companions.yaml): their pairing
with torch (their READMEs' and code's: their metadata names no torch), the variant indexes
known not to carry a release (the cu128 index has no torchcodec 0.12 or later,
unslothai/unsloth#10434), the probe's import steps, the audit's companions check; and the
ROCm Triton rows of torch 2.9.0, 2.12 and 2.15."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envforge.audit.model import Collected
from envforge.errors import ConstraintViolation, TableError
from envforge.knowledge import load_table
from envforge.knowledge.companions import load_companions, parse_companions
from envforge.knowledge.refresh import status
from envforge.probe.spec import ProbeSpec
from envforge.project.model import Project
from envforge.project.resolve import project_stack
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.stack import stack_of
from tests.unit.audit.test_audit import add_dist, audit, build_so, make_venv, messages
from tests.unit.knowledge.test_knowledge_watch import DAY, ROOT, _client, _with_release

CU126 = "https://download.pytorch.org/whl/cu126"
CU128 = "https://download.pytorch.org/whl/cu128"


def cuda(torch: str, cuda: str, *packages: str, python: str = "3.12") -> Recipe:
    """The sm_89 recipe moved to torch ``torch`` from the ``cuda`` variant's index."""
    base = Catalogue.default({}).load("sm_89")
    index = "https://download.pytorch.org/whl/cu" + cuda.replace(".", "")
    spec = replace(base.torch, version=torch, index=index)
    return replace(base, torch=spec, cuda=cuda, python=python, packages=packages)


@pytest.mark.parametrize(
    ("torch", "package", "version"),
    [
        ("2.5.1", "torchcodec", "0.1.1"),  # README: 0.1 | 2.5
        ("2.8.0", "torchcodec", "0.7.0"),
        ("2.9.1", "torchcodec", "0.9.1"),
        ("2.10.0", "torchcodec", "0.10.0"),
        ("2.13.0", "torchcodec", "0.16.0"),  # >=2.11; 0.17.0 is only uncertain
        ("2.8.0", "torchao", "0.14.0"),  # built against torch 2.8.0 (its __init__.py)
        ("2.9.0", "torchao", "0.14.1"),
        ("2.9.1", "torchao", "0.15.0"),
        ("2.10.0", "torchao", "0.16.0"),
        ("2.13.0", "torchao", "0.18.0"),  # ABI-stable from 0.17.0: torch >=2.11
        ("2.9.0", "pytorch-triton-rocm", "3.5.0"),
        ("2.12.0", "triton-rocm", "3.7.0"),
        ("2.12.1", "triton-rocm", "3.7.1"),
        ("2.15.0", "triton-rocm", "3.9.0"),
    ],
)
def test_pairings(torch: str, package: str, version: str) -> None:
    row = load_companions().pairing(package, torch)
    assert row is not None
    assert row.version == version
    assert row.source.startswith("https://")


def test_no_pairing_outside_the_readmes_tables() -> None:
    table = load_companions()
    assert table.pairing("torchcodec", "2.4.1") is None
    assert table.pairing("torchao", "2.7.1") is None  # the table starts at 0.13.0
    assert not table.fits("torchao", "0.13.0", "2.9.0")  # C++ kernels: exactly 2.8.0
    assert table.fits("torchcodec", "0.8.1", "2.9.1")  # "2.9" in the README: 2.9.*
    assert not table.fits("torchcodec", "0.10.0", "2.11.0")


def test_the_rocm_triton_rows_that_no_listing_confirmed_are_uncertain() -> None:
    table = load_companions()
    for package, torch in (("pytorch-triton-rocm", "2.9.0"), ("triton-rocm", "2.15.0")):
        row = table.pairing(package, torch)
        assert row is not None
        assert row.confidence == "uncertain"
        assert f"blob/v{torch}/.ci/docker/triton_version.txt" in row.source
    assert table.fits("triton-rocm", "3.9.1", "2.15.0")  # ~=3.9.0
    assert not table.fits("triton-rocm", "3.7.0", "2.12.1")


def test_torchcodec_on_an_index_without_it_comes_from_the_same_cuda_majors() -> None:
    """torch 2.11.0+cu128 pairs with torchcodec 0.16.0 (>=2.11), which the cu128 index does
    not carry: its +cu126 build, from the cu126 index; torchao's own build stays."""
    stack = stack_of(cuda("2.11.0", "12.8", "torchcodec", "torchao"))
    codec, ao = stack.companions
    assert codec.requirement == "torchcodec==0.16.0+cu126"
    assert codec.index == CU126
    assert "the cu128 index carries no torchcodec 0.16.0" in codec.reason
    assert "FFmpeg" in codec.reason  # what it loads from the system
    assert "unslothai/unsloth/issues/10434" in codec.source
    assert ao.requirement == "torchao==0.18.0+cu128"
    assert ao.index is None
    assert stack.indexed_lines() == (("torchcodec==0.16.0+cu126", CU126),)
    pinned = stack_of(cuda("2.11.0", "12.8", "torchcodec==0.11.1"))
    (codec,) = pinned.companions
    assert (codec.requirement, codec.index) == ("torchcodec==0.11.1+cu128", None)


def test_a_projects_torchcodec_is_routed_too() -> None:
    project = Project(
        root=Path("/p"),
        source=Path("/p/requirements.txt"),
        name="p",
        requirements=("torch", "torchcodec>=0.12"),
    )
    stack = project_stack(project, cuda("2.11.0", "12.8"))
    (codec,) = stack.companions
    assert codec.requirement == "torchcodec==0.16.0+cu126"
    assert codec.index == CU126


@pytest.mark.parametrize(
    ("recipe", "rule", "words"),
    [
        (cuda("2.9.0", "12.8", "torchao==0.13.0"), "companion-pairing", ["torchao==0.14.1+cu128"]),
        (cuda("2.11.0", "12.8", "torchcodec==0.10.0"), "companion-pairing", ["torchcodec"]),
        (cuda("2.8.0", "12.8", "torchcodec", python="3.14"), "companion-python", ["3.14"]),
    ],
)
def test_contradictions_are_refused(recipe: Recipe, rule: str, words: list[str]) -> None:
    with pytest.raises(ConstraintViolation) as info:
        stack_of(recipe)
    line = info.value.one_line()
    assert f"[{rule}]" in line
    for word in words:
        assert word in line


def test_no_rocm_builds_are_known() -> None:
    rocm = Catalogue.default({}).load("gfx1100")
    for name in ("torchcodec", "torchao"):
        with pytest.raises(ConstraintViolation, match=r"\[companion-variant\]"):
            stack_of(replace(rocm, packages=(name,)))


def test_missing_names_variant_indexes() -> None:
    data = {
        "schema": 1,
        "checked": "2026-11-28",
        "packages": {"torchcodec": {"families": ["cuda"], "local_tag": True}},
        "rows": [
            {
                "package": "torchcodec",
                "version": "0.16.0",
                "torch": "2.11.0",
                "requires": ">=2.11",
                "source": "https://example.org/x",
                "missing": ["cu128", "x86"],
            }
        ],
    }
    with pytest.raises(TableError, match="x86"):
        parse_companions(data)
    data["rows"][0]["missing"] = ["cu128", "rocm7.2", "cpu"]  # type: ignore[index]
    assert parse_companions(data).rows[0].missing == ("cu128", "rocm7.2", "cpu")


def test_the_probe_imports_them() -> None:
    stack = stack_of(cuda("2.11.0", "12.8", "torchcodec", "torchao"))
    spec = ProbeSpec(distributions=stack.distributions())
    assert {"import:torchcodec", "import:torchao"} <= set(spec.steps)


def test_the_audit_checks_their_pairing_and_takes_a_plain_build_beside_any_torch(
    tmp_path: Path,
) -> None:
    """torchao 0.13.0 beside torch 2.9.0 does not pair; the package index's torchcodec and
    torchao builds (no local tag, no CUDA library) are not CPU builds beside a CUDA torch,
    but a +cpu build is."""
    root, site = make_venv(tmp_path / "venv")
    c10 = build_so(site / "torch" / "lib" / "libc10.so", soname="libc10.so")
    add_dist(site, "torch", "2.9.0+cu128", [c10])
    add_dist(site, "torchao", "0.13.0", [])
    add_dist(site, "torchcodec", "0.9.1", [])
    found = messages(audit(root), None, "companions")
    assert any(
        m.startswith("torchao 0.13.0 does not pair with torch 2.9.0+cu128")
        and "torchao 0.14.1 pairs with it" in m
        for m in found
    ), found
    assert not any("torchcodec" in m for m in found), found
    assert not any("build" in m for m in found), found
    add_dist(site, "torchcodec", "0.9.1+cpu", [])
    (site / "torchcodec-0.9.1.dist-info" / "RECORD").unlink()
    (site / "torchcodec-0.9.1.dist-info" / "METADATA").unlink()
    (site / "torchcodec-0.9.1.dist-info").rmdir()
    collected: Collected = audit(root)
    assert any(
        "torchcodec 0.9.1+cpu is a cpu build" in m and "torchcodec==0.9.1+cu128" in m
        for m in messages(collected, None, "companions")
    )


def test_knowledge_status_watches_them() -> None:
    """The recorded pages (tests/fixtures/index) list nothing newer; a torchcodec 0.18.0
    on the index is named."""
    current = status(load_table(), _client(), ROOT, today=DAY)
    assert current.current
    lines = current.lines()
    assert "  torchcodec: table 0.17.0, index 0.17.0" in lines
    assert "  torchao: table 0.18.0, index 0.18.0" in lines
    behind = status(
        load_table(),
        _client(torchcodec=_with_release("torchcodec", "0.17.0", "0.18.0")),
        ROOT,
        today=DAY,
    )
    assert not behind.current
    assert {w.package: w.newer for w in behind.packages if w.newer} == {"torchcodec": ("0.18.0",)}
