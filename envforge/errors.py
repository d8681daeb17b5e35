"""One error hierarchy, one table of exit codes.

Every failure a user can cause or meet is an :class:`EnvforgeError` whose class fixes
the process exit code. The CLI is the only place that turns one into an exit; library
callers catch them like any exception.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes; documented in docs/guarantees.md ("Exit codes")."""

    OK = 0
    CERTIFICATION_FAILED = 1
    INVALID_INPUT = 2
    BUILD_FAILED = 3
    UNAVAILABLE = 4
    PUBLISH_REFUSED = 5
    #: ``shell``: the command was found but cannot be executed (a folder, no x bit).
    NOT_EXECUTABLE = 126
    #: ``shell``: the command was not found.
    NOT_FOUND = 127
    INTERRUPTED = 130


class EnvforgeError(Exception):
    """Base of every error envforge reports to a user as one line."""

    exit_code: ExitCode = ExitCode.INVALID_INPUT

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and fix on one line; characters a terminal would act on (ESC,
        other controls) or cannot print (lone surrogates) are shown escaped."""
        text = self.message if not self.hint else f"{self.message} (fix: {self.hint})"
        return printable(" ".join(text.split()))


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or cannot print (controls,
    lone surrogates) written as its escape (``\\x1b``)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def clip(text: str, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters, cut in the middle: the end,
    where a loader or a chained error puts the cause (``libtorch_cuda.so: cannot open
    shared object file``), is kept."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    tail = (limit - 5) * 2 // 3
    return text[: limit - 5 - tail] + " ... " + text[len(text) - tail :]


class InvalidInput(EnvforgeError):
    """Bad usage, a bad recipe file, or an impossible combination. Exit 2."""

    exit_code = ExitCode.INVALID_INPUT


class DataFileError(InvalidInput):
    """A YAML data file (or ``--set`` value) that cannot be read: names the file and key path.

    Raised by the one YAML reader (:mod:`envforge.core.yamlcheck`); the subclasses say which
    kind of file it was.
    """

    def __init__(self, source: str, key: str, message: str, *, hint: str | None = None) -> None:
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {message}", hint=hint)
        self.source = source
        self.key = key


class RecipeError(DataFileError):
    """A recipe file that cannot be loaded: names the file and the key path."""


class TableError(DataFileError, ValueError):
    """A compatibility table (shipped or an overlay) that is malformed.

    For the shipped table this is a bug in envforge's data, caught by the unit tests.
    """


class ProjectError(DataFileError):
    """A project's pyproject.toml, requirements file or envforge.toml that cannot be used:
    names the file and the key (or line)."""


class ConfigError(DataFileError):
    """A settings file (the user's config.toml) that cannot be used: names the file and
    the key."""


class ConstraintViolation(InvalidInput):
    """A recipe that loads but asks for a combination the compatibility table refuses."""

    def __init__(self, source: str, rule: str, message: str, *, evidence: str, hint: str) -> None:
        super().__init__(f"{source}: [{rule}] {message} (source: {evidence})", hint=hint)
        self.source = source
        self.rule = rule
        self.evidence = evidence


class CertificationFailed(EnvforgeError):
    """The probe ran and at least one step did not pass. Exit 1."""

    exit_code = ExitCode.CERTIFICATION_FAILED


class BuildFailed(EnvforgeError):
    """The backend could not build the environment. Exit 3."""

    exit_code = ExitCode.BUILD_FAILED


class Unavailable(EnvforgeError):
    """Something the command needs is missing: engine, interpreter, device. Exit 4."""

    exit_code = ExitCode.UNAVAILABLE


class PublishRefused(EnvforgeError):
    """Publishing was refused (no passing certificate) or failed. Exit 5."""

    exit_code = ExitCode.PUBLISH_REFUSED


class Interrupted(EnvforgeError):
    """The user pressed Ctrl-C; everything started was stopped. Exit 130."""

    exit_code = ExitCode.INTERRUPTED


class BadPath(InvalidInput):
    """A path the user gave cannot hold what goes there (a file where a folder must go,
    a folder where a file must go, a symlink loop, a name too long). Exit 2."""

    def __init__(self, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class StorageUnavailable(Unavailable):
    """The file system refuses a write: read-only, full, over quota, no permission. Exit 4."""

    def __init__(self, message: str, *, path: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path
