"""The stack's pins win over a project's requirements (issue 19 §2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envforge.errors import InvalidInput
from envforge.project.fit import check_fits, pinned_versions
from envforge.project.model import Project
from envforge.stack import Pin, Stack

STACK = Stack(
    torch="torch==2.13.0+cpu",
    torch_version="2.13.0",
    index="https://example.invalid/whl/cpu",
    index_form="index-url",
    accelerator="cpu",
    local_tag="cpu",
    numpy_bound=">=1.26,<3",
    companions=(Pin("torchvision", "torchvision==0.28.0+cpu", "pairs", "https://x.invalid"),),
    packages=("pandas==2.2.3", "tqdm>=4"),
)


def project(*requirements: str, python: str | None = None) -> Project:
    return Project(
        root=Path("/p"),
        source=Path("/p/requirements.txt"),
        name="p",
        requirements=requirements,
        requires_python=python,
    )


def test_pinned_versions() -> None:
    assert pinned_versions(STACK) == {
        "torch": "2.13.0+cpu",
        "torchvision": "0.28.0+cpu",
        "pandas": "2.2.3",
    }


@pytest.mark.parametrize(
    "requirements",
    [
        ("torch>=2.4", "torchvision", "numpy<3", "pandas", "transformers"),
        ("torch==2.13.0",),  # a public version matches the local build
        ("torch~=2.13", "numpy>=2"),
        ("torch<2.0; python_version < '3.8'",),  # does not apply to the stack's Python
        ("Torch[opt-einsum]>=2",),
    ],
)
def test_requirements_the_pins_satisfy(requirements: tuple[str, ...]) -> None:
    check_fits(project(*requirements), STACK, label="cpu", python="3.11")


@pytest.mark.parametrize(
    ("requirement", "expect"),
    [
        ("torch<2.0", "project requires torch<2.0; the cpu stack pins torch 2.13.0+cpu"),
        ("torchvision>=0.29", "the cpu stack pins torchvision 0.28.0+cpu"),
        ("numpy<1.20", "the cpu stack bounds numpy<3,>=1.26"),
        ("numpy>=3.1", "bounds numpy"),
        ("pandas<2", "the cpu stack pins pandas 2.2.3"),
        ("torch @ https://example.invalid/torch.whl#sha256=" + "0" * 64, "(a URL)"),
    ],
)
def test_requirements_the_pins_refuse(requirement: str, expect: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_fits(project("tqdm", requirement), STACK, label="cpu", python="3.11")
    line = caught.value.one_line()
    assert expect in line
    assert line.startswith("/p/requirements.txt: ")
    assert "fix: relax the requirement in requirements.txt" in line


def test_requires_python_must_admit_the_stack_python() -> None:
    check_fits(project("torch", python=">=3.10"), STACK, label="cpu", python="3.11")
    with pytest.raises(InvalidInput, match=r"requires Python >=3\.12; the cpu stack uses"):
        check_fits(project("torch", python=">=3.12"), STACK, label="cpu", python="3.11")
