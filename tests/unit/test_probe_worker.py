"""The worker file: Python 3.7 grammar, stdlib-only top level, its own version logic."""

from __future__ import annotations

import ast
import importlib.util
import sys
from types import ModuleType

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envforge.probe import runner
from envforge.probe.report import printable
from envforge.probe.spec import FULL_STEPS


def _source() -> str:
    return runner.worker_source()


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_loader("envforge_probe_worker_under_test", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(_source(), "worker.py", "exec"), module.__dict__)
    return module


def test_worker_parses_with_the_python_37_grammar() -> None:
    ast.parse(_source(), feature_version=(3, 7))


def test_worker_rejects_newer_syntax_under_the_37_grammar() -> None:
    # The check above can fail: walrus is 3.8+.
    with pytest.raises(SyntaxError):
        ast.parse("if (x := 1):\n    pass\n", feature_version=(3, 7))


def test_worker_imports_only_the_standard_library_at_top_level() -> None:
    tree = ast.parse(_source())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    assert names, "expected some imports"
    assert names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


def test_worker_never_imports_envforge() -> None:
    assert "envforge" not in {
        (n.module or "").split(".")[0]
        for n in ast.walk(ast.parse(_source()))
        if isinstance(n, ast.ImportFrom)
    }
    assert "import envforge" not in _source()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1.26.4", (1, 26, 4)),
        ("2.0.0rc1", (2, 0, 0)),
        ("2.13.0+cpu", (2, 13, 0)),
        ("5.2.21151-afdc89f8", (5, 2, 21151)),
        ("v1.2", (1, 2)),
    ],
)
def test_release_numbers(text: str, want: tuple[int, ...]) -> None:
    assert _load_worker().release(text) == want


SPECS = [
    "<2",
    ">=1.21,<2",
    "==1.26.*",
    "!=1.26.*",
    "~=1.26",
    "~=1.26.0",
    "==2.4.6",
    ">2",
    "<=1.26.4",
]
VERSIONS = ["1.21.0", "1.26.0", "1.26.4", "1.27.1", "2.0.0", "2.4.6", "2.5"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("version", VERSIONS)
def test_fallback_comparator_agrees_with_packaging(spec: str, version: str) -> None:
    worker = _load_worker()
    expected = SpecifierSet(spec).contains(Version(version), prereleases=True)
    assert worker.fallback_contains(spec, version) is expected
    assert worker.specifier_contains(spec, version) is expected


@pytest.mark.parametrize(
    ("exc", "oom"),
    [
        (MemoryError(), True),
        (RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("CUDA error: out of memory"), True),
        (RuntimeError("hipErrorOutOfMemory"), True),
        (RuntimeError("HIP error: invalid device function"), False),
    ],
)
def test_out_of_memory_errors_are_recognised(exc: BaseException, oom: bool) -> None:
    assert _load_worker().is_oom(exc) is oom


def test_describe_names_the_type_message_and_place() -> None:
    worker = _load_worker()
    try:
        raise ValueError("bad things")
    except ValueError as exc:
        text = worker.describe(exc)
    assert text.startswith("ValueError: bad things (at test_probe_worker.py:")


def test_every_planned_step_exists_in_the_worker() -> None:

    assert set(FULL_STEPS) <= set(_load_worker().STEPS)


def test_worker_and_runner_agree_on_the_stderr_step_mark() -> None:
    assert _load_worker().STDERR_MARK == runner.STDERR_MARK


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "a\x1b[31mb\x07",
        "x\udc80y\ud800",
        "nul\x00 del\x7f c1\x85",
        "\ufffe\uffff",
        "ü 中 \u00a0 \u200b",
        "line\nbreak\ttab",
    ],
)
def test_worker_and_host_escape_text_alike(text: str) -> None:
    assert _load_worker().printable(text) == printable(text)


class _Hostile(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no string for you")


def test_describe_survives_hostile_messages() -> None:
    worker = _load_worker()
    try:
        raise ValueError("bad \udc80 \x1b[31mred\x07\n" + "x" * 100_000)
    except ValueError as exc:
        text = worker.describe(exc)
    assert text.startswith("ValueError: bad \\udc80 \\x1b[31mred\\x07 xxx")
    assert len(text) <= worker.DETAIL_MAX
    text.encode("utf-8")
    assert worker.describe(_Hostile(), where=False) == "_Hostile: <unprintable _Hostile>"


def test_the_worker_finds_descendants_in_a_process_table() -> None:
    worker = _load_worker()
    table = {1: (0, "S"), 10: (1, "S"), 11: (10, "S"), 12: (11, "Z"), 13: (10, "S"), 20: (1, "S")}
    assert worker.descendants(10, table) == [11, 13]  # the zombie is already dead
    assert worker.descendants(20, table) == []
