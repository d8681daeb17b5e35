"""A project's torch family comes from the stack (issue 26 §1): torchvision, torchaudio
and triton named by a project are pinned to the pairing release with the variant's
local tag and installed from the stack's index (or the wheelhouse), as the recipe's own
``packages`` are; a pin that contradicts the stack is exit 2 before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envforge import lock
from envforge.cli import main
from envforge.errors import ConstraintViolation, ExitCode, Unavailable
from envforge.project.model import Project
from envforge.project.resolve import project_stack
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.stack import stack_of


def recipe(name: str) -> Recipe:
    return Catalogue.default({}).load(name)


def project(*requirements: str) -> Project:
    return Project(
        root=Path("/p"), source=Path("/p/requirements.txt"), name="p", requirements=requirements
    )


def companions(recipe_name: str, *requirements: str) -> dict[str, str]:
    stack = project_stack(project(*requirements), recipe(recipe_name))
    return {pin.name: pin.requirement for pin in stack.companions}


def test_mnist_requirements_take_the_stacks_torchvision() -> None:
    stack = project_stack(project("torch", "torchvision"), recipe("cpu"))
    assert {p.name: p.requirement for p in stack.companions} == {
        "torchvision": "torchvision==0.28.0+cpu"
    }
    # the companion left the project's own lines, so it is never resolved on its own
    # from the default index; torch stays (the stack's pin satisfies it)
    assert stack.project == ("torch",)
    assert stack.first_layer()[:2] == ("torch==2.13.0+cpu", "torchvision==0.28.0+cpu")
    assert "torchvision" in stack.family()


@pytest.mark.parametrize(
    "line",
    [
        "torchvision",
        "torchvision>=0.20",
        "torchvision==0.28.0",
        "torchvision==0.28.0+cpu",
        "TorchVision ~= 0.28.0",
    ],
)
def test_bare_ranged_and_matching_pins_become_the_pairing(line: str) -> None:
    assert companions("cpu", line) == {"torchvision": "torchvision==0.28.0+cpu"}


def test_torchaudio_pairs_too_and_the_reason_names_the_project() -> None:
    stack = project_stack(project("torch", "torchaudio"), recipe("cpu"))
    (pin,) = stack.companions
    assert pin.name == "torchaudio"
    assert pin.requirement.startswith("torchaudio==")
    assert pin.requirement.endswith("+cpu")
    assert "the project requires torchaudio" in pin.reason


def test_a_rocm_stack_gets_its_own_tag() -> None:
    tag = stack_of(recipe("gfx1100")).local_tag
    assert tag is not None
    assert tag.startswith("rocm")
    assert companions("gfx1100", "torchvision")["torchvision"].endswith(f"+{tag}")


def test_a_torch_older_than_the_table_leaves_the_choice_to_the_stacks_index() -> None:
    """gfx1010's torch 1.13.1 predates the companion table: the project's line is kept as
    written but joins the family, so it comes from the rocm5.2 index, never the default."""
    stack = project_stack(project("torchvision", "torchaudio<0.14"), recipe("gfx1010"))
    assert [p.requirement for p in stack.companions] == ["torchvision", "torchaudio<0.14"]
    assert all("uncertain" in p.reason for p in stack.companions)
    assert stack.project == ()


@pytest.mark.parametrize(
    ("line", "rule", "says"),
    [
        # mnist_hogwild's pin, beside torch 2.13.0
        ("torchvision==0.20.0", "companion-pairing", "torchvision==0.28.0+cpu fits"),
        ("torchvision>=0.20,<0.25", "companion-pairing", "excludes torchvision 0.28.0"),
        ("torchvision==0.28.0+cu130", "companion-variant", "another variant's build"),
        ("torchvision==0.1.6", "companion-pairing", "older than every release"),
        ("triton", "companion-variant", "is for the cuda builds"),
        ("xformers==0.0.30", "extension-torch", "requires torch==2.7.0"),
    ],
)
def test_contradictions_are_exit_2_naming_the_project_file(line: str, rule: str, says: str) -> None:
    with pytest.raises(ConstraintViolation) as caught:
        project_stack(project("torch", line), recipe("cpu"))
    error = caught.value
    assert error.exit_code == ExitCode.INVALID_INPUT
    assert error.rule == rule
    assert error.source == "/p/requirements.txt"
    assert says in error.one_line()


def test_a_marker_that_does_not_hold_leaves_the_line_alone() -> None:
    stack = project_stack(project("torchvision==0.1.6; python_version < '3.0'"), recipe("cpu"))
    assert stack.companions == ()
    assert stack.project == ("torchvision==0.1.6; python_version < '3.0'",)


def test_a_companion_named_twice_is_pinned_once() -> None:
    assert stack_of(recipe("cpu")).companions == ()  # the cpu recipe pins none itself
    stack = project_stack(project("torchvision", "torchvision>=0.27"), recipe("cpu"))
    assert [p.requirement for p in stack.companions] == ["torchvision==0.28.0+cpu"]


def test_the_lock_inputs_carry_the_pairing() -> None:
    stack = project_stack(project("torchvision"), recipe("cpu"))
    assert "torchvision==0.28.0+cpu" in stack.requirement_lines()
    assert "torchvision" not in stack.requirement_lines()


def test_a_wheelhouse_without_the_companion_is_exit_4_naming_the_wheel(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    stack = project_stack(project("torch", "torchvision"), recipe("cpu"))
    with pytest.raises(Unavailable) as caught:
        lock.check_wheelhouse(stack, tmp_path)
    line = caught.value.one_line()
    assert "torchvision==0.28.0+cpu" in line
    assert "https://download.pytorch.org/whl/cpu" in line


def test_an_unreachable_index_names_the_family_wheels() -> None:
    stack = project_stack(project("torchvision"), recipe("cpu"))
    said = lock.family_wheels(stack)
    assert "torch==2.13.0+cpu, torchvision==0.28.0+cpu" in said
    assert "'torchvision==0.28.0+cpu'" in said


def write_project(root: Path, *lines: str) -> Path:
    root.mkdir()
    (root / "requirements.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_show_says_where_the_projects_torchvision_comes_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    root = write_project(tmp_path / "mnist", "torch", "torchvision")
    assert main(["show", "cpu", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "requires   torchvision -> torchvision==0.28.0+cpu (the stack's, from "
        "https://download.pytorch.org/whl/cpu or the wheelhouse)" in out
    )
    assert main(["show", "cpu", "--project", str(root), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)["project"]
    assert view["from_stack"] == {
        "torch": "torch==2.13.0+cpu",
        "torchvision": "torchvision==0.28.0+cpu",
    }


def test_show_refuses_a_pin_that_does_not_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    root = write_project(tmp_path / "hogwild", "torch", "torchvision==0.20.0")
    assert main(["show", "cpu", "--project", str(root)]) == ExitCode.INVALID_INPUT
    err = capsys.readouterr().err
    assert "fits the stack" not in err
    assert "torchvision==0.28.0+cpu fits" in err
    assert str(root / "requirements.txt") in err
