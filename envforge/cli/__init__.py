"""The ``envforge`` command: a thin layer of click over the pipeline modules.

This is the only place that turns an :class:`EnvforgeError` into an exit code and a
one-line message; ``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

import click

from envforge import __version__
from envforge.cli import docker as docker_cmd
from envforge.cli import host as host_cmd
from envforge.cli import probe as probe_cmd
from envforge.cli import recipes
from envforge.errors import EnvforgeError, ExitCode


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envforge")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Known-good GPU PyTorch stacks: render, build, probe, certify, publish."""
    ctx.obj = {"debug": debug}


recipes.register(cli)
probe_cmd.register(cli)
docker_cmd.register(cli)
host_cmd.register(cli)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (documented in README.md, "Exit codes")."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="envforge", standalone_mode=False)
    except EnvforgeError as exc:
        if debug:
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
        from envforge.fsutil import os_error

        if debug:
            traceback.print_exc()
        error = os_error(exc, verb="use")
        click.echo(f"envforge: error: {error.one_line()}", err=True)
        return int(error.exit_code)
    return int(ExitCode.OK)
