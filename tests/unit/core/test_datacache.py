"""The compiled cache of parsed data files (envforge/core/datacache.py): used when fresh,
ignored (and rewritten) when a data file, envforge's version or the parser changed, when
corrupt, or when another user could have written it; the knowledge tables go through it."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from envforge.core import datacache
from envforge.core.resources import data_file
from envforge.knowledge import compiled
from envforge.knowledge.companions import load_companions
from envforge.knowledge.extensions import load_extensions
from envforge.knowledge.parse import load_layer_files
from envforge.knowledge.table import CompatTable


@dataclass(frozen=True)
class Leaf:
    name: str
    values: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class Tree:
    leaves: tuple[Leaf, ...]
    pairs: tuple[tuple[str, int], ...]
    flag: bool
    ratio: float


class Builds:
    """A ``build`` callable that counts its calls and parses the data file's lines."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.calls = 0

    def __call__(self) -> Tree:
        self.calls += 1
        names = self.data.read_text(encoding="utf-8").split()
        return Tree(
            leaves=tuple(Leaf(n, (n.upper(), n[::-1])) for n in names),
            pairs=tuple((n, len(n)) for n in names),
            flag=True,
            ratio=0.5,
        )


def _load(data: Path, build: Builds, folder: Path) -> Tree:
    return datacache.load("tree", [data], build, Tree, (Tree, Leaf), folder=folder)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Builds, Path]:
    data = tmp_path / "data.txt"
    data.write_text("alpha beta\n", encoding="utf-8")
    return data, Builds(data), tmp_path / "cache"


def test_the_cache_is_used_when_fresh(setup: tuple[Path, Builds, Path]) -> None:
    data, build, folder = setup
    first = _load(data, build, folder)
    assert (folder / "tree.json").is_file()
    second = _load(data, build, folder)
    assert second == first
    assert build.calls == 1
    assert second.leaves[0].values == ("ALPHA", "ahpla")  # tuples, not lists


def test_a_changed_data_file_is_parsed_again(setup: tuple[Path, Builds, Path]) -> None:
    data, build, folder = setup
    _load(data, build, folder)
    data.write_text("gamma\n", encoding="utf-8")
    assert [leaf.name for leaf in _load(data, build, folder).leaves] == ["gamma"]
    assert build.calls == 2
    _load(data, build, folder)
    assert build.calls == 2  # the rewritten cache is used


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-5],  # truncated payload
        lambda raw: raw.replace(b"ahpla", b"ahplb"),  # a flipped value: digest differs
        lambda raw: b"not json\n" + raw.partition(b"\n")[2],
        lambda raw: raw.partition(b"\n")[0],  # no payload at all
        lambda raw: b"",
        lambda raw: b"\xff\xfe" * 40,
    ],
    ids=["truncated", "changed-value", "bad-header", "no-payload", "empty", "binary"],
)
def test_a_corrupt_cache_is_ignored_and_rewritten(
    setup: tuple[Path, Builds, Path], damage: object
) -> None:
    data, build, folder = setup
    good = _load(data, build, folder)
    cache = folder / "tree.json"
    assert callable(damage)
    cache.write_bytes(damage(cache.read_bytes()))
    assert _load(data, build, folder) == good
    assert build.calls == 2
    _load(data, build, folder)
    assert build.calls == 2


def test_a_payload_with_a_valid_digest_but_foreign_content_is_refused(
    setup: tuple[Path, Builds, Path],
) -> None:
    """Even with a matching key and digest, only the expected classes and fields decode."""
    data, build, folder = setup
    _load(data, build, folder)
    cache = folder / "tree.json"
    header = json.loads(cache.read_bytes().partition(b"\n")[0])
    payloads: tuple[object, ...] = (
        {"~": "Tree", "leaves": [], "pairs": [], "flag": True},  # a field missing
        {"~": "os.system", "command": "true"},  # a class not allowed
        {"~": "Leaf", "name": "x", "values": [], "note": None},  # not the kind asked for
        [1, 2, 3],
    )
    for payload in payloads:
        body = json.dumps(payload).encode()
        header["sha256"] = hashlib.sha256(body).hexdigest()
        cache.write_bytes(json.dumps(header).encode() + b"\n" + body)
        calls = build.calls
        assert isinstance(_load(data, build, folder), Tree)
        assert build.calls == calls + 1


def test_a_cache_written_by_another_version_is_ignored(
    setup: tuple[Path, Builds, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, build, folder = setup
    _load(data, build, folder)
    monkeypatch.setattr(datacache, "__version__", "99.0.0")
    _load(data, build, folder)
    assert build.calls == 2
    monkeypatch.setattr(sys, "version", "3.99.0 (another Python)")
    _load(data, build, folder)
    assert build.calls == 3


def test_a_changed_parser_module_makes_the_cache_stale(
    setup: tuple[Path, Builds, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, build, folder = setup
    parser = tmp_path / "pkg" / "parser.py"
    parser.parent.mkdir()
    parser.write_text("x = 1\n", encoding="utf-8")
    monkeypatch.setattr(datacache, "_PACKAGE", tmp_path / "pkg")

    def load() -> Tree:
        return datacache.load(
            "tree", [data], build, Tree, (Tree, Leaf), code=("parser.py",), folder=folder
        )

    load()
    load()
    assert build.calls == 1
    parser.write_text("x = 22\n", encoding="utf-8")
    load()
    assert build.calls == 2


def test_a_cache_others_can_write_is_not_trusted(setup: tuple[Path, Builds, Path]) -> None:
    data, build, folder = setup
    _load(data, build, folder)
    cache = folder / "tree.json"
    cache.chmod(0o666)
    _load(data, build, folder)
    assert build.calls == 2
    assert cache.stat().st_mode & 0o022 == 0  # rewritten with the safe mode


def test_a_symbolic_link_is_not_followed(setup: tuple[Path, Builds, Path]) -> None:
    data, build, folder = setup
    _load(data, build, folder)
    cache = folder / "tree.json"
    real = folder / "elsewhere.json"
    cache.rename(real)
    cache.symlink_to(real)
    _load(data, build, folder)
    assert build.calls == 2


def test_an_unwritable_cache_folder_only_costs_a_parse(setup: tuple[Path, Builds, Path]) -> None:
    data, build, _ = setup
    folder = Path("/dev/null/envforge")  # neither readable nor writable
    assert _load(data, build, folder) == _load(data, build, folder)
    assert build.calls == 2


def test_extra_key_parts_decide_too(setup: tuple[Path, Builds, Path]) -> None:
    data, build, folder = setup

    def load(extra: tuple[str, ...]) -> Tree:
        return datacache.load("tree", [data], build, Tree, (Tree, Leaf), extra=extra, folder=folder)

    load(("lib 1",))
    load(("lib 1",))
    assert build.calls == 1
    load(("lib 2",))  # another library version: parsed again
    assert build.calls == 2


def test_a_value_keep_refuses_is_not_written(setup: tuple[Path, Builds, Path]) -> None:
    data, build, folder = setup
    datacache.load("tree", [data], build, Tree, (Tree, Leaf), folder=folder, keep=lambda _: False)
    assert not (folder / "tree.json").exists()
    assert _load(data, build, folder) == _load(data, build, folder)
    assert build.calls == 2  # kept once keep no longer refuses


def test_an_unreadable_data_file_is_left_to_build(tmp_path: Path) -> None:
    """The cache never hides the parser's own error (a missing overlay: TableError)."""
    build = Builds(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError):
        _load(tmp_path / "missing.txt", build, tmp_path / "cache")


def test_encode_refuses_what_it_cannot_read_back() -> None:
    with pytest.raises(TypeError):
        datacache.encode({"a": 1})
    with pytest.raises(TypeError):
        datacache.encode(Leaf("x", ["a"]))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the tables


def _fresh_table() -> CompatTable:
    compiled._load_layers.cache_clear()
    return compiled.load_table({"XDG_CONFIG_HOME": "/nonexistent"})


def test_the_compat_table_round_trips_and_is_read_without_the_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed = _fresh_table()  # parses (a fresh ENVFORGE_HOME) and writes the cache
    cache = datacache.cache_file("compat")
    assert cache.is_file()
    assert parsed == load_layer_files([data_file("compat.yaml")])

    def no_parse(_files: object) -> CompatTable:
        raise AssertionError("the YAML was parsed although the cache is fresh")

    monkeypatch.setattr(compiled, "_parse", no_parse)
    assert _fresh_table() == parsed


def test_an_overlay_is_part_of_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overlay = tmp_path / "local.yaml"
    overlay.write_text('schema: 1\nsources: {mine: "our notes"}\n', encoding="utf-8")
    env = {"XDG_CONFIG_HOME": "/nonexistent", "ENVFORGE_KNOWLEDGE_PATH": str(overlay)}
    compiled._load_layers.cache_clear()
    first = compiled.load_table(env)
    assert ("mine", "our notes") in first.sources
    overlay.write_text('schema: 1\nsources: {mine: "changed"}\n', encoding="utf-8")
    os.utime(overlay, ns=(1, 1))  # the in-process key changes; the content hash decides
    compiled._load_layers.cache_clear()
    assert ("mine", "changed") in compiled.load_table(env).sources
    assert ("mine", "changed") not in _fresh_table().sources  # no overlay: another key


def test_companions_and_extensions_come_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from envforge.knowledge import companions, extensions

    first = (load_companions(), load_extensions.__wrapped__())
    assert datacache.cache_file("companions").is_file()
    assert datacache.cache_file("extensions").is_file()

    def refuse(_where: Path) -> object:
        raise AssertionError("parsed although the cache is fresh")

    monkeypatch.setattr(companions, "_load_file", refuse)
    monkeypatch.setattr(extensions, "_load_file", refuse)
    assert (load_companions(), load_extensions.__wrapped__()) == first


def test_a_file_edited_while_it_is_parsed_is_not_cached(tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    data.write_text("alpha\n", encoding="utf-8")

    class EditsWhileParsing(Builds):
        def __call__(self) -> Tree:
            self.data.write_text("beta\n", encoding="utf-8")  # another editor's save
            return super().__call__()

    build = EditsWhileParsing(data)
    _load(data, build, tmp_path / "cache")
    assert not (tmp_path / "cache" / "tree.json").exists()
