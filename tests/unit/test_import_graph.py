"""The import graph keeps its direction: backends are reached through their protocol.

Read from the source (every ``import`` statement, function-level ones included), so a
lazy import cannot hide an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "envforge"

#: Modules outside ``envforge/backends/`` that may still import a backend's own modules,
#: and why. Everything else reaches a backend through :data:`envforge.backends.BACKENDS`.
ALLOWED: dict[str, str] = {
    # pushing and pulling certified images is Docker-bound by nature (registries of OCI
    # images); neither is a step every backend has
    "publish/push.py": "push/pull of certified images",
    "cli/images.py": "publish and certify's IMAGE refs: images on an engine",
    "cli/registry.py": "verify --pull/--no-pull and pull: images on an engine",
    "cli/audit.py": "audit IMAGE: an image on an engine",
    "cli/disk.py": "du and gc measure and remove the venv backend's folders",
    "cli/attest.py": "an attestation's subject is the backend's own: a venv folder's content,"
    " an image on an engine (attest verify VENV, --image REF)",
}


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
    return found


def _sources(under: Path) -> list[Path]:
    return sorted(under.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _is_backend_internal(name: str) -> bool:
    return name.startswith(("envforge.backends.docker", "envforge.backends.venv"))


def test_the_graph_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "envforge" / "cli"
    pkg.mkdir(parents=True)
    source = pkg / "x.py"
    source.write_text(
        "def f():\n    from envforge.backends.docker import engine\nfrom ..container import refs\n",
        encoding="utf-8",
    )
    found = _imports(source, tmp_path / "envforge")
    assert "envforge.backends.docker.engine" in found
    assert "envforge.container.refs" in found


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
