"""The one JSON decoder for every JSON input envforge reads: size, depth and number limits.

Files (certificates, evidence reports and bundles, the store, caches, venv markers),
image labels, the probe worker's lines and network documents (registry manifests, image
configs, tokens, index pages: ``envforge.publish.registry``, ``envforge.knowledge``) are decoded
with :func:`loads`, never with ``json.loads`` directly. A hostile document is then one
:class:`BadJSON` (a ``ValueError``: what callers caught for malformed JSON still catches
it) with a one-line reason, never a ``RecursionError``, a ``MemoryError`` or minutes of
work:

* more than ``max_bytes`` (default :data:`MAX_BYTES`) is refused before decoding;
* nesting deeper than ``max_depth`` (default :data:`MAX_DEPTH`) levels is refused (a
  deeper document than Python's recursion limit is caught as such, too);
* an integer of more than :data:`MAX_DIGITS` digits is refused (Python would spend time
  quadratic in its length converting it), and so are ``NaN`` and ``Infinity``, which are
  not JSON, and numbers out of a float's range.

Files are read with :func:`envforge.core.reading.read_limited` (regular files only, bounded,
never blocking on a FIFO): :func:`load_file` does both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envforge.core.reading import read_limited

#: Bytes one document may have (a whole evidence bundle is read line by line).
MAX_BYTES = 16 * 1024 * 1024
#: Nesting levels one document may have (envforge's own documents use fewer than 10).
MAX_DEPTH = 64
#: Digits one integer may have.
MAX_DIGITS = 64


class BadJSON(ValueError):
    """A document that is not JSON within the limits; ``str()`` is one line."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise BadJSON(f"a number of {len(text)} digits (at most {MAX_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BadJSON(f"the number {text[:20]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON value")


def _depth_ok(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests at most ``max_depth`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend(
                (child, depth + 1) for child in children if isinstance(child, (dict, list))
            )
    return True


def loads(
    data: str | bytes,
    *,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    object_hook: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """Decode one JSON document within the limits; :class:`BadJSON` otherwise.

    ``object_hook`` is ``json.loads``'s (what it raises propagates; the depth limit then
    counts the mappings and lists left as such)."""
    if len(data) > max_bytes:
        raise BadJSON(f"larger than {max_bytes} bytes")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise BadJSON("not UTF-8 text") from None
    else:
        text = data
    try:
        value = json.loads(
            text,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_constant,
            object_hook=object_hook,
        )
    except BadJSON:
        raise
    except RecursionError:
        raise BadJSON(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise BadJSON(f"not JSON: {str(exc).splitlines()[0][:200]}") from None
    if not _depth_ok(value, max_depth):
        raise BadJSON(f"nested deeper than {max_depth} levels")
    return value


def load_file(path: Path, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Read ``path`` with :func:`envforge.core.reading.read_limited` and decode it.

    Raises what ``read_limited`` raises (an ``OSError``: :class:`~envforge.core.fsutil.
    NotRegularFile` for a FIFO or device, :class:`~envforge.core.fsutil.FileTooLarge`, …;
    :func:`envforge.core.fsutil.read_reason` words it) or :class:`BadJSON`.
    """
    return loads(read_limited(path, max_bytes), max_bytes=max_bytes, max_depth=max_depth)
