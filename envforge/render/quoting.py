"""Quoting for values that come from a recipe: Dockerfile strings and shell words.

Everything a recipe supplies goes through one of these functions before it reaches a
template, so no value can end an instruction or start a new one. What cannot be
quoted (line breaks of any kind, NUL, control characters, lone surrogates) is refused
with the key named (:func:`envforge.recipe.checks.text_problem`, the loader's check).
"""

from __future__ import annotations

import shlex

from envforge.errors import InvalidInput
from envforge.recipe.checks import MAX_VALUE_CHARS, text_problem

__all__ = ["MAX_VALUE_CHARS", "check_one_line", "docker_quote", "shell_quote"]


def check_one_line(key: str, value: str, *, source: str = "<recipe>") -> str:
    """Return ``value`` unchanged, or raise :class:`InvalidInput` naming ``key``."""
    problem = text_problem(value)
    if problem is not None:
        raise InvalidInput(f"{source}: {key}: {problem[0]}", hint=problem[1])
    return value


def docker_quote(value: str) -> str:
    """A Dockerfile double-quoted string (ENV/LABEL value) that reads back as ``value``.

    Inside double quotes the Dockerfile word lexer takes ``\\"``, ``\\$`` and ``\\\\``
    as literal characters, leaves every other backslash as it is, and expands ``$``:
    escaping exactly those three characters makes the value literal.
    """
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{out}"'


def shell_quote(value: str) -> str:
    """One POSIX shell word (``shlex.quote``)."""
    return shlex.quote(value)
