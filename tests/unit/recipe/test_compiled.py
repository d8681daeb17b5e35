"""Catalogue recipes kept compiled (envforge/recipe/compiled.py): the value read back is
the one the YAML loads to; an edited recipe, a corrupt or unwritable cache, and two
processes writing at once never give another value."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envforge.core import datacache
from envforge.core.resources import data_file, recipes_dir
from envforge.errors import RecipeError
from envforge.recipe import compiled
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.load import load_recipe_file
from envforge.recipe.model import Recipe
from tests.helpers import paths

SHIPPED = sorted(recipes_dir().glob("*.yaml"))


def _no_parse(_path: Path) -> Recipe:
    raise AssertionError("the YAML was read although the compiled recipe is fresh")


def _cache_of(path: Path) -> Path:
    return datacache.cache_file(compiled.cache_name(path))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A catalogue folder of one's own holding a copy of the shipped sm_89 recipe."""
    mine = tmp_path / "recipes"
    mine.mkdir()
    shutil.copy(recipes_dir() / "sm_89.yaml", mine / "mine.yaml")
    text = (mine / "mine.yaml").read_text(encoding="utf-8").replace("name: sm_89", "name: mine")
    (mine / "mine.yaml").write_text(text, encoding="utf-8")
    return mine


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_recipe_reads_back_as_its_yaml_loads(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = compiled.load_recipe(path)  # a fresh cache folder: read, checked, written
    assert parsed == load_recipe_file(path)
    assert _cache_of(path).is_file()
    monkeypatch.setattr(compiled, "_parse", _no_parse)
    again = compiled.load_recipe(path)
    assert again == parsed
    assert again.hash == parsed.hash
    assert again.to_dict() == parsed.to_dict()


def test_the_key_holds_the_recipe_the_companion_table_and_packaging(folder: Path) -> None:
    path = folder / "mine.yaml"
    compiled.load_recipe(path)
    header = json.loads(_cache_of(path).read_bytes().partition(b"\n")[0])
    files = [name for name, _digest in header["key"]["files"]]
    assert files == [str(path), str(data_file("companions.yaml"))]
    assert header["key"]["extra"][0].startswith("packaging ")
    assert "recipe/checks.py" in " ".join(header["key"]["code"])


def test_an_edited_recipe_is_read_again(folder: Path) -> None:
    path = folder / "mine.yaml"
    first = Catalogue((folder,)).load("mine")
    text = path.read_text(encoding="utf-8").replace('numpy: ">=1.26,<3"', 'numpy: "<2"')
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(1, 1))  # the content decides, not the time
    second = Catalogue((folder,)).load("mine")
    assert (first.numpy, second.numpy) == (">=1.26,<3", "<2")
    assert second == load_recipe_file(path)


def test_an_edit_that_breaks_the_recipe_is_refused_not_served_from_the_cache(
    folder: Path,
) -> None:
    path = folder / "mine.yaml"
    Catalogue((folder,)).load("mine")
    text = path.read_text(encoding="utf-8").replace("  - torchvision\n", "  - torchvision==\n")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecipeError, match=r"packages\[0\]"):
        Catalogue((folder,)).load("mine")


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-40],  # cut short
        lambda raw: raw.replace(b'"mine"', b'"yours"'),  # payload changed, digest not
        lambda raw: b"not json\n" + raw,
        lambda raw: b"",
    ],
    ids=["truncated", "edited", "garbage", "empty"],
)
def test_a_corrupt_cache_file_falls_back_to_the_yaml_and_is_rewritten(
    folder: Path, damage: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = folder / "mine.yaml"
    expected = compiled.load_recipe(path)
    cache = _cache_of(path)
    good = cache.read_bytes()
    cache.write_bytes(damage(good))  # type: ignore[operator]
    assert compiled.load_recipe(path) == expected
    assert cache.read_bytes() == good  # rewritten whole
    monkeypatch.setattr(compiled, "_parse", _no_parse)
    assert compiled.load_recipe(path) == expected


def test_an_unwritable_cache_folder_still_loads(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_CACHE_DIR", "/dev/null/envforge")  # neither read nor written
    path = folder / "mine.yaml"
    assert compiled.load_recipe(path) == compiled.load_recipe(path) == load_recipe_file(path)


_WRITER = """
import os, sys
from pathlib import Path
from envforge.core import datacache
from envforge.recipe import compiled
path = Path(sys.argv[1])
cache = datacache.cache_file(compiled.cache_name(path))
hashes = set()
for _ in range(25):
    try:
        os.unlink(cache)
    except FileNotFoundError:
        pass
    hashes.add(compiled.load_recipe(path).hash)
print(sorted(hashes))
"""


def test_two_processes_writing_at_once_leave_a_valid_file(folder: Path) -> None:
    path = folder / "mine.yaml"
    expected = load_recipe_file(path)
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == repr([expected.hash])
    cache = _cache_of(path)
    key = datacache.cache_key(
        compiled.cache_name(path),
        [path, data_file("companions.yaml")],
        compiled.LOADER_MODULES,
        compiled.EXTRA,
    )
    assert datacache.read(cache, key, Recipe, compiled.CLASSES) == expected
    leftovers = [p.name for p in cache.parent.iterdir() if not p.name.endswith(".json")]
    assert leftovers == []  # no temporary file left behind


def test_what_is_not_kept_compiled(folder: Path, tmp_path: Path) -> None:
    """``--set`` overrides, a file outside the catalogue's folders and a recipe with
    extra check files (its value depends on them) are read from YAML every time."""
    path = folder / "mine.yaml"
    catalogue = Catalogue((folder,))
    assert catalogue.load("mine", ["torch.version=2.14.0"]).torch.version == "2.14.0"
    assert not _cache_of(path).exists()
    elsewhere = tmp_path / "elsewhere.yaml"
    shutil.copy(path, elsewhere)
    catalogue.load(str(elsewhere))
    assert not _cache_of(elsewhere).exists()
    (folder / "check_x.py").write_text("print('ok')\n", encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    text = text.replace("  level: full\n", "  level: full\n  extra_checks: [check_x.py]\n")
    path.write_text(text, encoding="utf-8")
    loaded = catalogue.load("mine")
    assert loaded.certify.extra_checks == ((folder / "check_x.py").resolve(),)
    assert not _cache_of(path).exists()
    catalogue.load("mine")
    assert not _cache_of(path).exists()


def test_a_catalogue_recipe_is_kept_compiled(folder: Path) -> None:
    Catalogue((folder,)).load("mine")
    assert _cache_of(folder / "mine.yaml").is_file()
