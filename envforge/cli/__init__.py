"""The ``envforge`` command: a thin layer of click over the pipeline modules.

This is the only place that turns an :class:`EnvforgeError` into an exit code and a
one-line message; ``--debug`` shows the traceback as well.

One module per command or command group, each parsing options and calling one library
function: :mod:`.recipes` (list, show, validate, render), :mod:`.probe`, :mod:`.build`,
:mod:`.images` (certify, publish, verify), :mod:`.shell` and :mod:`.host` (detect,
doctor, lock); shared options in :mod:`.common`, progress displays in :mod:`.display`.
Light commands never import the docker SDK: the commands that talk to the engine import
it when they run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from envforge import __version__
from envforge.cli import build as build_cmd
from envforge.cli import host as host_cmd
from envforge.cli import images as images_cmd
from envforge.cli import probe as probe_cmd
from envforge.cli import recipes
from envforge.cli import shell as shell_cmd
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
build_cmd.register(cli)
images_cmd.register(cli)
shell_cmd.register(cli)
host_cmd.register(cli)


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
    return int(ExitCode.OK)
