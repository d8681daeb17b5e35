"""The one YAML reader (envforge.core.yamlcheck) and the shared patterns
(envforge.core.patterns)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from envforge.core import yamlcheck
from envforge.core.patterns import ENV_NAME_RE, GFX_RE, NAME_RE, PYTHON_RE, SM_RE
from envforge.errors import DataFileError, RecipeError, TableError


def refused(text: str) -> str:
    with pytest.raises(DataFileError) as info:
        yamlcheck.parse(text, "f.yaml")
    line = info.value.one_line()
    assert "\n" not in line
    assert line.startswith("f.yaml")
    return line


def test_numbers_keep_their_text() -> None:
    data = yamlcheck.parse("python: 3.10\nn: 010\n", "f.yaml")
    assert yamlcheck.source_text(data["python"]) == "3.10"
    assert yamlcheck.source_text(data["n"]) == "010"
    assert yamlcheck.source_text("3.10") is None


def test_aliases_are_expanded() -> None:
    data = yamlcheck.parse("a: &x [1, 2]\nb: *x\n", "f.yaml")
    assert data["a"] == data["b"] == [1, 2]


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("a: 1\na: 2\n", "f.yaml: a: key 'a' appears twice (second at line 2)"),
        ("x:\n  a: 1\n  a: 2\n", "x.a: key 'a' appears twice"),
        ("? [a]\n: 1\n", "complex '?' key"),
        ("? {a: 1}\n: 1\n", "complex '?' key"),
        ("a: " + "[" * 5000 + "]" * 5000, "nested more than 64 levels deep"),
        ("a: " + "9" * 5000, "a (line 1): a number of 5000 characters"),
        ('a: "x\\ud800"', "a (line 1): contains a lone surrogate"),
        ("base: &b {x: 1}\nc:\n  <<: *b\n", "merge keys"),
        ("a: !!set {x}\n", "unsupported YAML tag"),
        ("a: [unclosed\n", "not valid YAML"),
        ("a: !!python/object:os.system x\n", "not valid YAML"),
        ("a: &r [*r]\n", "nested more than 64 levels deep"),
    ],
)
def test_hostile_documents_are_refused(text: str, expect: str) -> None:
    assert expect in refused(text)


def test_alias_bomb_is_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    assert "more than" in refused("\n".join(lines) + "\n")


def test_error_class_is_the_callers() -> None:
    with pytest.raises(TableError):
        yamlcheck.parse("a: 1\na: 1\n", "t.yaml", error=TableError)
    with pytest.raises(RecipeError):
        yamlcheck.parse("a: 1\na: 1\n", "r.yaml", error=RecipeError)


def test_read_text_refuses_non_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(DataFileError, match="not a regular file"):
        yamlcheck.read_text(fifo)  # would block for ever with a plain open()
    with pytest.raises(DataFileError, match="not a regular file"):
        yamlcheck.read_text(Path("/dev/zero"))
    with pytest.raises(DataFileError, match="is a directory"):
        yamlcheck.read_text(tmp_path)
    with pytest.raises(DataFileError, match="no such file"):
        yamlcheck.read_text(tmp_path / "nope.yaml")


def test_read_text_limits_size_and_encoding(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 101)
    with pytest.raises(DataFileError, match="more than the 100"):
        yamlcheck.read_text(big, max_bytes=100)
    assert yamlcheck.read_text(big, max_bytes=101) == "a" * 101
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: \xff\n")
    with pytest.raises(DataFileError, match="not UTF-8"):
        yamlcheck.read_text(bad)


def test_reader_names_key_path_and_nearest_key() -> None:
    r = yamlcheck.Reader("f.yaml", RecipeError)
    with pytest.raises(RecipeError) as info:
        r.mapping({"verison": 1}, "torch", ["version", "index"])
    assert info.value.one_line() == (
        "f.yaml: torch.verison: unknown key (fix: did you mean 'version'?)"
    )
    with pytest.raises(RecipeError, match="not a finite number"):
        r.number(float("inf"), "certify.step_timeout")
    with pytest.raises(RecipeError, match="lone surrogate"):
        r.text("a\udc80", "description")


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (NAME_RE, "gfx1030", "gfx1030\n"),
        (ENV_NAME_RE, "HSA_OVERRIDE_GFX_VERSION", "PATH\n"),
        (PYTHON_RE, "3.10", "3.\u0661\u0661"),
        (GFX_RE, "gfx90a", "gfx\u0661030"),
        (SM_RE, "sm_90a", "sm_90x"),
    ],
)
def test_shared_patterns_are_ascii_and_whole(pattern: object, good: str, bad: str) -> None:

    assert isinstance(pattern, re.Pattern)
    assert pattern.match(good)
    assert not pattern.match(bad)
