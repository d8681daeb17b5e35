"""Issue 31 §1: ``render`` reaches a format only through ``FORMATS[name]``: every
registered format renders (printed and written alike), a format registered and nothing
else is what ``render --format`` uses, and an unregistered name is refused."""

from __future__ import annotations

import types
from collections.abc import Sequence
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions
from envforge.render.formats import FORMATS, File, Request

IMAGE = "registry.invalid/envforge/cpu@sha256:" + "a" * 64


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_registered_format_prints_what_it_writes(
    name: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    fmt = FORMATS[name]
    request = Request(RenderOptions(), image=IMAGE)
    fmt.check("cpu", False, request)  # one named recipe with its image: never refused
    recipe = Catalogue.default().load("cpu")
    files = fmt.files(recipe, request)
    assert files, f"{name} writes no file"
    for path, text, _ in files:
        assert text
        assert not Path(path).is_absolute()
        assert ".." not in Path(path).parts
    assert fmt.printed(recipe, request) in [text for _, text, _ in files]
    assert main(["render", "cpu", "--format", name, "--image", IMAGE]) == 0
    assert capsysbinary.readouterr().out.decode() == fmt.printed(recipe, request)
    out = tmp_path / "out"
    assert main(["render", "cpu", "--format", name, "--image", IMAGE, "-o", str(out)]) == 0
    for path, text, executable in files:
        written = out / "cpu" / path
        assert written.read_text(encoding="utf-8") == text
        assert bool(written.stat().st_mode & 0o100) == executable
    assert sorted(p.relative_to(out / "cpu") for p in out.rglob("*") if p.is_file()) == sorted(
        Path(p) for p, _, _ in files
    )


def _fake_format() -> types.ModuleType:
    module = types.ModuleType("fake_format")

    def check(recipe_ref: str | None, render_all: bool, request: Request) -> None:
        """Anything."""

    def printed(recipe: Recipe, request: Request) -> str:
        return f"fake {recipe.name} {request.options.builder}\n"

    def files(recipe: Recipe, request: Request) -> tuple[File, ...]:
        return (("fake/recipe.txt", printed(recipe, request), False),)

    def closing(count: int, output: Path, written: Sequence[Path]) -> str:
        return f"wrote {count} fake(s)"

    module.__dict__.update(
        check=check, platform_bound=lambda: True, printed=printed, files=files, closing=closing
    )
    return module


def test_render_routes_to_a_registered_format(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.setitem(FORMATS, "fake", _fake_format())
    assert main(["render", "cpu", "--format", "fake", "--builder", "buildkit"]) == 0
    assert capsysbinary.readouterr().out == b"fake cpu buildkit\n"
    assert main(["render", "--all", "--format", "fake", "-o", str(tmp_path)]) == 0
    count = len(Catalogue.default().files())
    assert capsysbinary.readouterr().err.decode().strip() == f"wrote {count} fake(s)"
    assert (tmp_path / "cpu" / "fake" / "recipe.txt").read_text() == "fake cpu classic\n"


def test_an_unregistered_format_is_refused_naming_the_registered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["render", "cpu", "--format", "pdf"]) == 2
    err = capsys.readouterr().err
    assert "'pdf'" in err
    for name in FORMATS:
        assert name in err
