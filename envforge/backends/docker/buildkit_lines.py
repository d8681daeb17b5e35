"""What of BuildKit's plain progress a person sees while an image builds.

A base image that is only on this engine (a stand-in, a site's own) makes BuildKit ask a
registry first: ``#2 [internal] load metadata for docker.io/site/base:1``, then
``#2 ERROR: not found`` and a ``------`` block quoting the step. The build then uses the
local image and succeeds, but the lines read like a failure (user journey 2e). They are
held back while the build runs: on success one line says what happened instead; on a
failure they are shown after all, in their order, since they may be the cause.
Everything else passes through as it comes.

Every line either builder hands on (to ``on_line``: a terminal's display, the heartbeat of
a log) is first made :func:`plain`: the one place build output is made printable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from envforge.errors import printable

#: A terminal's control sequences (CSI: colours, cursor moves) in a builder's output.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_METADATA = re.compile(r"^#(\d+) \[internal\] load metadata for (\S+)$")
_ERROR = re.compile(r"^#(\d+) ERROR: ")
_RULE = "------"


def plain(line: str) -> str:
    """A builder's output line as a person is shown it: terminal control sequences (the
    classic builder's colours) removed, other control characters escaped (``\\x07``)."""
    return printable(_ANSI.sub("", line))


class HeldNoise:
    """Feed each raw line; show what :meth:`feed` and, at the end, :meth:`finish` return
    (each line :func:`plain`)."""

    def __init__(self) -> None:
        self._base: dict[int, str] = {}  # vertex -> the base image it resolves
        self._held: list[str] = []
        self._in_block = False
        self._missing: list[str] = []

    def feed(self, line: str) -> list[str]:
        shown = plain(line)
        if self._in_block:
            self._held.append(shown)
            self._in_block = line != _RULE
            return []
        if line == _RULE:
            self._held.append(shown)
            self._in_block = True
            return []
        found = _METADATA.match(line)
        if found:
            self._base[int(found.group(1))] = found.group(2)
            return [shown]
        error = _ERROR.match(line)
        if error and int(error.group(1)) in self._base:
            self._held.append(shown)
            self._missing.append(self._base[int(error.group(1))])
            return []
        return [shown]

    def finish(self, ok: bool) -> list[str]:
        """What to show once the build ended (``ok``: it made an image)."""
        held, self._held = self._held, []
        if not ok:
            return held
        if not self._missing:
            return held  # a block that is not the base image's lookup: shown as it was
        names = plain(", ".join(dict.fromkeys(self._missing)))
        return [
            f"(BuildKit found no {names} in a registry and used this engine's copy: "
            "its 'ERROR: not found' lines are not a failure, and are not shown)"
        ]


_CANCELED = re.compile(r"^#(\d+) CANCELED$")


def failure_reason(log: Sequence[str]) -> str:
    """The line that says why a build that named no failing step failed: the last one
    with "error" in it, or BuildKit's own "failed to solve ..."; else "no image"."""
    return next(
        (ln for ln in reversed(log) if "error" in ln.lower() or ln.startswith("failed to ")),
        "no image",
    )


def base_stopped(
    what: str, failed: tuple[int, str] | None, base_vertices: set[int], log: Sequence[str]
) -> bool:
    """Whether a failed BuildKit build stopped on its base image (a network problem, exit
    4, not the recipe's): the FROM step failed, a vertex resolving the base (``[internal]
    load metadata for ...``) errored, or, when no step is named, one was cancelled, as
    BuildKit does when the solve fails on ``Head .../manifests/TAG`` before the vertex
    reports its own error."""
    if what.startswith("step FROM "):
        return True
    if failed is not None:
        return failed[0] in base_vertices
    cancelled = {int(m.group(1)) for m in map(_CANCELED.match, log) if m}
    return bool(cancelled & base_vertices)
