"""The compiled-extension table (data/extensions.yaml) and what it refuses (issue 18 §6)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
import yaml

from envforge.core.resources import data_file
from envforge.errors import ConstraintViolation, TableError
from envforge.knowledge.extensions import extension_checks, load_extensions, parse_extensions
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import PackageIndex, Recipe
from envforge.stack import stack_of
from tests.helpers import paths

ROOT = paths.ROOT
WHEEL = "https://127.0.0.1/flash_attn-2.8.3+cu12torch2.8-cp311-cp311-linux_x86_64.whl#sha256="


def recipe(name: str, *packages: str) -> Recipe:
    return replace(Catalogue(folders=(ROOT / "recipes",)).load(name), packages=packages)


def test_the_table_loads_sourced_and_dated() -> None:
    table = load_extensions()
    assert table.releases
    assert table.limits
    assert all(r.source.startswith("https://") and r.checked for r in table.releases)
    assert all(li.issue.evidence[0].startswith("https://") and li.checked for li in table.limits)
    assert table.fits("xformers", "2.7.0").version == "0.0.30"  # type: ignore[union-attr]
    assert table.fits("xformers", "2.4.0") is None


def test_an_xformers_release_for_another_torch_is_refused_naming_the_fit() -> None:
    with pytest.raises(ConstraintViolation) as err:
        stack_of(
            replace(
                recipe("sm_80", "xformers==0.0.30"),
                torch=replace(recipe("sm_80").torch, version="2.8.0"),
            )
        )
    line = err.value.one_line()
    assert "packages[0]: xformers==0.0.30 requires torch==2.7.0" in line
    assert "the stack's torch is 2.8.0" in line
    assert "xformers==0.0.32.post2" in line
    assert "https://pypi.org/project/xformers/0.0.30/" in line
    assert "\n" not in line


def test_a_fitting_or_unknown_release_passes() -> None:
    stack_of(recipe("sm_80", "xformers==0.0.35"))  # torch>=2.10 beside 2.14.1
    stack_of(recipe("sm_80", "xformers==0.0.99"))  # not in the table: not checked
    own = replace(
        recipe("sm_80", "xformers==0.0.30"),  # another index's build: not checked
        package_indexes=(PackageIndex("xformers", "https://127.0.0.1/simple"),),
    )
    stack_of(own)


def test_flash_attn_2_on_turing_is_refused_with_its_evidence() -> None:
    with pytest.raises(ConstraintViolation, match=r"flash-attn on sm_75: FlashAttention-2") as err:
        stack_of(recipe("sm_75", "flash-attn==2.8.3"))
    assert "Dao-AILab/flash-attention" in err.value.one_line()
    assert "flash-attn<2" in err.value.one_line()
    stack_of(recipe("sm_75", "flash-attn==1.0.9"))
    stack_of(recipe("sm_80", "flash-attn==2.8.3"))


def test_known_issues_that_hold_are_listed_not_refused() -> None:
    refusals, issues = extension_checks(recipe("sm_80", "flash-attn==2.8.3"), "2.14.1")
    assert not refusals
    assert [i.evidence[0] for i in issues] == ["https://pypi.org/project/flash-attn/#files"]
    by_url = recipe("sm_80", f"flash-attn @ {WHEEL}{'0' * 64}")
    assert extension_checks(by_url, "2.14.1") == ((), ())
    indexed = replace(
        recipe("sm_80", "flash-attn==2.8.3"),
        package_indexes=(PackageIndex("flash-attn", "https://127.0.0.1/simple"),),
    )
    assert extension_checks(indexed, "2.14.1") == ((), ())
    _, issues = extension_checks(recipe("sm_70", "bitsandbytes==0.47.0"), "2.14.1")
    assert ["LLM.int8()" in i.symptom for i in issues] == [True]


def test_bitsandbytes_without_kernels_for_the_arch_is_refused() -> None:
    maxwell = replace(
        recipe("sm_61", "bitsandbytes==0.48.0"), gpu=replace(recipe("sm_61").gpu, arch="sm_52")
    )
    with pytest.raises(ConstraintViolation, match=r"no Maxwell"):
        stack_of(maxwell)
    stack_of(replace(maxwell, packages=("bitsandbytes==0.47.0",)))


def _table(**change: Any) -> dict[str, Any]:
    data = yaml.safe_load(data_file("extensions.yaml").read_text(encoding="utf-8"))
    data["limits"][0].update(change)
    return dict(data)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"evidence": "our notes"}, "limits[0].evidence"),
        ({"below": "gfx90a"}, "limits[0].below"),
        ({"vendor": "intel"}, "limits[0].vendor"),
        ({"versions": "two"}, "limits[0].versions"),
        ({"refuse": "yes"}, "limits[0].refuse"),
        ({"typo": 1}, "limits[0]"),
    ],
)
def test_a_malformed_table_is_one_line_naming_the_key(change: dict[str, Any], words: str) -> None:
    with pytest.raises(TableError) as err:
        parse_extensions(_table(**change))
    assert words in err.value.one_line()


def test_validate_refuses_it_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "envforge", "validate", str(ROOT / "recipes" / "sm_75.yaml"),
         "--set", "packages=[torchvision, flash-attn==2.8.3]"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "packages[1]: flash-attn on sm_75" in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # the line (and its fix)
    assert "Traceback" not in done.stderr


def test_the_maxwell_limit_says_a_source_build_helps_only_below_0_49() -> None:
    """bitsandbytes 0.49.0 removed the Maxwell code from the sources too
    (bitsandbytes-foundation/bitsandbytes#1806): the workaround may not offer a source
    build of a current release (audit 2026-11-27 E7)."""
    limit = next(
        lim
        for lim in load_extensions().limits
        if lim.package == "bitsandbytes" and "Maxwell" in lim.issue.symptom
    )
    assert "bitsandbytes<0.48" in limit.issue.workaround
    assert "0.49.0" in limit.issue.workaround
    assert any("bitsandbytes/pull/1806" in e for e in limit.issue.evidence)
