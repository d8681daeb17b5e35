"""Parsed data files kept compiled: a value read from YAML once, then from a JSON cache.

The knowledge tables (``envforge/data/compat.yaml`` with its overlays, ``companions.yaml``,
``extensions.yaml``) and the catalogue's recipes (:mod:`envforge.recipe.compiled`) are
frozen dataclasses of plain values. Parsing and checking the YAML
costs more than starting Python with click and PyYAML, so :func:`load` keeps the checked
value in ``$ENVFORGE_CACHE_DIR/compiled/NAME.json`` (default ``~/.cache/envforge``) and
reads it back on the next call.

The cache is a plain-data format (JSON: no code runs when it is read) made of one header
line and the payload. The header holds the *key* and the payload's SHA-256. The key is the
schema of this format, envforge's version, the Python version, the size and modification
time of the modules that parse the data (``code``), and each data file's path and SHA-256
(the shipped table and every overlay). The cache is used only when every part of the key is
equal, the payload's digest matches, the file is a regular file owned by this user that
neither group nor others can write, and the payload decodes to the expected classes; any
other case (absent, stale, corrupt, foreign, unreadable, any error at all) parses the YAML
again and rewrites the cache atomically, best effort (a read-only cache folder only
means the YAML is parsed every time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from envforge.core.fsutil import write_atomically
from envforge.core.jsonlimits import loads
from envforge.core.paths import cache_dir
from envforge.errors import TableError
from envforge.version import __version__

if TYPE_CHECKING:
    from envforge.core.yamlcheck import Reader

SCHEMA = "envforge.compiled/1"
#: Largest cache file read back, and largest data file hashed (bytes).
MAX_BYTES = 16 << 20
#: The dataclass marker in the payload: ``{"~": "ClassName", field: value, ...}``.
CLASS_KEY = "~"
_PACKAGE = Path(__file__).resolve().parents[1]

T = TypeVar("T")


class Unusable(Exception):
    """The cache file cannot be used (any reason): parse the YAML instead."""


def cache_file(name: str, folder: Path | None = None) -> Path:
    """Where the compiled form of ``name`` lives (:func:`envforge.core.paths.cache_dir`
    ``/compiled``)."""
    return (cache_dir() / "compiled" if folder is None else folder) / f"{name}.json"


def digest_file(path: Path) -> str:
    """SHA-256 of a regular file of at most :data:`MAX_BYTES` (``OSError`` otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            raise OSError(f"{path}: not a regular file of at most {MAX_BYTES} bytes")
        return hashlib.sha256(fh.read(MAX_BYTES + 1)).hexdigest()


def code_stamp(modules: Sequence[str]) -> list[str]:
    """Size and modification time of the parser's modules (relative to the package)."""
    out = []
    for rel in modules:
        try:
            info = os.stat(_PACKAGE / rel)
            out.append(f"{rel}:{info.st_size}:{info.st_mtime_ns}")
        except OSError:
            out.append(f"{rel}:-")
    return out


def cache_key(
    name: str, files: Sequence[Path], code: Sequence[str], extra: Sequence[str] = ()
) -> dict[str, object]:
    """The key a cache file must hold to be used (``OSError`` when a file cannot be read).
    ``extra``: more that the value depends on (a library's version), when there is any."""
    key: dict[str, object] = {
        "schema": SCHEMA,
        "name": name,
        "envforge": __version__,
        "python": sys.version,
        "cache_tag": sys.implementation.cache_tag,
        "code": code_stamp(code),
        "files": [[str(f), digest_file(f)] for f in files],
    }
    if extra:
        key["extra"] = list(extra)
    return key


# --------------------------------------------------------------------------- encoding


def encode(value: object) -> object:
    """Frozen dataclasses of str, int, float, bool, None and tuples, as JSON values."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {CLASS_KEY: type(value).__name__}
        for f in dataclasses.fields(value):
            out[f.name] = encode(getattr(value, f.name))
        return out
    raise TypeError(f"{type(value).__name__} cannot be compiled")


def decode(payload: bytes | str, classes: Iterable[type]) -> object:
    """The inverse of :func:`encode` (lists become tuples); :class:`Unusable` when the
    data holds a mapping that is no dataclass of ``classes``, or one with other fields."""
    by_name = registry(classes)
    names = {
        name: frozenset(f.name for f in dataclasses.fields(cls) if f.init)
        for name, cls in by_name.items()
    }

    def hook(data: dict[str, Any]) -> object:  # called for every mapping, innermost first
        name = data.pop(CLASS_KEY, None)
        if name not in by_name:
            raise Unusable(f"unknown class {name!r}")
        if data.keys() != names[name]:
            raise Unusable(f"{name}: fields {sorted(data)} are not {sorted(names[name])}")
        for key, value in data.items():
            if type(value) is list:
                data[key] = _tuples(value)
        return by_name[name](**data)

    value = loads(payload, max_bytes=MAX_BYTES, object_hook=hook)
    return _tuples(value) if type(value) is list else value


def _tuples(items: list[Any]) -> tuple[Any, ...]:
    for item in items:
        if type(item) is list:  # nested: (("sm_80", "TI"), ...)
            return tuple(_tuples(v) if type(v) is list else v for v in items)
    return tuple(items)


def registry(classes: Iterable[type]) -> dict[str, type]:
    """Classes by name (names must be unique in one payload)."""
    out: dict[str, type] = {}
    for cls in classes:
        if cls.__name__ in out and out[cls.__name__] is not cls:
            raise ValueError(f"two classes named {cls.__name__}")
        out[cls.__name__] = cls
    return out


# --------------------------------------------------------------------------- the file


def read(path: Path, key: dict[str, object], kind: type[T], classes: Iterable[type]) -> T:
    """The value in a cache file; :class:`Unusable` (or any other error) when it is not
    this user's private regular file, holds another key, or is corrupt."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            raise Unusable("not a regular file of a bounded size")
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise Unusable("written by another user, or writable by others")
        raw = fh.read(MAX_BYTES + 1)
    head, sep, payload = raw.partition(b"\n")
    header = loads(head)
    if not sep or not isinstance(header, dict) or header.get("key") != key:
        raise Unusable("another key")
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise Unusable("corrupt payload")
    value = decode(payload, classes)
    if not isinstance(value, kind):
        raise Unusable(f"not a {kind.__name__}")
    return value


def serialize(key: dict[str, object], value: object) -> bytes:
    """A cache file's bytes: the header line (key, payload digest), then the payload."""
    payload = json.dumps(encode(value), ensure_ascii=True, separators=(",", ":")).encode()
    header = {"key": key, "sha256": hashlib.sha256(payload).hexdigest()}
    return json.dumps(header, ensure_ascii=True, sort_keys=True).encode() + b"\n" + payload


def load(
    name: str,
    files: Sequence[Path],
    build: Callable[[], T],
    kind: type[T],
    classes: Iterable[type],
    *,
    code: Sequence[str] = (),
    extra: Sequence[str] = (),
    folder: Path | None = None,
    keep: Callable[[T], bool] | None = None,
) -> T:
    """``build()``'s value for these data files, from the compiled cache when it is fresh.

    ``name`` names the cache file (one per table); ``files`` are the data files the value
    is parsed from, in order; ``kind`` the value's class and ``classes`` every dataclass it
    may hold; ``code`` the parser's modules, relative to the envforge package (a changed
    parser in a checkout means a stale cache); ``extra`` anything else the value depends
    on; ``keep`` whether a built value may be cached (default: always). Errors of
    ``build()`` propagate; errors of the cache never do.
    """
    classes = tuple(classes)
    try:
        key = cache_key(name, files, code, extra)
    except OSError:  # a data file that cannot be read: build() says why
        return build()
    path = cache_file(name, folder)
    with contextlib.suppress(Exception):  # absent, stale or corrupt: never trusted, rebuilt
        return read(path, key, kind, classes)
    value = build()
    if keep is None or keep(value):
        _write(path, key, value, lambda: cache_key(name, files, code, extra))
    return value


def _write(
    path: Path, key: dict[str, object], value: object, key_now: Callable[[], object]
) -> None:
    """Best effort: a cache that cannot be written only means parsing the YAML next time.
    A data file edited while it was parsed (the key differs afterwards) is not cached:
    the value may be the new content's, the key the old one's."""
    with contextlib.suppress(Exception):  # a cache: the command works without it
        if key_now() == key:
            write_atomically(path, serialize(key, value), mode=0o644)


# --------------------------------------------------------------------------- a miss


def read_yaml(path: Path) -> Any:
    """A shipped data file's YAML (:func:`envforge.core.yamlcheck.load_file`; a refusal
    is a :class:`~envforge.errors.TableError` naming the file), for a ``build()``."""
    return _yamlcheck().load_file(path, path.name, error=TableError)


def yaml_reader(source: str) -> Reader:
    """The one YAML reader's typed access (:class:`envforge.core.yamlcheck.Reader`) for a
    data file's values; refusals are :class:`~envforge.errors.TableError`."""
    reader: Reader = _yamlcheck().Reader(source, error=TableError)
    return reader


def _yamlcheck() -> ModuleType:
    """:mod:`envforge.core.yamlcheck`, and with it PyYAML, imported on a cache miss only:
    a command whose tables are all compiled does not load PyYAML."""
    from envforge.core import yamlcheck  # noqa: PLC0415 - see above

    return yamlcheck
