"""The table's memoized lookups (issue 32 §1) answer as their plain versions did."""

from __future__ import annotations

import fnmatch
import itertools

from envforge.knowledge import load_table
from envforge.knowledge.table import _glob_match, py_tuple


def test_glob_match_is_fnmatchcase_for_every_short_pattern() -> None:
    texts = ["".join(t) for n in range(6) for t in itertools.product("ab", repeat=n)]
    patterns = ["".join(p) for n in range(5) for p in itertools.product("ab*", repeat=n)]
    patterns += ["ubuntu:22.04*", "nvidia/cuda:*ubuntu22.04", "a?b", "[ab]*"]
    texts += ["ubuntu:22.04", "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu22.04", "a?b"]
    for text, pattern in itertools.product(texts, patterns):
        assert _glob_match(text, pattern) == fnmatch.fnmatchcase(text, pattern), (text, pattern)


def test_numpy_installable_is_every_release_s_versions_for_that_python() -> None:
    table = load_table()
    for python in ("3.8", "3.11", "3.13", "3.99"):
        plain = tuple(
            v
            for n in table.numpy_releases
            if py_tuple(n.python_min) <= py_tuple(python) <= py_tuple(n.python_max)
            for v in n.versions
            if (first := dict(n.python_from).get(python)) is None
            or tuple(map(int, v.split(".")[:3])) >= tuple(map(int, first.split(".")[:3]))
        )
        assert table.numpy_installable(python) == plain
        assert table.numpy_installable(python) is table.numpy_installable(python)


def test_base_images_are_found_by_their_patterns() -> None:
    table = load_table()
    assert table.distro_python("docker.io/library/ubuntu:22.04") == "3.10"
    assert table.distro_python("nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04") == "3.12"
    assert table.distro_python("example.org/unknown:1") is None
