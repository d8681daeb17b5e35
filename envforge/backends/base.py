"""What every backend is given and returns: one options value, its own option declarations,
results and doctor's questions. Light: no backend, no SDK (the CLI and doctor import it).

A command builds one :class:`Options` value from its flags and hands it to the backend it
chose; the backend reads the fields every backend has, and the values of the flags it
declared itself (:class:`BackendOption`) from :attr:`Options.extra`. A flag only some
backends declare is refused, naming them, when another backend was chosen
(:func:`refuse_foreign`): adding a backend means adding a module, not editing commands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from envforge.errors import CertificationFailed, InvalidInput

if TYPE_CHECKING:
    from envforge.container.devices import GpuPick
    from envforge.probe.report import ProbeReport
    from envforge.probe.runner import ProbeListener
    from envforge.probe.spec import GpuChecks
    from envforge.project.model import Project

Say = Callable[[str], None]
#: ``shell`` with trusted keys: called with an environment's digest (``sha256:…``), its
#: name and the attestation files the backend keeps for it, before anything runs in
#: it; raises to refuse it.
Admit = Callable[[str, str, Sequence[Path]], None]

#: The commands that hand an :class:`Options` value to a backend.
Command = Literal["build", "certify", "shell"]


def _quiet(_text: str) -> None:
    pass


class LineSink(Protocol):
    """Where build output goes, line by line (``envforge.cli.display.BuildDisplay``); the
    backend hands on printable lines (the docker backend: ``buildkit_lines.plain``)."""

    def __call__(self, line: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Options:
    """How to build, certify and run, for any backend (never part of the recipe hash)."""

    #: Probe level and seconds per probe step (None: the recipe's).
    level: Literal["quick", "full"] | None = None
    step_timeout: float | None = None
    #: ``--require-free GIB``: the probe's memory step fails below GIB free on a GPU.
    require_free: float | None = None
    #: ``--health``, ``--require-healthy``, ``--collective`` as the command settled them
    #: (:meth:`envforge.probe.spec.GpuChecks.chosen`); None: none of these steps.
    gpu_checks: GpuChecks | None = None
    #: Write the probe's reports (and the certificate) here.
    report_dir: Path | None = None
    #: Folder of wheels to install from; PEM bundle the installer trusts.
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    #: ``index_mirror`` (:func:`envforge.core.mirror.parse_index_mirror`, checked): the
    #: default index's mirror and index pairs; None: ``ENVFORGE_INDEX_MIRROR`` at render.
    index_mirror: str | None = None
    #: ``--signing-key``: the backend signs its certificates with it, or says it does not.
    signing_key: Path | None = None
    #: ``--gpu``: only these GPUs (None: all of the recipe's vendor).
    gpus: GpuPick | None = None
    #: Base environment (engine settings, PATH for interpreters, proxies; None: this
    #: process's).
    environ: Mapping[str, str] | None = None
    listener: ProbeListener | None = None
    #: One-line status for people (``envforge: ...``) and untagged progress lines.
    say: Say = field(default=_quiet)
    note: Say = field(default=_quiet)
    #: Build output, line by line (None: discarded).
    output: LineSink | None = None
    #: ``--project DIR``: a project on the stack, in an environment of its own (None: the
    #: recipe's own environment).
    project: Project | None = None
    #: The values of the flags a backend declared (:class:`BackendOption`), by key;
    #: only flags given are here.
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: ``shell`` with trusted keys: the admission check (:data:`Admit`; None: none).
    admit: Admit | None = None


@dataclass(frozen=True)
class BackendOption:
    """A command-line flag one backend has and others may not (``--tag``, ``--python``).

    Declared by the backend (its ``cli_options()``); each command adds the flags its
    backends declare for it, once per flag."""

    flag: str
    #: The key in :attr:`Options.extra` (and the click parameter name).
    key: str
    help: str
    commands: tuple[Command, ...]
    metavar: str | None = None
    is_flag: bool = False
    multiple: bool = False
    choices: tuple[str, ...] = ()
    #: ``path``: an existing folder; ``file``: an existing file; ``size``: 16g.
    kind: Literal["text", "dir", "file", "size"] = "text"


class Result(Protocol):
    """What ``build`` and ``certify`` return."""

    # whether the environment is certified for the recipe now
    @property
    def certified(self) -> bool: ...

    # the probe run behind the verdict, for --summary (None: no probe ran)
    @property
    def report(self) -> ProbeReport | None: ...

    # the data ``--json`` prints
    def to_dict(self) -> dict[str, Any]: ...

    # the rows of a --summary section
    def facts(self) -> list[tuple[str, str]]: ...

    # the line printed on stdout (certified tag, image ID, venv path) and the status line
    # said on stderr (None: nothing to say); neither with --json
    def printed(self) -> str: ...

    def closing(self) -> str | None: ...

    # the error to raise when the result is not certified (None: nothing to raise)
    def failure(self) -> CertificationFailed | None: ...


class ProbeFailed(CertificationFailed):
    """A backend's probe did not pass: exit 1, with the report for ``--summary``."""

    def __init__(
        self, message: str, *, hint: str | None = None, report: ProbeReport | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.report = report


@dataclass(frozen=True)
class HostCheck:
    """What ``envforge doctor`` asks each backend about this host."""

    #: Where ``dev/``, ``proc/`` and ``etc/`` are read from (a fixture tree in tests).
    root: Path
    #: The user asked for this backend (``--backend``): its problems block; else they warn.
    required: bool
    #: Stand-ins for what a backend would ask this machine (by the backend's own names),
    #: so tests never touch it.
    stand_ins: Mapping[str, Callable[[], Any]] = field(default_factory=dict)


def _options_of(backends: Mapping[str, Any], name: str) -> tuple[BackendOption, ...]:
    """Backend ``name``'s flags: through the registry's own lookup where it has one (a
    backend's flags module, the backend not imported), else from the backend."""
    lookup = getattr(backends, "cli_options", None)
    if callable(lookup):
        return cast("tuple[BackendOption, ...]", lookup(name))
    return cast("tuple[BackendOption, ...]", backends[name].cli_options())


def declared(backends: Mapping[str, Any], command: Command) -> dict[str, list[str]]:
    """Flag -> the backends (by name) that declare it for ``command``."""
    out: dict[str, list[str]] = {}
    for name in backends:
        for option in _options_of(backends, name):
            if command in option.commands:
                out.setdefault(option.flag, []).append(name)
    return out


def unique_options(backends: Mapping[str, Any], command: Command) -> list[BackendOption]:
    """The flags the backends declare for ``command``, each once (first declaration)."""
    seen: dict[str, BackendOption] = {}
    for name in backends:
        for option in _options_of(backends, name):
            if command in option.commands:
                seen.setdefault(option.flag, option)
    return list(seen.values())


def given(options: Sequence[BackendOption], values: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the declared flags that were given (not None, not empty, not False)."""
    out: dict[str, Any] = {}
    for option in options:
        value = values.get(option.key)
        if value is not None and value != () and value is not False:
            out[option.key] = value
    return out


def refuse_foreign(
    backends: Mapping[str, Any], chosen: str, command: Command, extra: Mapping[str, Any]
) -> None:
    """Refuse (exit 2, one line) the flags given that ``chosen`` does not declare."""
    owners = declared(backends, command)
    flags = {o.key: o.flag for o in unique_options(backends, command)}
    foreign = [flags[key] for key in extra if chosen not in owners.get(flags[key], [])]
    if foreign:
        names = sorted({n for flag in foreign for n in owners[flag]})
        raise InvalidInput(
            f"{', '.join(foreign)}: only for --backend {' or '.join(names)}",
            hint=f"drop {' and '.join(foreign)}, or choose --backend {names[0]}",
        )


def implied(backends: Mapping[str, Any], command: Command, extra: Mapping[str, Any]) -> str | None:
    """The one backend the given flags point to (``--image``: docker), else None."""
    owners = declared(backends, command)
    flags = {o.key: o.flag for o in unique_options(backends, command)}
    names = {tuple(owners[flags[key]]) for key in extra}
    single = {n[0] for n in names if len(n) == 1}
    return single.pop() if len(single) == 1 else None
