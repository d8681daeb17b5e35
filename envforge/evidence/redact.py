"""Redaction: what names a host or a user is removed from free text before it is kept.

Used for every report the evidence store keeps and every record ``evidence export``
writes (:mod:`envforge.evidence.records`, :mod:`envforge.evidence.evidence_store`).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

from envforge.core.lazy import LazyModule

# Only for this host's names, read when a report is stored (``show`` opens the store and
# stores nothing new, mostly): 3 ms of ``socket`` off every ``show``.
getpass = LazyModule("getpass")
socket = LazyModule("socket")


@dataclass(frozen=True)
class Redactor:
    """Removes what names a host or a user from free text (best effort).

    Home folders (``/home/NAME``, ``/Users/NAME``, ``C:\\Users\\NAME``) lose their owner;
    ``names`` (this host's name and this user's name, by default) are replaced where they
    stand as words of at least 3 characters.
    """

    names: tuple[str, ...] = ()
    _pattern: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        words = sorted({n for n in self.names if len(n) >= 3}, key=len, reverse=True)
        if words:
            alternatives = "|".join(re.escape(w) for w in words)
            pattern = re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-])")
            object.__setattr__(self, "_pattern", pattern)

    @classmethod
    def for_this_host(cls) -> Redactor:
        names: list[str] = []
        with contextlib.suppress(KeyError, OSError):  # no passwd entry for this uid
            names.append(getpass.getuser())
        host = socket.gethostname()
        names += [host, host.split(".", 1)[0]]
        # "root" is a word too common in messages; its home is covered by the path rule.
        return cls(tuple(n for n in names if n and n != "root"))

    def may_change(self, json_text: str) -> bool:
        """False when no string in the JSON document ``json_text`` can be changed by this
        redactor (none holds a trigger: a home folder's marker or one of the names), so a
        caller may keep the document as it is; True when one may (or a name is not plain
        ASCII without JSON escapes, so the text cannot tell)."""
        triggers = ("Users", "/home/", *self.names)
        if any(not _PLAIN.fullmatch(t) for t in triggers):
            return True
        return any(t in json_text for t in triggers)

    def __call__(self, text: str) -> str:
        if "Users" in text or "/home/" in text:
            text = _HOME.sub(lambda m: m.group(1) + "~", text)
        if self._pattern is not None and any(n in text for n in self.names):
            text = self._pattern.sub("<redacted>", text)
        return text


#: Text that JSON writes unchanged (printable ASCII but ``"`` and ``\\``).
_PLAIN = re.compile(r"[ !#-\[\]-~]*")
_HOME = re.compile(r"((?:/home/|/Users/|[A-Za-z]:\\Users\\))[^/\\\s'\"]+")
