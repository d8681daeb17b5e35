"""PEP 508 lines with packaging's parser loaded on first use (envforge/core/pep508.py):
the same names and requirements as packaging's, and nothing loaded before a line is read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envforge.core import pep508
from tests.helpers import paths

NAMES = [
    "torchvision",
    "Torch_Vision",
    "oslo.concurrency",
    "a--b__c..d",
    "A-_.B",
    "-leading_",
    "x",
    "",
    "pytorch-triton-rocm",
    "Ünïcode_Name",
]


@pytest.mark.parametrize("name", NAMES)
def test_canonical_name_is_packagings(name: str) -> None:
    assert pep508.canonical_name(name) == canonicalize_name(name)


@pytest.mark.parametrize(
    "text",
    [
        "torchvision",
        "torchvision==0.29.1+cu130",
        'requests==2.32.3; python_version >= "3.8"',
        "Pillow[webp]>=10",
        "wheel @ https://host/path/wheel-0.1-py3-none-any.whl#sha256=" + "0" * 64,
    ],
)
def test_parse_is_packagings_requirement(text: str) -> None:
    assert pep508.parse(text) == Requirement(text)
    assert pep508.requirement(text) == Requirement(text)
    assert pep508.name_of(text) == canonicalize_name(Requirement(text).name)


@pytest.mark.parametrize("text", ["", "==1.0", "torch===", "a b c", "torch[cuda"])
def test_a_line_that_is_not_pep_508_is_none(text: str) -> None:
    assert pep508.parse(text) is None
    assert pep508.name_of(text) is None
    with pytest.raises(InvalidRequirement):
        pep508.requirement(text)


def test_wheel_version() -> None:
    assert pep508.wheel_version("einops-0.8.0-py3-none-any.whl") == "0.8.0"
    assert pep508.wheel_version("einops-0.8.0.tar.gz") is None


def test_nothing_of_packagings_parser_is_loaded_before_a_line_is_read() -> None:
    code = (
        "import sys\n"
        "from envforge.core import pep508\n"
        "assert pep508.canonical_name('A_B') == 'a-b'\n"
        "before = sorted(m for m in sys.modules if m.startswith('packaging'))\n"
        "pep508.parse('torch==2.4.1')\n"
        "print(before, 'packaging.requirements' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[] True"
