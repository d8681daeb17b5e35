"""Companion knowledge (envforge/data/companions.yaml) and the stack's companion pins."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envforge.cli import main
from envforge.core.resources import recipes_dir
from envforge.errors import ConstraintViolation, TableError
from envforge.knowledge.companions import (
    companion_names,
    load_companions,
    parse_companions,
    propose_row,
    row_yaml,
)
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.checks import pin_problem
from envforge.recipe.model import Recipe
from envforge.stack import stack_of


def cpu(*packages: str) -> Recipe:
    return replace(Catalogue.default().load("cpu"), packages=packages)


def gpu(name: str, *packages: str) -> Recipe:
    return replace(Catalogue.default().load(name), packages=packages)


# ----------------------------------------------------------------------------- the data


def test_every_row_is_sourced_dated_and_consistent() -> None:
    table = load_companions()
    assert {"torchvision", "torchaudio", "triton"} <= companion_names()
    for row in table.rows:
        assert row.source.startswith("https://"), row
        assert row.checked[:4] == "2026", row
        assert row.confidence in {"verified", "community", "uncertain"}
        SpecifierSet(row.requires)  # parses
        if table.package(row.package).pinned_by_torch:  # type: ignore[union-attr]
            continue
        # a companion admits the torch it was released with
        assert row.admits(row.torch), row


@pytest.mark.parametrize(
    ("torch", "package", "version"),
    [
        ("2.5.1", "torchvision", "0.20.1"),
        ("2.12.1", "torchvision", "0.27.1"),
        ("2.13.0", "torchvision", "0.28.0"),
        ("2.14.0", "torchvision", "0.29.0"),
        ("2.14.1", "torchvision", "0.29.1"),  # Requires-Dist: torch>=2.14.0
        ("2.15.0", "torchvision", "0.29.2"),
        ("2.10.0", "torchaudio", "2.10.0"),
        ("2.13.0", "torchaudio", "2.11.0"),  # the stable ABI: 2.11 and every later torch
        ("2.15.0", "torchaudio", "2.11.0"),  # 2.11.1 is only "uncertain": verified first
        ("2.13.0", "triton", "3.7.1"),
        ("2.14.1", "triton", "3.8.0"),
    ],
)
def test_pairings(torch: str, package: str, version: str) -> None:
    row = load_companions().pairing(package, torch)
    assert row is not None
    assert row.version == version


def test_no_pairing_before_the_table() -> None:
    assert load_companions().pairing("torchvision", "1.13.1") is None


def test_malformed_rows_are_one_line_table_errors() -> None:
    good = {
        "schema": 1,
        "checked": "2026-11-25",
        "packages": {"torchvision": {"families": ["cpu"], "local_tag": True}},
        "rows": [
            {
                "package": "torchvision",
                "version": "0.28.0",
                "torch": "2.13.0",
                "requires": "==2.13.0",
                "source": "https://127.0.0.1/torchvision/0.28.0/",
            }
        ],
    }
    assert parse_companions(good).rows[0].confidence == "verified"
    for bad_row, key in (
        ({"requires": "=>2"}, "requires"),
        ({"source": "shared/knowledge/audit.md"}, "source"),
        ({"package": "torchtext"}, "package"),
        ({"version": "zero"}, "version"),
        ({"confidence": "sure"}, "confidence"),
    ):
        data = json.loads(json.dumps(good))
        data["rows"][0].update(bad_row)
        with pytest.raises(TableError, match=rf"rows\[0\]\.{key}"):
            parse_companions(data)


def test_propose_row_reads_requires_dist() -> None:
    metadata = (
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.30.0\n"
        "Requires-Dist: numpy\nRequires-Dist: torch (==2.16.0)\n\n"
    )
    # the exact pin wins over the upload-date guess
    row = propose_row(metadata, torch="2.15.0", source="https://127.0.0.1/p/", checked="2026-12-01")
    assert row is not None
    assert (row.package, row.version, row.torch, row.requires, row.confidence) == (
        "torchvision",
        "0.30.0",
        "2.16.0",
        "==2.16.0",
        "verified",
    )
    assert 'requires: "==2.16.0"' in row_yaml(row)
    later = metadata.replace("torch (==2.16.0)", "torch>=2.14.0")
    row = propose_row(later, torch="2.14.1", source="https://x/", checked="d")
    assert row is not None
    assert (row.torch, row.requires, row.confidence) == ("2.14.1", ">=2.14.0", "verified")
    outside = propose_row(later, torch="2.13.0", source="https://x/", checked="d")
    assert outside is not None
    assert outside.confidence == "uncertain"
    assert propose_row(later, torch=None, source="https://x/", checked="d") is None
    # an extra's requirement is no torch requirement
    extra = metadata.replace("torch (==2.16.0)", "torch==2.0.0; extra == 'x'")
    row = propose_row(extra, torch="2.16.0", source="https://x/", checked="d")
    assert row is not None
    assert row.confidence == "uncertain"
    # torchaudio 2.11.0's metadata names no torch: proposed ==torch, uncertain, saying so
    bare = "Metadata-Version: 2.1\nName: torchaudio\nVersion: 2.11.0\n\n"
    row = propose_row(bare, torch="2.11.0", source="https://x/", checked="d")
    assert row is not None
    assert (row.requires, row.confidence) == ("==2.11.0", "uncertain")
    assert "names no torch requirement" in row.note
    assert "confidence: uncertain" in row_yaml(row)
    assert propose_row(bare, torch=None, source="https://x/", checked="d") is None
    assert propose_row("Name: x\n\n", torch="2.11.0", source="https://x/", checked="d") is None


def test_a_proposed_row_loads_as_a_table_row() -> None:
    bare = "Metadata-Version: 2.1\nName: torchaudio\nVersion: 2.12.0\n\n"
    row = propose_row(bare, torch="2.16.0", source='https://127.0.0.1/a "b"', checked="d")
    assert row is not None
    text = "schema: 1\nchecked: d\npackages:\n  torchaudio: {families: [cpu], local_tag: true}\n"
    table = parse_companions(yaml.safe_load(f"{text}rows:\n{row_yaml(row)}\n"))
    assert table.rows == (row,)


# ----------------------------------------------------------------------------- the stack


def test_bare_names_are_pinned_to_the_pairing_with_the_variant_tag() -> None:
    stack = stack_of(cpu("torchvision", "torchaudio"))
    assert [c.requirement for c in stack.companions] == [
        "torchvision==0.28.0+cpu",
        "torchaudio==2.11.0+cpu",
    ]
    assert stack.packages == ()
    assert "0.28.0" in stack.companions[0].reason
    assert stack.companions[0].source.startswith("https://")
    assert stack.distributions() == ("torch", "numpy", "torchvision", "torchaudio")


def test_companion_of_a_newer_release_takes_the_same_cuda_major() -> None:
    """torchaudio 2.11 was published with torch 2.11 (no cu132 build): beside torch
    2.15+cu132 the cu130 build fits (same CUDA major)."""
    recipe = gpu("sm_90")
    assert recipe.torch.version == "2.14.1"
    stack = stack_of(replace(recipe, packages=("torchaudio",)))
    assert stack.companions[0].requirement == "torchaudio==2.11.0+cu130"


def test_a_plain_pin_gets_the_variant_tag() -> None:
    assert stack_of(cpu("torchvision==0.28.0")).companions[0].requirement == (
        "torchvision==0.28.0+cpu"
    )


@pytest.mark.parametrize(
    ("entry", "rule", "words"),
    [
        ("torchvision==0.27.0", "companion-pairing", ["torch 2.12.0", "torchvision==0.28.0+cpu"]),
        ("torchvision==0.28.0+rocm6.4", "companion-variant", ["+rocm6.4", "0.28.0+cpu"]),
        ("torchaudio==2.13.0", "companion-release", ["torchaudio 2.13.0", "2.11.0+cpu"]),
        ("torch==2.12.0", "torch-in-packages", ["torch==2.12.0", "2.13.0+cpu"]),
        ("numpy==1.24.0", "numpy-bound", ["numpy==1.24.0", ">=1.26,<3"]),
        ("triton==3.7.1", "companion-variant", ["triton", "cpu build"]),
        ("nvidia-cublas-cu12==12.8.4.1", "runtime-major", ["CUDA 12"]),
    ],
)
def test_contradictions_are_refused_naming_what_fits(
    entry: str, rule: str, words: list[str]
) -> None:
    with pytest.raises(ConstraintViolation) as info:
        stack_of(cpu(entry))
    line = info.value.one_line()
    assert info.value.exit_code == 2
    assert f"[{rule}]" in line
    assert "packages[0]" in line
    assert "\n" not in line
    for word in words:
        assert word in line


def test_runtime_wheels_of_the_stack_major_pass_and_others_are_refused() -> None:
    recipe = gpu("sm_90")  # CUDA 13
    assert stack_of(replace(recipe, packages=("nvidia-cublas==13.1.0.3",))).packages
    with pytest.raises(ConstraintViolation, match="CUDA 12 runtime"):
        stack_of(replace(recipe, packages=("nvidia-cuda-runtime-cu12==12.8.90",)))
    with pytest.raises(ConstraintViolation, match=r"triton==3\.5\.0 pairs with torch 2\.9\.0"):
        stack_of(replace(recipe, packages=("triton==3.5.0",)))
    rocm = gpu("gfx1100")  # ROCm 7.2
    with pytest.raises(ConstraintViolation, match=r"ROCm 6\.4 runtime"):
        stack_of(replace(rocm, packages=("rocm==6.4.0",)))
    with pytest.raises(ConstraintViolation, match="triton-rocm"):
        stack_of(replace(rocm, packages=("triton",)))


def test_pin_problem_takes_bare_companions_and_hashed_urls_only() -> None:
    assert pin_problem("torchvision") is None
    assert pin_problem("Pillow") is not None
    unpinned = pin_problem("torchvision>=0.20")
    assert unpinned is not None
    assert "torchvision alone" in unpinned[1]
    wheel = "https://127.0.0.1/xformers-0.0.30-cp39-abi3-linux_x86_64.whl"
    assert pin_problem(f"xformers @ {wheel}") is not None
    assert pin_problem(f"xformers @ {wheel}#sha256=" + "a" * 64) is None


# ----------------------------------------------------------------------------- commands


def _recipe_file(tmp_path: Path, packages: str) -> Path:
    text = (recipes_dir() / "cpu.yaml").read_text(encoding="utf-8")
    path = tmp_path / "cpu.yaml"
    numpy = 'numpy: ">=1.26,<3"\n'
    path.write_text(text.replace(numpy, f"{numpy}packages: {packages}\n"))
    return path


def test_show_prints_each_companion_with_reason_and_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recipe_file(tmp_path, "[torchvision]")
    assert main(["show", str(path)]) == 0
    output = capsys.readouterr().out
    assert "companions torchvision==0.28.0+cpu" in output
    line = next(x for x in output.splitlines() if x.strip().startswith("torchvision=="))
    assert "requires torch==2.13.0" in line
    assert "[https://" in line


def test_validate_refuses_a_wrong_pairing_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recipe_file(tmp_path, '["torchvision==0.27.0"]')
    assert main(["validate", str(path)]) == 2
    assert "torchvision==0.28.0+cpu fits" in capsys.readouterr().err


def test_solve_with_carries_the_companions_into_the_written_recipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "solved.yaml"
    argv = ["solve", "sm_90", "--with", "torchvision,torchaudio", "--write", str(out), "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in data["companions"]]
    assert names == ["torchvision", "torchaudio"]
    assert all(c["source"].startswith("https://") for c in data["companions"])
    written = out.read_text(encoding="utf-8")
    assert "torchvision==" in written
    assert "torchaudio==" in written
    assert main(["validate", str(out)]) == 0
    assert main(["solve", "sm_90", "--with", "torchtext"]) == 2
    assert "torchtext" in capsys.readouterr().err


def test_shipped_gpu_recipes_pin_torchvision() -> None:
    catalogue = Catalogue.default()
    for name in ("sm_90", "gfx1100", "gfx1030"):
        stack = stack_of(catalogue.load(name))
        (pin,) = stack.companions
        assert pin.name == "torchvision"
        assert pin.requirement.endswith("+" + (stack.local_tag or ""))
        assert Version(pin.requirement.split("==")[1].split("+")[0]) >= Version("0.20")
