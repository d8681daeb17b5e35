"""One driver for every backend, as pre-commit's ``run_language`` is for its languages.

:func:`run_backend` takes a backend registered in ``BACKENDS`` and walks it through the
contract of :class:`envforge.backends.Backend` (``envforge/backends/base.py``):

* its shape: every member of the Protocol, with the Protocol's parameters (names and
  kinds; anything more has a default);
* its declared options: well-formed, on the CLI of the commands they name, accepted for
  it and refused (naming it) for every backend that does not declare them;
* doctor: findings for the host alone and for a recipe, blocking only when the backend
  was asked for; the disk it needs per vendor; ``describe`` and ``runs_images``;
* and, where the test rigged it (no engine, no GPU, no network), ``build``, ``certify``
  and ``shell`` through the commands themselves: exit codes, ``--json`` and the exit code
  of the command a shell ran.

A third backend's test is then one call per rig.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import click
import pytest

from envforge import backends
from envforge.backends.base import BackendOption, Command, HostCheck, refuse_foreign
from envforge.cli import main
from envforge.cli.backend_options import backend_flags
from envforge.errors import InvalidInput
from envforge.host.detect import HostInfo
from envforge.host.doctor import Finding, Severity
from envforge.recipe.model import Recipe

COMMANDS: tuple[Command, ...] = get_args(Command)
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
VENDORS = ("none", "amd", "nvidia")
KINDS = ("text", "dir", "file", "size")


@dataclass(frozen=True)
class Drive:
    """What to run through the commands; ``shell_exit``: the code ``shell`` must end with
    (the backend's ``run`` answer for ``argv``). An empty ``commands`` drives nothing."""

    recipe: str = "cpu"
    commands: tuple[Command, ...] = COMMANDS
    argv: tuple[str, ...] = ("true",)
    shell_exit: int = 0
    #: more arguments for every command (e.g. ``--wheelhouse DIR``)
    extra: tuple[str, ...] = ()


@dataclass
class Ran:
    """What :func:`run_backend` saw: the ``--json`` data of build and certify, the shell's
    exit code and doctor's findings (recipe None and the recipe)."""

    built: dict[str, Any] = field(default_factory=dict)
    certified: dict[str, Any] = field(default_factory=dict)
    shell_exit: int | None = None
    findings: list[Finding] = field(default_factory=list)


def run_backend(
    name: str,
    recipe: Recipe,
    host: HostInfo,
    capsys: pytest.CaptureFixture[str],
    *,
    root: Path,
    stand_ins: Mapping[str, Callable[[], Any]] | None = None,
    drive: Drive | None = None,
) -> Ran:
    """The contract for ``BACKENDS[name]``; ``root`` and ``stand_ins`` are doctor's (a
    fixture tree, and what the backend would ask this machine)."""
    backend = backends.BACKENDS[name]
    check_shape(backend)
    check_options(name)
    ran = Ran(findings=check_doctor(backend, recipe, host, root, stand_ins or {}))
    assert isinstance(backend.runs_images(), bool)
    assert backend.describe(recipe).strip()
    if drive is not None:
        _drive(name, drive, ran, capsys)
    return ran


def _protocol_members() -> dict[str, inspect.Signature]:
    out = {}
    for member, value in vars(backends.Backend).items():
        if not member.startswith("_") and inspect.isfunction(value):
            signature = inspect.signature(value)
            params = list(signature.parameters.values())[1:]  # self
            out[member] = signature.replace(parameters=params)
    return out


def check_shape(backend: object) -> None:
    """Every Protocol member, callable with the Protocol's parameters by name and kind."""
    members = _protocol_members()
    assert {"build", "certify", "run", "check", "findings", "cli_options"} <= set(members)
    for member, wanted in members.items():
        got = getattr(backend, member, None)
        assert callable(got), f"{member}: missing"
        params = inspect.signature(got).parameters
        for param in wanted.parameters.values():
            assert param.name in params, f"{member}: no parameter {param.name}"
            assert params[param.name].kind == param.kind, f"{member}({param.name}): kind"
        for extra in set(params) - set(wanted.parameters):
            assert params[extra].default is not inspect.Parameter.empty, (
                f"{member}({extra}): more than the Protocol, without a default"
            )


def _value(option: BackendOption) -> object:
    if option.is_flag:
        return True
    return ("x",) if option.multiple else "x"


def check_options(name: str) -> None:
    """Declared flags are well formed, on the CLI of their commands, accepted for this
    backend, refused (naming it) for the others, and declared alike by every owner."""
    registered = backends.BACKENDS
    for option in registered[name].cli_options():
        assert option.flag.startswith("--"), option
        assert option.key.isidentifier(), option
        assert option.commands, option
        assert set(option.commands) <= set(COMMANDS), option
        assert option.kind in KINDS, option
        assert not (option.choices and option.is_flag), option
        for command in option.commands:
            _on_the_cli(command, option.flag)
            given = {option.key: _value(option)}
            refuse_foreign(registered, name, command, given)  # its own: accepted
            for other, backend in registered.items():
                theirs = {o.flag: o for o in backend.cli_options() if command in o.commands}
                if option.flag in theirs:
                    same = theirs[option.flag]
                    assert (same.key, same.is_flag, same.multiple) == (
                        option.key,
                        option.is_flag,
                        option.multiple,
                    ), f"{option.flag}: {name} and {other} declare it differently"
                    continue
                with pytest.raises(InvalidInput) as refused:
                    refuse_foreign(registered, other, command, given)
                assert option.flag in refused.value.message
                assert name in refused.value.message


def _on_the_cli(command: Command, flag: str) -> None:
    @click.command()
    @backend_flags(command)
    def made(**flags: object) -> None:
        pass

    assert flag in {opt for p in made.params for opt in p.opts}, f"{command}: no {flag}"


def check_doctor(
    backend: backends.Backend,
    recipe: Recipe,
    host: HostInfo,
    root: Path,
    stand_ins: Mapping[str, Callable[[], Any]],
) -> list[Finding]:
    """Findings are Findings; a backend not asked for never blocks; every vendor has a
    disk need."""
    found: list[Finding] = []
    for subject in (None, recipe):
        for required in (True, False):
            check = HostCheck(root=root, required=required, stand_ins=stand_ins)
            findings = backend.findings(subject, host, check)
            assert all(isinstance(f, Finding) and f.check for f in findings), findings
            assert all(f.severity in SEVERITIES for f in findings), findings
            if not required:
                blocking = [f for f in findings if f.severity == "block"]
                assert blocking == [], f"not asked for, yet blocks: {blocking}"
            else:
                found += findings
    for vendor in VENDORS:
        size, where = backend.disk_need(vendor)
        assert isinstance(size, int), vendor
        assert size > 0, vendor
        assert isinstance(where, Path), vendor
    return found


def _drive(name: str, drive: Drive, ran: Ran, capsys: pytest.CaptureFixture[str]) -> None:
    base = [drive.recipe, "--backend", name, *drive.extra]
    for command in drive.commands:
        capsys.readouterr()
        if command == "shell":
            with pytest.raises(SystemExit) as exited:
                main(["shell", *base, "--", *drive.argv])
            ran.shell_exit = exited.value.code if isinstance(exited.value.code, int) else None
            assert ran.shell_exit == drive.shell_exit, capsys.readouterr().err
            continue
        code = main([command, *base, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        data = _json(out)
        assert data["certified"] is True, data
        if command == "build":
            ran.built = data
        else:
            ran.certified = data


def _json(out: str) -> dict[str, Any]:
    """One result: ``certify --json``'s object, or the one of ``build --json``'s list
    (one per recipe asked for)."""
    data = json.loads(out)
    if isinstance(data, list):
        assert len(data) == 1, out
        data = data[0]
    assert isinstance(data, dict), out
    return data
