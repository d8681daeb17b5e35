"""The stack value: computed once from a recipe, read by render, lock, probe and certificate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from envforge import lock
from envforge.errors import InvalidInput
from envforge.probe.spec import ProbeSpec
from envforge.publish.certificate import issue
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe, Torch
from envforge.render import RenderOptions, plan_venv, render_dockerfile
from envforge.stack import Pin, Stack, stack_of


def cpu() -> Recipe:
    return Catalogue.default().load("cpu")


def test_stack_of_cpu_recipe() -> None:
    stack = stack_of(cpu())
    assert stack.torch == "torch==2.13.0+cpu"
    assert stack.torch_version == "2.13.0"
    assert stack.local_tag == "cpu"
    assert stack.accelerator == "cpu"
    assert stack.index_form == "index-url"
    assert stack.numpy == "numpy>=1.26,<3"
    assert stack.requirement_lines() == ("torch==2.13.0+cpu", "numpy>=1.26,<3")
    assert stack.distributions() == ("torch", "numpy")


def test_default_index_torch_has_no_local_tag() -> None:
    recipe = replace(cpu(), torch=Torch(version="2.13.0", index=None))
    stack = stack_of(recipe)
    assert stack.torch == "torch==2.13.0"
    assert stack.local_tag is None
    assert stack.index_form is None


def test_bad_torch_version_on_an_index_is_one_line() -> None:
    recipe = replace(cpu(), torch=Torch(version="two", index="https://127.0.0.1/simple"))
    with pytest.raises(InvalidInput, match=r"torch\.version"):
        stack_of(recipe)


def _with_companion(recipe: Recipe) -> Stack:
    pin = Pin("torchvision", "torchvision==0.28.0+cpu", "pairs with torch 2.13.0", "https://x")
    return replace(stack_of(recipe), companions=(pin,), packages=("Pillow>=10",))


def test_every_stage_reads_the_stack_it_is_given() -> None:
    """A companion added to the stack reaches the Dockerfile, the venv plan, the lock's
    inputs, the probe and the certificate without any stage knowing about it."""
    recipe = cpu()
    stack = _with_companion(recipe)
    assert stack.requirement_lines() == (
        "torch==2.13.0+cpu",
        "numpy>=1.26,<3",
        "torchvision==0.28.0+cpu",
        "Pillow>=10",
    )
    assert stack.constraint_lines()[-1] == "torchvision==0.28.0+cpu"
    assert stack.distributions() == ("torch", "numpy", "torchvision", "pillow")
    assert " torchvision==0.28.0+cpu " in render_dockerfile(recipe, RenderOptions(), stack)
    plan = plan_venv(recipe, RenderOptions(), stack)
    assert "torchvision==0.28.0+cpu" in plan.requirements
    assert "torchvision==0.28.0+cpu" in plan.constraints
    assert lock.inputs_digest(recipe, stack) != lock.inputs_digest(recipe)
    spec = ProbeSpec.from_recipe(recipe, stack=stack)
    assert spec.distributions == stack.distributions()
    cert = issue(
        report={"status": "pass"},
        recipe_name=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        layers=["sha256:" + "0" * 64],
        config={},
        candidate_id="sha256:" + "1" * 64,
        stack=stack.to_dict(),
    )
    assert cert.data["stack"]["companions"][0]["requirement"] == "torchvision==0.28.0+cpu"


def test_project_requirements_go_on_top() -> None:
    stack = stack_of(cpu()).with_project(("einops==0.8.1",))
    assert stack.requirement_lines()[-1] == "einops==0.8.1"
    assert stack.distributions()[-1] == "einops"
    assert stack.constraint_lines() == ("torch==2.13.0+cpu", "numpy>=1.26,<3")
