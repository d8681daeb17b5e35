"""The ``envforge`` command: a thin layer of click over the pipeline modules.

This is the only place that turns an :class:`EnvforgeError` into an exit code and a
one-line message; ``--debug`` shows the traceback as well.

One module per command or command group, each parsing options and calling one library
function: :mod:`.recipes` (list, show, validate, render), :mod:`.probe`, :mod:`.build`,
:mod:`.images` (certify, publish, verify), :mod:`.shell`, :mod:`.host` (detect,
doctor, lock), :mod:`.keys` (keys generate) and :mod:`.evidence` (evidence import,
export); shared options in :mod:`.common`, progress displays in :mod:`.display`.
Commands are loaded by name when they run (click's lazy subcommand loading, see
:data:`COMMANDS`): ``envforge list`` imports only :mod:`.recipes`. Light commands never
import the docker SDK: the commands that talk to the engine import it when they run.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from envforge import __version__
from envforge.errors import EnvforgeError, ExitCode

#: Every command: its name -> ``module:attribute`` of its click command.
COMMANDS: Mapping[str, str] = {
    "list": "envforge.cli.recipes:list_cmd",
    "show": "envforge.cli.recipes:show",
    "validate": "envforge.cli.recipes:validate",
    "render": "envforge.cli.recipes:render",
    "probe": "envforge.cli.probe:probe",
    "build": "envforge.cli.build:build",
    "certify": "envforge.cli.images:certify",
    "publish": "envforge.cli.images:publish_cmd",
    "verify": "envforge.cli.images:verify_cmd",
    "shell": "envforge.cli.shell:shell",
    "detect": "envforge.cli.host:detect_cmd",
    "doctor": "envforge.cli.host:doctor_cmd",
    "lock": "envforge.cli.host:lock_cmd",
    "knowledge": "envforge.cli.knowledge:knowledge",
    "matrix": "envforge.cli.matrix:matrix",
    "keys": "envforge.cli.keys:keys",
    "evidence": "envforge.cli.evidence:evidence",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when used (``--help`` imports them all)."""

    def __init__(self, *args: Any, lazy: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, attribute = self.lazy[cmd_name].split(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
        return command


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="envforge")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Known-good GPU PyTorch stacks: render, build, probe, certify, publish."""
    ctx.obj = {"debug": debug}



def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (documented in README.md, "Exit codes")."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="envforge", standalone_mode=False)
    except EnvforgeError as exc:
        if debug:
            import traceback  # noqa: PLC0415 - only for --debug, keeps start-up light

            traceback.print_exc()
        click.echo(f"envforge: error: {exc.one_line()}", err=True)
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("envforge: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("envforge: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.INVALID_INPUT)
    except OSError as exc:  # a file system error no write site mapped: still one line
        from envforge.fsutil import os_error  # noqa: PLC0415 - only on this rare path

        if debug:
            traceback.print_exc()
        error = os_error(exc, verb="use")
        click.echo(f"envforge: error: {error.one_line()}", err=True)
        return int(error.exit_code)
    return int(ExitCode.OK)
