"""The unit tier needs no torch (``pip install -e '.[dev]'`` alone), and a test that does
need it says so: the ``needs_torch`` marker, skipped with its reason only where torch is
missing, an error where ``ENVFORGE_REQUIRE_TORCH=1`` (CI) (tests/helpers/torch_gate.py)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import pytest

from tests.helpers import paths, torch_gate

UNIT = paths.UNIT


@dataclass
class _Item:
    nodeid: str
    marked: bool
    added: list[pytest.MarkDecorator] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return pytest.mark.needs_torch.mark if self.marked and name == "needs_torch" else None

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.added.append(marker)


def _items() -> list[_Item]:
    return [_Item("t.py::a", marked=True), _Item("t.py::b", marked=False)]


def test_marked_tests_are_skipped_with_the_reason_only_where_torch_is_missing() -> None:
    present = _items()
    assert torch_gate.gate(present, torch_here=True, environ={}) == []
    assert [i.added for i in present] == [[], []]  # never skipped where torch is there
    missing = _items()
    assert torch_gate.gate(missing, torch_here=False, environ={}) == ["t.py::a"]
    (skip,) = missing[0].added
    assert (skip.mark.name, skip.mark.kwargs["reason"]) == ("skip", torch_gate.REASON)
    assert "torch" in torch_gate.REASON
    assert missing[1].added == []


def test_ci_makes_a_missing_torch_an_error_not_a_skip() -> None:
    items = _items()
    with pytest.raises(pytest.UsageError, match=r"ENVFORGE_REQUIRE_TORCH=1 .*\(t\.py::a"):
        torch_gate.gate(items, torch_here=False, environ={"ENVFORGE_REQUIRE_TORCH": "1"})
    assert items[0].added == []
    assert torch_gate.gate(items, torch_here=True, environ={"ENVFORGE_REQUIRE_TORCH": "1"}) == []


def _imports_torch(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import) and any(a.name.split(".")[0] == "torch" for a in sub.names):
            return True
        if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] == "torch":
            return True
        if (
            isinstance(sub, ast.Call)
            and ast.unparse(sub.func).endswith("importorskip")
            and sub.args
            and isinstance(sub.args[0], ast.Constant)
            and str(sub.args[0].value).split(".")[0] == "torch"
        ):
            return True
    return False


def _marked(decorators: list[ast.expr]) -> bool:
    return any("needs_torch" in ast.unparse(d) for d in decorators)


def torch_users(tree: ast.Module) -> list[str]:
    """The places of a test module that import torch without the marker: top-level
    imports always (collection fails without torch), functions unless marked (or the
    module's ``pytestmark`` has it)."""
    module_marked = any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        and "needs_torch" in ast.unparse(n.value)
        for n in tree.body
    )
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_torch(node):
            found.append(f"line {node.lineno}: imported at the top")
        elif (
            isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and _imports_torch(node)
            and not (module_marked or _marked(node.decorator_list))
        ):
            found.append(f"{node.name}: imports torch without @pytest.mark.needs_torch")
    return found


def test_no_unit_test_imports_torch_unmarked() -> None:
    found = {
        path.name: users
        for path in sorted(UNIT.rglob("*.py"))
        if (users := torch_users(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_scan_finds_what_it_is_for() -> None:
    code = """
import torch
from torch.nn import Linear

def test_a():
    import torch

@pytest.mark.needs_torch
def test_b():
    torch = pytest.importorskip("torch")

def test_c():
    pytest.importorskip("torch.cuda")

def test_d():
    import torchvision_like_name_is_not_torch
"""
    assert torch_users(ast.parse(code)) == [
        "line 2: imported at the top",
        "line 3: imported at the top",
        "test_a: imports torch without @pytest.mark.needs_torch",
        "test_c: imports torch without @pytest.mark.needs_torch",
    ]
    assert torch_users(ast.parse("pytestmark = [pytest.mark.needs_torch]\n" + code)) == [
        "line 3: imported at the top",
        "line 4: imported at the top",
    ]
