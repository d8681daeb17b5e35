"""The worker package: Python 3.7 grammar, stdlib-only top level, its own version logic,
and the one file it ships as (``python FILE SPEC`` and ``python -c SOURCE SPEC``)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envforge.probe import runner
from envforge.probe.bundle import BOOT, worker_modules
from envforge.probe.report import printable
from envforge.probe.spec import FULL_STEPS
from tests.helpers import paths

PACKAGE = paths.ROOT / "envforge" / "probe" / "worker"


def _source() -> str:
    return runner.worker_source()


def _modules() -> dict[str, str]:
    """Every module of the worker package, by file name (the shipped file's boot.py too)."""
    found = {p.name: p.read_text(encoding="utf-8") for p in sorted(PACKAGE.glob("*.py"))}
    assert {BOOT, "driver.py"} <= set(found), sorted(found)
    return found


def _load_worker() -> SimpleNamespace:
    """The names of every worker module, imported as the shipped file imports them."""
    boot = ModuleType("envforge_probe_worker_boot_under_test")
    exec(compile(_source(), "worker.py", "exec"), boot.__dict__)
    names: dict[str, Any] = {}
    for module in boot.load("envforge_probe_worker_under_test").values():
        names.update(vars(module))
    return SimpleNamespace(**names)


@pytest.mark.parametrize("name", sorted(_modules()))
def test_every_worker_module_parses_with_the_python_37_grammar(name: str) -> None:
    ast.parse(_modules()[name], feature_version=(3, 7))


def test_the_shipped_file_parses_with_the_python_37_grammar() -> None:
    ast.parse(_source(), feature_version=(3, 7))


def test_worker_rejects_newer_syntax_under_the_37_grammar() -> None:
    # The checks above can fail: walrus is 3.8+.
    with pytest.raises(SyntaxError):
        ast.parse("if (x := 1):\n    pass\n", feature_version=(3, 7))


def _imports(source: str) -> tuple[set[str], set[str]]:
    """(absolute top-level imports, sibling modules imported relatively), module level."""
    absolute: set[str] = set()
    relative: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            absolute.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1, ast.dump(node)  # siblings only
            relative.add(node.module or "")
        elif isinstance(node, ast.ImportFrom) and node.module:
            absolute.add(node.module.split(".")[0])
    return absolute, relative


@pytest.mark.parametrize("name", sorted(_modules()))
def test_worker_modules_import_only_the_standard_library_and_each_other(name: str) -> None:
    absolute, relative = _imports(_modules()[name])
    stdlib = set(sys.stdlib_module_names)
    assert absolute <= stdlib, absolute - stdlib
    assert {f"{m}.py" for m in relative} <= set(_modules()) - {BOOT}, relative


def test_the_import_check_can_fail() -> None:
    absolute, relative = _imports("import torch\nfrom .common import x\nfrom os import path\n")
    assert absolute == {"torch", "os"}
    assert relative == {"common"}


@pytest.mark.parametrize("name", sorted(_modules()))
def test_worker_modules_never_import_envforge(name: str) -> None:
    source = _modules()[name]
    assert "envforge" not in {
        (n.module or "").split(".")[0]
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ImportFrom)
    }
    assert "import envforge" not in source


def test_the_shipped_file_carries_every_module_but_boot() -> None:
    shipped = {("__init__" if k == "" else k) + ".py" for k in worker_modules()}
    assert shipped == set(_modules()) - {BOOT}


def _events(argv: list[str], cwd: Path) -> list[dict[str, Any]]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


_CHECK = (
    "import sys\n"
    "assert 'envforge_probe_worker.driver' in sys.modules\n"
    "assert not [f for f in sys.meta_path if type(f).__name__ == 'SourceImporter']\n"
)
_SPEC = {
    "vendor": "none",
    "steps": ["no-such-step", "check:x"],
    "checks": [{"step": "check:x", "path": None, "source": _CHECK}],
}


@pytest.mark.parametrize("how", ["file", "-c"])
def test_the_shipped_file_runs_the_protocol(tmp_path: Path, how: str) -> None:
    worker = tmp_path / "envforge_probe_worker.py"
    worker.write_text(_source(), encoding="utf-8")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_SPEC), encoding="utf-8")
    program = [str(worker)] if how == "file" else ["-c", _source()]
    events = _events([sys.executable, *program, str(spec)], tmp_path)
    assert [e["event"] for e in events] == ["hello", "start", "end", "start", "end", "done"]
    assert events[0]["protocol"] == 1
    assert events[2]["status"] == "fail"
    assert "no step named 'no-such-step'" in events[2]["detail"]
    assert events[4]["status"] == "pass", events[4]["detail"]


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


def _fake_cuda_torch(free_gib: int) -> SimpleNamespace:
    gib = 1 << 30
    props = SimpleNamespace(total_memory=80 * gib, uuid="GPU-1", name="H200")
    cuda = SimpleNamespace(
        device_count=lambda: 1,
        memory_reserved=lambda i: gib,
        get_device_properties=lambda i: props,
        mem_get_info=lambda i: (free_gib * gib, 80 * gib),
    )
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(hip=None, cuda="13.0"))


@pytest.mark.parametrize(
    ("free", "need", "status", "text"),
    [
        (70, None, "pass", "device 0: 70.00 GiB free of 80.00 GiB"),
        (10, None, "warn", "device 0: 10.00 GiB free of 80.00 GiB, 69.00 GiB (86%) held by other"),
        (10, 20, "fail", "processes, below --require-free 20 GiB"),
    ],
)
def test_the_memory_step_names_free_memory_and_other_holders(
    free: int, need: int | None, status: str, text: str
) -> None:
    worker = _load_worker()
    ctx = worker.Context({"vendor": "nvidia", "require_free": need})
    ctx.torch, ctx.device = _fake_cuda_torch(free), "cuda"
    detail, data, got = worker.step_memory(ctx)
    assert got == status
    assert text in detail
    assert data["devices"][0]["busy"] is (status != "pass")
