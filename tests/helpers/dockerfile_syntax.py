"""A small Dockerfile reader for tests: instructions, and ENV/LABEL values unquoted.

It follows the classic builder's rules (moby/buildkit ``frontend/dockerfile/parser`` and
``shell/lex.go``) for what envforge emits, with ``\\`` as the escape character:

* a line ending in ``\\`` (optionally followed by blanks) continues on the next line;
  comment lines and empty lines inside a continuation are dropped;
* lines starting with ``#`` (after blanks) are comments; only ``\\n`` ends a line;
* in ENV/LABEL ``key=value`` words: outside quotes ``\\x`` is ``x``; inside double quotes
  only ``\\"``, ``\\$`` and ``\\\\`` are escapes (other backslashes stay); inside single
  quotes nothing is special; an unescaped ``$`` outside single quotes is an expansion.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_CONTINUATION = re.compile(r"\\[ \t]*$")
_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$")


class DockerfileSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Instruction:
    keyword: str
    #: Everything after the keyword, continuations joined (as the builder sees it).
    args: str
    #: 1-based line number where the instruction starts.
    line: int


@dataclass(frozen=True)
class Word:
    text: str
    #: Names of variables the builder would expand in this word.
    expansions: tuple[str, ...]


def parse(text: str) -> list[Instruction]:
    lines = text.split("\n")
    if lines and _DIRECTIVE.match(lines[0]):
        raise DockerfileSyntaxError(f"parser directive on line 1: {lines[0]!r}")
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        start = i + 1
        i += 1
        stripped = raw.lstrip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        body = stripped
        while _CONTINUATION.search(body):
            body = _CONTINUATION.sub("", body)
            if i >= len(lines):
                break
            nxt = lines[i]
            i += 1
            inner = nxt.lstrip(" \t")
            if inner.startswith("#") or not inner.strip():
                # comment and empty lines inside a continuation are dropped
                body += "\\"
                continue
            body += nxt
        keyword, _, args = body.partition(" ")
        if not re.match(r"^[A-Za-z]+$", keyword):
            raise DockerfileSyntaxError(f"line {start}: not an instruction: {body[:60]!r}")
        out.append(Instruction(keyword.upper(), args.strip(" \t"), start))
    return out


def split_words(args: str) -> list[str]:
    """Split on blanks outside quotes, keeping quotes and escapes (builder parseWords)."""
    words: list[str] = []
    word = ""
    quote = ""
    escaped = False
    for ch in args:
        if escaped:
            word += ch
            escaped = False
            continue
        if quote:
            if ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
            word += ch
            continue
        if ch == "\\":
            escaped = True
            word += ch
        elif ch in "\"'":
            quote = ch
            word += ch
        elif ch in " \t":
            if word:
                words.append(word)
            word = ""
        else:
            word += ch
    if quote:
        raise DockerfileSyntaxError(f"unterminated {quote} quote in {args!r}")
    if word:
        words.append(word)
    return words


def unquote(word: str) -> Word:
    """Process one word as the builder's shell lexer does (without expanding)."""
    out = ""
    expansions: list[str] = []
    i = 0
    n = len(word)

    def dollar(pos: int) -> int:
        m = re.match(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", word[pos:])
        if m is None:
            return pos  # a lone $ is literal
        expansions.append(m.group(1).strip("{}"))
        return pos + len(m.group(0))

    while i < n:
        ch = word[i]
        if ch == "'":
            end = word.find("'", i + 1)
            if end < 0:
                raise DockerfileSyntaxError(f"unterminated ' in {word!r}")
            out += word[i + 1 : end]
            i = end + 1
        elif ch == '"':
            i += 1
            while True:
                if i >= n:
                    raise DockerfileSyntaxError(f'unterminated " in {word!r}')
                c = word[i]
                if c == '"':
                    i += 1
                    break
                if c == "$":
                    j = dollar(i)
                    if j != i:
                        out += word[i:j]
                        i = j
                        continue
                if c == "\\" and i + 1 < n and word[i + 1] in '"$\\':
                    out += word[i + 1]
                    i += 2
                    continue
                out += c
                i += 1
        elif ch == "\\":
            if i + 1 < n:
                out += word[i + 1]
            i += 2
        elif ch == "$":
            j = dollar(i)
            if j == i:
                out += ch
                i += 1
            else:
                out += word[i:j]
                i = j
        else:
            out += ch
            i += 1
    return Word(out, tuple(expansions))


def key_values(args: str) -> list[tuple[str, Word]]:
    """``ENV``/``LABEL`` arguments in the ``key=value ...`` form."""
    pairs: list[tuple[str, Word]] = []
    for raw in split_words(args):
        key, sep, value = raw.partition("=")
        if not sep:
            raise DockerfileSyntaxError(f"not key=value: {raw!r}")
        pairs.append((unquote(key).text, unquote(value)))
    return pairs


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Instructions grouped by ``FROM``."""
    out: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            out.append([])
        if not out:
            raise DockerfileSyntaxError("instruction before FROM")
        out[-1].append(ins)
    return out


def shell_words(script: str) -> list[str]:
    """A RUN step's shell words, with ``;``, ``|``, ``&&`` and the like as words of their own."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def shell_commands(script: str) -> list[str]:
    """A RUN step's script cut at its unquoted command separators (``;``, ``&&``, ``|``,
    ``||``): a quoted ``';'`` stays inside its word."""
    out: list[str] = []
    cur: list[str] = []
    quote = ""
    i = 0
    while i < len(script):
        c = script[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < len(script):
            cur.append(c + script[i + 1])
            i += 2
            continue
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c in ";|&" and (c != "&" or script.startswith("&&", i)):
            out.append("".join(cur))
            cur = []
            i += 2 if script.startswith(("&&", "||"), i) else 1
            continue
        cur.append(c)
        i += 1
    out.append("".join(cur))
    return out


def install_requirements(script: str) -> list[str]:
    """The requirement words of a RUN step's first install command: after its first
    ``--``, up to the end of that command."""
    for command in shell_commands(script):
        words = shlex.split(command)
        if "--" in words:
            return words[words.index("--") + 1 :]
    raise ValueError("no install command with -- in the script")
