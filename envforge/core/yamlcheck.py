"""The one YAML reader for envforge's data: recipes, ``--set`` values, the compatibility
table and knowledge overlays.

Reading is in three layers, each bounded:

1. :func:`read_text` opens a file without blocking (``O_NONBLOCK``; a FIFO, a device or a
   directory is refused after ``fstat``), reads at most ``max_bytes`` and decodes UTF-8.
2. :func:`parse` builds plain Python values from one YAML document: duplicate keys,
   complex (non-scalar) keys, merge keys, lone surrogates, over-long numbers, nesting
   deeper than ``MAX_DEPTH`` and more than ``MAX_NODES`` nodes (alias bombs) are refused
   with the line and key path. Plain numbers remember the text they were written as
   (``python: 3.10`` is the float 3.1 to YAML; :func:`source_text` gives ``"3.10"``).
3. :class:`Reader` gives typed access to the parsed values, raising the caller's
   :class:`~envforge.errors.DataFileError` subclass with the file, the key path
   (``env.HSA_OVERRIDE_GFX_VERSION.confidence``) and, for unknown keys or choices, the
   nearest valid one.

Every failure is a :class:`~envforge.errors.DataFileError` (exit 2, one line), never a
traceback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from envforge.core.fsutil import FileTooLarge, NotRegularFile, read_limited, read_reason
from envforge.errors import DataFileError

#: Largest data file read (bytes). Recipes are a few kB, the shipped table about 26 kB.
MAX_BYTES = 1 << 20
#: Deepest nesting of collections accepted (the deepest real file nests 5).
MAX_DEPTH = 64
#: Most nodes built from one document, aliases counted each time they are used.
MAX_NODES = 200_000
#: Longest text of a plain number (``int("9" * 5000)`` is refused by Python itself).
MAX_NUMBER_CHARS = 64

T = TypeVar("T")
ErrorType = Callable[..., DataFileError]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_CONTAINER_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class SourceFloat(float):
    """A float that remembers how it was written (``3.10``)."""

    source: str


class SourceInt(int):
    """An int that remembers how it was written (``010``)."""

    source: str


def source_text(value: object) -> str | None:
    """The text a number was written as, when this reader made it."""
    if isinstance(value, (SourceFloat, SourceInt)):
        return value.source
    return None


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``word``, or None when none is close (for an error's hint)."""
    import difflib  # noqa: PLC0415 - only when refusing: no command that succeeds loads it

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None


def has_surrogate(text: str) -> bool:
    """True if ``text`` holds a lone surrogate (it cannot be written as UTF-8)."""
    return _SURROGATE_RE.search(text) is not None


def join(path: str, key: object) -> str:
    """``env`` + ``X`` → ``env.X``; ``""`` + ``name`` → ``name``; ints → ``[i]``."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


# --------------------------------------------------------------------------- files


def _kind(path: Path) -> str:
    """What a file of ``path``'s name is, for a hint: ``.yaml file``, ``.toml file``, …"""
    suffix = Path(path).suffix
    return f"{suffix} file" if suffix else "file"


def read_text(
    path: Path,
    source: str | None = None,
    *,
    error: ErrorType = DataFileError,
    max_bytes: int = MAX_BYTES,
) -> str:
    """Read a small UTF-8 text file without blocking on FIFOs or devices.

    Raises ``error(source, "", message, hint=...)`` for a missing, non-regular, too large
    or undecodable file.
    """
    where = str(path) if source is None else source
    try:
        data = read_limited(path, max_bytes)
    except FileNotFoundError:
        raise error(where, "", "no such file") from None
    except IsADirectoryError:
        raise error(where, "", "is a directory", hint=f"give the path of a {_kind(path)}") from None
    except NotRegularFile as exc:
        raise error(
            where,
            "",
            read_reason(exc, path),
            hint=f"put a regular file there, or give the path of another {_kind(path)}",
        ) from None
    except FileTooLarge as exc:
        size = f"is {exc.size} bytes, more than" if exc.size is not None else "is more than"
        raise error(
            where,
            "",
            f"{size} the {max_bytes} bytes allowed",
            hint="data files are small text files; check the path",
        ) from None
    except OSError as exc:
        raise error(where, "", f"cannot be read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            where,
            "",
            f"cannot be read: not UTF-8 text (byte {exc.start})",
            hint="save the file as UTF-8",
        ) from None


def load_file(
    path: Path,
    source: str | None = None,
    *,
    error: ErrorType = DataFileError,
    max_bytes: int = MAX_BYTES,
) -> Any:
    """:func:`read_text` then :func:`parse`."""
    where = str(path) if source is None else source
    return parse(read_text(path, where, error=error, max_bytes=max_bytes), where, error=error)


# --------------------------------------------------------------------------- parsing


class _DepthCounting:
    """A composer mix-in that counts nesting (the composer's recursion is unbounded)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[attr-defined,unused-ignore]
                raise _TooDeep(mark.line + 1)
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self.depth -= 1


class _Loader(_DepthCounting, yaml.SafeLoader):
    """PyYAML's pure-Python safe loader, nesting bounded."""


_CParser: Any = getattr(getattr(yaml, "_yaml", None), "CParser", None)

if _CParser is not None:

    class _FastLoader(
        _DepthCounting,
        yaml.composer.Composer,
        _CParser,  # type: ignore[misc]
        yaml.constructor.SafeConstructor,
        yaml.resolver.Resolver,
    ):
        """libyaml's scanner and parser (about 15x faster: ``envforge list`` reads every
        recipe) under the pure-Python composer above, so nesting stays bounded in Python.

        Not libyaml's own composer: it recurses in C without a limit, and a document
        nested 100,000 deep crashes the interpreter (seen with PyYAML 6 here).
        """

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            yaml.composer.Composer.__init__(self)


def _compose(text: str) -> tuple[Any, yaml.Node | None]:
    """(loader, root node): libyaml's parser where it is there, else PyYAML's own.

    Where libyaml refuses a document, PyYAML's parser reads it again, so that what is
    refused and the message saying why do not depend on whether libyaml is installed.
    """
    if _CParser is not None and not has_surrogate(text):
        fast = _FastLoader(text)
        try:
            return fast, fast.get_single_node()
        except yaml.YAMLError:
            fast.dispose()
    slow = _Loader(text)  # the reader refuses control characters here
    try:
        return slow, slow.get_single_node()
    except BaseException:
        slow.dispose()
        raise


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _Builder:
    """Node tree → Python values, with key paths for every refusal."""

    def __init__(self, loader: _Loader, source: str, error: ErrorType) -> None:
        self.loader = loader
        self.source = source
        self.error = error
        self.nodes = 0

    def fail(self, path: str, node: yaml.Node, message: str, hint: str | None = None) -> Exception:
        line = node.start_mark.line + 1
        where = f"{path} (line {line})" if path else f"line {line}"
        return self.error(self.source, where, message, hint=hint)

    def build(self, node: yaml.Node, path: str, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(
                path,
                node,
                f"more than {MAX_NODES} values (aliases expanded)",
                hint="data files are small; remove repeated aliases",
            )
        if depth > MAX_DEPTH:
            raise self.fail(
                path,
                node,
                f"nested more than {MAX_DEPTH} levels deep",
                hint="flatten the structure",
            )
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != "tag:yaml.org,2002:seq":
                raise self.fail(
                    path, node, f"unsupported YAML tag {node.tag!r}", hint="write a plain list"
                )
            return [self.build(item, join(path, i), depth + 1) for i, item in enumerate(node.value)]
        return self.scalar(node, path)

    def mapping(self, node: yaml.MappingNode, path: str, depth: int) -> dict[Any, Any]:
        if node.tag != "tag:yaml.org,2002:map":
            raise self.fail(
                path, node, f"unsupported YAML tag {node.tag!r}", hint="write a plain mapping"
            )
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(
                    path,
                    key_node,
                    "a key is a list or a mapping (a complex '?' key)",
                    hint="keys must be plain words",
                )
            if key_node.tag == _MERGE_TAG:
                raise self.fail(
                    path, key_node, "merge keys (<<) are not supported", hint="write the keys out"
                )
            key = self.scalar(key_node, path)
            here = f"{path}.{key}" if path else str(key)
            try:
                seen = key in result
            except TypeError:  # an unhashable scalar cannot be made; belt and braces
                raise self.fail(
                    path, key_node, "a key is not a plain value", hint="keys must be plain words"
                ) from None
            if seen:
                line = key_node.start_mark.line + 1
                raise self.error(
                    self.source,
                    here,
                    f"key {str(key)!r} appears twice (second at line {line})",
                    hint="keep one of them",
                )
            result[key] = self.build(value_node, here, depth + 1)
        return result

    def scalar(self, node: yaml.Node, path: str) -> Any:
        text = node.value if isinstance(node.value, str) else ""
        if has_surrogate(text):
            raise self.fail(
                path,
                node,
                "contains a lone surrogate (an invalid character)",
                hint="write the character itself, as UTF-8",
            )
        if node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
            if len(text) > MAX_NUMBER_CHARS:
                raise self.fail(
                    path, node, f"a number of {len(text)} characters", hint="quote it if it is text"
                )
            value = self.loader.construct_object(node)
            number: SourceInt | SourceFloat
            if isinstance(value, bool):
                return value
            number = SourceInt(value) if isinstance(value, int) else SourceFloat(value)
            number.source = text
            return number
        if node.tag in _CONTAINER_TAGS:  # an explicit !!map/!!seq tag on a scalar
            raise self.fail(path, node, f"a scalar tagged {node.tag!r}")
        return self.loader.construct_object(node)


def parse(text: str, source: str, *, error: ErrorType = DataFileError) -> Any:
    """Parse one YAML document into plain values (see the module docstring)."""
    try:
        loader, node = _compose(text)
        try:
            if node is None:
                return None
            return _Builder(loader, source, error).build(node, "")
        finally:
            loader.dispose()
    except _TooDeep as exc:
        raise error(
            source,
            f"line {exc.line}",
            f"nested more than {MAX_DEPTH} levels deep",
            hint="flatten the structure",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(
            source,
            where,
            f"not valid YAML: {problem}",
            hint="fix the YAML syntax there (quote text with special characters)",
        ) from None
    except (RecursionError, MemoryError):  # belt and braces: the limits above come first
        raise error(
            source,
            "",
            "too large or too deeply nested to read",
            hint="data files are small and flat",
        ) from None
    except (ValueError, OverflowError, TypeError) as exc:  # a constructor's own refusal
        raise error(
            source, "", f"not valid YAML: {exc}", hint="quote the value if it is meant as text"
        ) from None


# --------------------------------------------------------------------------- typed access


_PATH_TOKEN_RE = re.compile(r"\[([0-9]+)\]|([^.\[\]]+)")


def line_of(text: str, path: str) -> int | None:
    """The 1-based line of the node at key ``path`` (``releases[2].variants[0].name``) in
    a YAML document, or of its deepest existing ancestor; None when none is found (call
    only on text that :func:`parse` accepted)."""
    try:
        node: Any = yaml.compose(text, Loader=_Loader)
    except Exception:
        return None
    if node is None:
        return None
    line: int = node.start_mark.line + 1
    for index, key in _PATH_TOKEN_RE.findall(path):
        nxt: Any = None
        if index and isinstance(node, yaml.SequenceNode):
            i = int(index)
            nxt = node.value[i] if i < len(node.value) else None
            if nxt is not None:
                line = nxt.start_mark.line + 1
        elif key and isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                    nxt = value_node
                    line = key_node.start_mark.line + 1
                    break
        if nxt is None:
            break
        node = nxt
    return line


class Reader:
    """Typed access to parsed YAML; every refusal names the file and the key path.

    ``error`` is the :class:`DataFileError` subclass raised (``RecipeError``,
    ``TableError``). ``numbers_as_text`` lets a plain number stand for the text it was
    written as (recipes: ``python: 3.10``); ``forbidden`` are characters no text value
    may hold; ``misplaced(key, parent)`` may name where an unknown key belongs;
    ``required_hint`` is formatted with ``key`` for a missing required key; ``check``
    returns why a text value is refused (message, fix), or None.
    """

    def __init__(
        self,
        source: str,
        error: ErrorType = DataFileError,
        *,
        numbers_as_text: bool = False,
        forbidden: frozenset[str] = frozenset(),
        forbidden_hint: str = "put the value on one line",
        misplaced: Callable[[str, str, bool], str | None] | None = None,
        required_hint: str | None = None,
        top: str = "(top level)",
        check: Callable[[str], tuple[str, str] | None] | None = None,
    ) -> None:
        self.source = source
        self.error = error
        self.numbers_as_text = numbers_as_text
        self.forbidden = tuple(sorted(forbidden))
        self.forbidden_hint = forbidden_hint
        self.misplaced = misplaced
        self.required_hint = required_hint
        self.top = top
        self.check = check

    def fail(self, path: str, message: str, hint: str | None = None) -> DataFileError:
        return self.error(self.source, path, message, hint=hint)

    def mapping(
        self, value: object, path: str, allowed: Sequence[str], required: Sequence[str] = ()
    ) -> dict[str, Any]:
        """A mapping whose keys are strings from ``allowed``, with every ``required`` key."""
        if not isinstance(value, dict):
            raise self.fail(path or self.top, f"expected a mapping, got {kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path or self.top, f"key {key!r} is not a string", "quote the key")
            if key not in allowed:
                near: str | None = None
                if self.misplaced is not None:
                    near = self.misplaced(key, path, True)
                near = near or did_you_mean(key, allowed)
                if near is None and self.misplaced is not None:
                    near = self.misplaced(key, path, False)
                known = f"valid keys: {', '.join(allowed)}"
                hint = f"did you mean {near!r}?" if near else known
                raise self.fail(f"{path}.{key}" if path else key, "unknown key", hint)
        for key in required:
            if value.get(key) is None:
                fix = None if self.required_hint is None else self.required_hint.format(key=key)
                raise self.fail(f"{path}.{key}" if path else key, "missing required key", fix)
        return value

    def text(self, value: object, path: str, *, allow_empty: bool = False) -> str:
        """A string (or, with ``numbers_as_text``, a plain number as written)."""
        if self.numbers_as_text:
            written = source_text(value)
            if written is not None:
                value = written
        if isinstance(value, bool) or not isinstance(value, str):
            hint = "quote the value" if self.numbers_as_text else None
            raise self.fail(path, f"expected a string, got {kind(value)}", hint)
        for bad in self.forbidden:
            if bad in value:
                raise self.fail(
                    path,
                    f"contains {bad!r}, which cannot be quoted safely in a Dockerfile",
                    self.forbidden_hint,
                )
        if has_surrogate(value):
            raise self.fail(path, "contains a lone surrogate (an invalid character)")
        if self.check is not None:
            problem = self.check(value)
            if problem is not None:
                raise self.fail(path, *problem)
        if not allow_empty and not value.strip():
            raise self.fail(path, "must not be empty")
        return value

    def opt_text(self, value: object, path: str) -> str | None:
        return None if value is None else self.text(value, path)

    def texts(self, value: object, path: str, *, non_empty: bool = False) -> tuple[str, ...]:
        """A list of strings; a lone string is a list of one, nothing is empty."""
        if value is None or value == []:
            if non_empty:
                raise self.fail(path, "expected a non-empty list")
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of strings, got {kind(value)}")
        return tuple(self.text(v, join(path, i)) for i, v in enumerate(value))

    def pattern(self, value: object, path: str, regex: re.Pattern[str], example: str) -> str:
        text = self.text(value, path)
        if not regex.match(text):
            raise self.fail(path, f"{text!r} is not valid here", f"write it like {example}")
        return text

    def choice(self, value: object, path: str, choices: Sequence[T]) -> T:
        text = self.text(value, path)
        for choice in choices:
            if text == choice:
                return choice
        near = did_you_mean(text, [str(c) for c in choices])
        hint = f"did you mean {near!r}?" if near else f"one of: {', '.join(map(str, choices))}"
        raise self.fail(path, f"{text!r} is not allowed", hint)

    def number(self, value: object, path: str, what: str = "a number of seconds") -> float:
        """A finite number greater than zero."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected {what}, got {kind(value)}")
        if not math.isfinite(value):
            raise self.fail(path, f"{value} is not a finite number", "write a number like 30")
        if value <= 0:
            raise self.fail(path, "must be greater than zero")
        return float(value)

    def integer(self, value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {kind(value)}")
        return int(value)


def kind(value: object) -> str:
    """How a parsed value reads in an error message."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    return {"dict": "a mapping", "list": "a list"}.get(type(value).__name__, type(value).__name__)
