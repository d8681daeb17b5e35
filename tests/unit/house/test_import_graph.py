"""The import graph keeps its direction: imports run downhill through :data:`LAYERS`,
no module imports itself back through others, and backends are reached through their
protocol.

Read from the source (every ``import`` statement, function-level and ``TYPE_CHECKING``
ones included, and every ``LazyModule("envforge.…")`` of :mod:`envforge.core.lazy`), so a
lazy import cannot hide an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import paths

PACKAGE = paths.ROOT / "envforge"

#: Modules outside ``envforge/backends/`` that may still import a backend's own modules,
#: and why. Everything else reaches a backend through :data:`envforge.backends.BACKENDS`.
ALLOWED: dict[str, str] = {
    "cli/images.py": "publish and certify's IMAGE refs: images on an engine",
    "cli/registry.py": "verify --pull/--no-pull and pull: images on an engine",
    "cli/audit.py": "audit IMAGE: an image on an engine",
    "cli/disk.py": "du and gc measure and remove the venv backend's folders",
    "cli/attest.py": "an attestation's subject is the backend's own: a venv folder's content,"
    " an image on an engine (attest verify VENV, --image REF)",
}


#: The package's rooms, bottom first: a module may import its own room and the rooms of
#: the layers below, never one of its own layer or above. A room is a package or module
#: under ``envforge/`` ("" is ``envforge/__init__.py``, the public facade); a module
#: belongs to the longest room its dotted name starts with, so ``recipe.model`` (the
#: recipe as a value, which knowledge judges) sits below ``recipe`` (reading and checking
#: a recipe file, which asks the companion table which bare names it pins).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("version", "errors"),
    ("core",),
    ("recipe.model",),
    ("knowledge",),  # the tables, GPU arch and platform names
    ("recipe",),
    ("host",),  # what this machine has, the scheduler's grant, doctor's host checks
    ("container",),
    ("stack",),
    ("lock",),
    ("lock_variants",),  # a lock's wheel variant: read from the index, read back
    ("render", "solve", "probe.target"),
    ("audit",),
    ("probe",),
    ("publish",),
    ("evidence",),
    ("project",),
    ("backends",),
    ("fleet",),
    ("doctor",),  # asks every backend
    ("cli",),
    ("",),  # the facade: it notes an early Ctrl-C, which entry reads
    ("entry",),
    ("__main__",),
)
_LEVEL = {room: n for n, rooms in enumerate(LAYERS) for room in rooms}


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lazy_module(node: ast.AST) -> str | None:
    """The module a ``LazyModule("name")`` call stands for; None for any other node."""
    if not (isinstance(node, ast.Call) and node.args and len(node.args) == 1):
        return None
    func, (arg,) = node.func, node.args
    named = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if named != "LazyModule":
        return None
    literal = f"line {node.lineno}: LazyModule takes the module's name as a literal string"
    assert isinstance(arg, ast.Constant), literal
    assert isinstance(arg.value, str), literal
    return arg.value


def _imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every module ``path`` imports (``from X import Y`` counts as X and X.Y)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path, package).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif (lazy := _lazy_module(node)) is not None:
            found.add(lazy)
    return found


def _sources(under: Path) -> list[Path]:
    return sorted(under.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _is_backend_internal(name: str) -> bool:
    return name.startswith(("envforge.backends.docker", "envforge.backends.venv"))


def _room(module: str) -> str:
    """The room of a dotted module name (``envforge.recipe.model`` -> ``recipe.model``)."""
    parts = module.split(".")[1:]
    for n in range(len(parts), -1, -1):
        if ".".join(parts[:n]) in _LEVEL:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} is in no room of LAYERS: add it")


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the envforge modules it imports: ``from X import y`` is X.y when that is
    a module, else X, and the packages above it (their ``__init__`` runs first)."""
    modules = {_module_name(path, package): path for path in _sources(package)}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        named: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                named.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here[: len(here) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                named.extend(
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                )
            elif (lazy := _lazy_module(node)) is not None:
                named.append(lazy)
        graph[name] = {t for t in map(known, named) if t is not None and t != name}
    # importing a.b.c runs a/__init__ and a/b/__init__ first: a package whose __init__
    # imports something is an edge too (not the packages the importer is itself in)
    for name, targets in graph.items():
        own = {".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 2)}
        targets.update(
            parent
            for t in list(targets)
            for n in range(2, t.count(".") + 1)
            if (parent := ".".join(t.split(".")[:n])) not in own and graph.get(parent)
        )
    return graph


def _uphill(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if _room(source) != _room(target) and _LEVEL[_room(target)] >= _LEVEL[_room(source)]
    )


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_has_a_room() -> None:
    assert {name: _room(name) for name in _graph()}  # raises naming a module without one
    used = {_room(name) for name in _graph()}
    assert set(_LEVEL) - used == set(), "a room of LAYERS holds no module: drop it"


def test_imports_run_downhill() -> None:
    assert _uphill(_graph()) == []


def test_no_module_imports_itself_back() -> None:
    assert _circles(_graph()) == []


def test_the_checks_see_an_uphill_arrow_and_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "envforge"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "core" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "core" / "a.py").write_text(
        "def f():\n    from envforge.core import b\n", encoding="utf-8"
    )
    (pkg / "core" / "b.py").write_text(
        "from envforge.core.a import f\nfrom envforge.stack import Stack\n", encoding="utf-8"
    )
    (pkg / "stack.py").write_text("", encoding="utf-8")
    graph = _graph(pkg)
    assert _uphill(graph) == ["envforge.core.b -> envforge.stack"]
    assert _circles(graph) == [["envforge.core.a", "envforge.core.b"]]


def test_the_graph_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "envforge" / "cli"
    pkg.mkdir(parents=True)
    source = pkg / "x.py"
    source.write_text(
        "def f():\n    from envforge.backends.docker import engine\nfrom ..container import refs\n"
        "from envforge.core.lazy import LazyModule\n"
        "_images = LazyModule('envforge.backends.docker.images')\n",
        encoding="utf-8",
    )
    found = _imports(source, tmp_path / "envforge")
    assert "envforge.backends.docker.engine" in found
    assert "envforge.container.refs" in found
    assert "envforge.backends.docker.images" in found


def test_the_graph_sees_a_lazy_module_as_an_edge(tmp_path: Path) -> None:
    pkg = tmp_path / "envforge"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "core" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "core" / "lazy.py").write_text("class LazyModule: ...\n", encoding="utf-8")
    (pkg / "core" / "a.py").write_text(
        "from envforge.core.lazy import LazyModule\n_stack = LazyModule('envforge.stack')\n",
        encoding="utf-8",
    )
    (pkg / "stack.py").write_text("", encoding="utf-8")
    assert _uphill(_graph(pkg)) == ["envforge.core.a -> envforge.stack"]


def test_nothing_outside_backends_imports_a_backends_internals() -> None:
    offenders = {
        _relative(path): sorted(n for n in _imports(path) if _is_backend_internal(n))
        for path in _sources(PACKAGE)
        if not _relative(path).startswith("backends/") and _relative(path) not in ALLOWED
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_allowed_list_holds_no_stale_entries() -> None:
    """An entry whose module no longer imports a backend's internals must go."""
    stale = [
        name
        for name in ALLOWED
        if not any(_is_backend_internal(n) for n in _imports(PACKAGE / name))
    ]
    assert stale == []


@pytest.mark.parametrize("package", ["container", "render"])
def test_pure_packages_import_no_backend_and_no_sdk(package: str) -> None:
    offenders = {
        _relative(path): sorted(
            n
            for n in _imports(path)
            if n.startswith("envforge.backends") or n.split(".")[0] in ("docker", "requests")
        )
        for path in _sources(PACKAGE / package)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


#: Imports inside function bodies under ``envforge/`` (issue 31 §3): at most this many.
#: Each defers a load on purpose (``envforge --help``, list, show, solve, validate, render
#: and detect load only what they print: test_light_imports.py); one that every caller has
#: loaded anyway belongs at the module's top, and a module deferred at several places is one
#: ``LazyModule`` at the top (envforge/core/lazy.py). The figure may only fall: lower it
#: with them.
FUNCTION_IMPORTS_CEILING = 67


def _function_imports(path: Path) -> int:
    """The ``import`` and ``from … import`` statements inside a ``def`` or ``async def``
    (at any depth, a nested function's counted once); module-level ``TYPE_CHECKING``
    blocks and class bodies are not functions."""
    found = 0

    def visit(node: ast.AST, in_function: bool) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found += 1
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return found


def _function_import_counts(package: Path = PACKAGE) -> dict[str, int]:
    counts = {
        path.relative_to(package).as_posix(): _function_imports(path) for path in _sources(package)
    }
    return {name: n for name, n in counts.items() if n}


def _most(counts: dict[str, int], n: int = 5) -> str:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
    return ", ".join(f"{name} ({count})" for name, count in ranked)


def test_function_level_imports_stay_under_the_ceiling() -> None:
    counts = _function_import_counts()
    total = sum(counts.values())
    assert total <= FUNCTION_IMPORTS_CEILING, (
        f"{total} imports inside functions under envforge/, above the ceiling"
        f" {FUNCTION_IMPORTS_CEILING}: move one to its module's top where every caller has"
        f" loaded that module anyway, or make it one LazyModule (envforge/core/lazy.py); most in:"
        f" {_most(counts)}"
    )


def test_the_function_imports_ceiling_is_the_current_figure() -> None:
    """The figure only falls: when imports inside functions go, the ceiling follows."""
    total = sum(_function_import_counts().values())
    assert total >= FUNCTION_IMPORTS_CEILING, (
        f"now {total} imports inside functions: lower FUNCTION_IMPORTS_CEILING to {total}"
    )


def test_the_function_import_count_sees_nested_and_async_defs(tmp_path: Path) -> None:
    pkg = tmp_path / "envforge"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import os\n"
        "if TYPE_CHECKING:\n"
        "    from envforge import b\n"
        "class C:\n"
        "    import json\n"
        "    def method(self):\n"
        "        import sys\n",
        encoding="utf-8",
    )
    (pkg / "b.py").write_text(
        "def outer():\n"
        "    from envforge import c\n"
        "    def inner():\n"
        "        import re, json\n"
        "    if True:\n"
        "        import os\n"
        "async def run():\n"
        "    from . import c\n",
        encoding="utf-8",
    )
    (pkg / "c.py").write_text("import os\n", encoding="utf-8")
    counts = _function_import_counts(pkg)
    assert counts == {"__init__.py": 1, "b.py": 4}
    assert _most(counts) == "b.py (4), __init__.py (1)"
