"""A companion whose build lives on another variant's index (torchaudio 2.11.0+cu130
beside torch 2.15.0+cu132: the cu132 index has none, pytorch/pytorch#193651) is installed
from that index, for a recipe's ``packages`` and a project's requirements alike."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envforge import lock
from envforge.errors import ConstraintViolation, InvalidInput
from envforge.knowledge.companion_route import sibling_index
from envforge.project.model import Project
from envforge.project.resolve import project_stack
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.render.context import RenderOptions
from envforge.render.dockerfile import render_dockerfile
from envforge.render.venv import plan_venv
from envforge.stack import stack_of

CU130 = "https://download.pytorch.org/whl/cu130"
CU132 = "https://download.pytorch.org/whl/cu132"


def cu132(*packages: str) -> Recipe:
    """The sm_89 recipe moved to torch 2.15.0+cu132 (what `solve sm_89` picks)."""
    base = Catalogue.default({}).load("sm_89")
    torch = replace(base.torch, version="2.15.0", index=CU132)
    return replace(base, torch=torch, cuda="13.2", python="3.13", packages=packages)


def test_sibling_index_swaps_the_variant_folder() -> None:
    assert sibling_index(CU132, "cu132", "cu130") == CU130
    assert sibling_index(CU132 + "/", "cu132", "cu130") == CU130
    assert sibling_index("https://mirror.example/whl/cu132", "cu132", "cu130") == (
        "https://mirror.example/whl/cu130"
    )
    assert sibling_index("https://mirror.example/simple", "cu132", "cu130") is None
    assert sibling_index(None, "cu132", "cu130") is None


@pytest.mark.parametrize("entry", ["torchaudio", "torchaudio==2.11.0", "torchaudio==2.11.0+cu130"])
def test_recipe_torchaudio_on_cu132_comes_from_the_cu130_index(entry: str) -> None:
    stack = stack_of(cu132("torchvision", entry))
    vision, audio = stack.companions
    assert vision.requirement == "torchvision==0.29.2+cu132"
    assert vision.index is None
    assert audio.requirement == "torchaudio==2.11.0+cu130"
    assert audio.index == CU130
    assert "no cu132 build" in audio.reason
    assert "stable ABI" in audio.reason
    assert "pytorch/pytorch/issues/193651" in audio.source
    # torch's index alone serves the first layer: torchaudio is not asked for there
    assert stack.first_layer() == ("torch==2.15.0+cu132", "torchvision==0.29.2+cu132", stack.numpy)
    assert stack.indexed_lines() == (("torchaudio==2.11.0+cu130", CU130),)
    assert "torchaudio==2.11.0+cu130" not in stack.install_lines()
    assert "torchaudio" in stack.family()
    assert stack.to_dict()["companions"][1]["index"] == CU130
    assert "index" not in stack.to_dict()["companions"][0]


def test_the_own_variant_build_keeps_the_stacks_index() -> None:
    base = Catalogue.default({}).load("sm_89")  # torch 2.14.1+cu130
    (audio,) = stack_of(replace(base, packages=("torchaudio",))).companions
    assert audio.requirement == "torchaudio==2.11.0+cu130"
    assert audio.index is None


def test_dockerfile_and_venv_script_install_it_from_the_cu130_index_only() -> None:
    recipe = cu132("torchaudio")
    text = render_dockerfile(recipe, RenderOptions(mirrors=()))
    torch_step = next(line for line in text.splitlines() if "torch==2.15.0+cu132" in line)
    assert "torchaudio" not in torch_step
    assert f'url = \\"{CU130}\\"' in text or f'url = "{CU130}"' in text
    assert "explicit = true" in text
    assert f"--index-url {CU130}" in text  # the pip fallback downloads it alone
    plan = plan_venv(recipe, RenderOptions(mirrors=()))
    assert CU130 in plan.index_sources
    assert "torchaudio==2.11.0+cu130" in plan.index_sources


def test_a_projects_torchaudio_on_cu132_is_routed_too() -> None:
    project = Project(
        root=Path("/p"),
        source=Path("/p/requirements.txt"),
        name="p",
        requirements=("torch", "torchaudio>=2.9"),
    )
    stack = project_stack(project, cu132())
    (audio,) = stack.companions
    assert audio.requirement == "torchaudio==2.11.0+cu130"
    assert audio.index == CU130
    assert "the project requires torchaudio>=2.9" in audio.reason
    assert stack.project == ("torch",)
    assert stack.indexed_lines() == (("torchaudio==2.11.0+cu130", CU130),)
    assert all("torchaudio" not in line for line in stack.first_layer())


def test_a_lock_refuses_it_naming_the_index(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        lock.write_lock(cu132("torchaudio"), output=tmp_path / "x.lock.txt")
    line = err.value.one_line()
    assert "torchaudio comes from its own index" in line
    assert CU130 in line
    assert not (tmp_path / "x.lock.txt").exists()


def test_torchaudio_2_11_has_no_cp315_wheel_recipe_and_project_refused() -> None:
    """torchaudio 2.11.0 has cp310-cp314 wheels only (the package index's listing):
    beside torch 2.15 on Python 3.15 it is refused, as a recipe package and as a
    project requirement."""
    with pytest.raises(ConstraintViolation) as err:
        stack_of(replace(cu132("torchaudio"), python="3.15"))
    assert err.value.rule == "companion-python"
    assert "CPython >=3.10,<3.15 only, not 3.15" in err.value.one_line()
    project = Project(
        root=Path("/p"), source=Path("/p/requirements.txt"), name="p", requirements=("torchaudio",)
    )
    with pytest.raises(ConstraintViolation) as err:
        project_stack(project, replace(cu132(), python="3.15"))
    assert err.value.rule == "companion-python"
    assert "/p/requirements.txt" in err.value.one_line()
    # torchvision has no such cap: it follows torch's CPythons
    assert stack_of(replace(cu132("torchvision"), python="3.15")).companions
