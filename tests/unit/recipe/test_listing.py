"""``envforge list``'s row cache: fresh rows come from it, anything changed is loaded again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.recipe import listing
from envforge.recipe.catalogue import Catalogue

GOOD = """\
name: mine
description: a user recipe
gpu: {vendor: none}
python: "3.11"
base_image: debian:bookworm-slim
torch: {version: 2.13.0, index: https://download.pytorch.org/whl/cpu}
numpy: ">=1.26,<3"
"""


def _files(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "mine.yaml").write_text(GOOD, encoding="utf-8")
    (folder / "broken.yaml").write_text("name: [unclosed\n", encoding="utf-8")
    return Catalogue((folder,)).files()


def _no_loading(name: str, path: Path) -> listing.Row:
    raise AssertionError(f"{path} was loaded although its cached row is fresh")


def test_second_listing_comes_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(tmp_path)
    first = listing.rows(files, tmp_path / "cache")
    assert [r.name for r in first] == ["broken", "mine"]
    assert first[0].error is not None
    assert "not valid YAML" in first[0].error
    assert first[1].stack == "torch2.13.0-cpu-py3.11"
    assert first[1].error is None
    monkeypatch.setattr(listing, "load_row", _no_loading)
    assert listing.rows(files, tmp_path / "cache") == first


def test_a_changed_file_is_loaded_again(tmp_path: Path) -> None:
    files = _files(tmp_path)
    listing.rows(files, tmp_path / "cache")
    files["mine"].write_text(GOOD.replace("a user recipe", "changed"), encoding="utf-8")
    assert [r.description for r in listing.rows(files, tmp_path / "cache")] == [None, "changed"]


def test_a_changed_loader_drops_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _files(tmp_path)
    listing.rows(files, tmp_path / "cache")
    loaded: list[str] = []
    real = listing.load_row

    def counting(name: str, path: Path) -> listing.Row:
        loaded.append(name)
        return real(name, path)

    monkeypatch.setattr(listing, "load_row", counting)
    monkeypatch.setattr(listing, "code_stamp", lambda: "another envforge")
    listing.rows(files, tmp_path / "cache")
    assert loaded == ["broken", "mine"]


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b"[]", b'{"schema": "envforge.listing/1"}', b"\xff\xfe", b"{" * 100_000],
)
def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path: Path, content: bytes) -> None:
    files = _files(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / listing.CACHE_NAME).write_bytes(content)
    assert [r.name for r in listing.rows(files, cache)] == ["broken", "mine"]
    data = json.loads((cache / listing.CACHE_NAME).read_text(encoding="utf-8"))
    assert data["schema"] == listing.SCHEMA
    assert len(data["rows"]) == 2


def test_a_cache_row_of_the_wrong_shape_is_not_trusted(tmp_path: Path) -> None:
    files = _files(tmp_path)
    cache = tmp_path / "cache"
    listing.rows(files, cache)
    path = cache / listing.CACHE_NAME
    data = json.loads(path.read_text(encoding="utf-8"))
    for row in data["rows"].values():
        row["stack"] = 42
    path.write_text(json.dumps(data), encoding="utf-8")
    assert listing.rows(files, cache)[1].stack == "torch2.13.0-cpu-py3.11"


def test_an_unwritable_cache_never_fails_the_listing(tmp_path: Path) -> None:
    files = _files(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    assert [r.name for r in listing.rows(files, blocker / "cache")] == ["broken", "mine"]
    assert blocker.read_text() == "in the way"


def test_special_files_are_not_cached(tmp_path: Path) -> None:
    files = _files(tmp_path)
    os.mkfifo(files["mine"].parent / "fifo.yaml")
    files = Catalogue((files["mine"].parent,)).files()
    rows = listing.rows(files, tmp_path / "cache")
    assert rows[1].name == "fifo"
    assert rows[1].error is not None
    assert "not a regular file" in rows[1].error
    data = json.loads((tmp_path / "cache" / listing.CACHE_NAME).read_text(encoding="utf-8"))
    assert sorted(Path(k.split("\0")[0]).name for k in data["rows"]) == ["broken.yaml", "mine.yaml"]


def test_list_output_is_the_same_from_the_cache(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    first = capsys.readouterr()
    assert main(["list", "--json"]) == 0
    second = capsys.readouterr()
    assert first == second
    assert {row["name"] for row in json.loads(first.out)} >= {"cpu", "gfx1010", "sm_89"}
    cache = Path(os.environ["ENVFORGE_HOME"]) / "cache" / listing.CACHE_NAME
    assert cache.is_file()
