"""Quoting for values that come from a recipe: Dockerfile strings and shell words.

Everything a recipe supplies goes through one of these functions before it reaches a
template, so no value can end an instruction or start a new one. What cannot be
quoted (line breaks of any kind, NUL, lone surrogates) is refused with the key named.
"""

from __future__ import annotations

import re
import shlex

from envforge.errors import InvalidInput
from envforge.recipe.model import UNQUOTABLE

_SURROGATE = re.compile("[\ud800-\udfff]")

#: Longest value accepted. The classic builder refuses Dockerfile lines over 64 KiB;
#: 4096 characters (at most 4 bytes each, quoted) keep every line well below that.
MAX_VALUE_CHARS = 4096


def check_one_line(key: str, value: str, *, source: str = "<recipe>") -> str:
    """Return ``value`` unchanged, or raise :class:`InvalidInput` naming ``key``."""
    for ch in value:
        if ch in UNQUOTABLE:
            raise InvalidInput(
                f"{source}: {key}: contains {ch!r}, which cannot be quoted safely "
                "in a Dockerfile or shell script",
                hint="put the value on one line, without control characters",
            )
    if _SURROGATE.search(value):
        raise InvalidInput(
            f"{source}: {key}: contains a lone surrogate code point, which is not valid UTF-8",
            hint="write the value as valid Unicode text",
        )
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidInput(
            f"{source}: {key}: is {len(value)} characters long; at most {MAX_VALUE_CHARS} fit "
            "in a Dockerfile line",
            hint="shorten the value",
        )
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
