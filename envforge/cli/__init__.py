"""The ``envforge`` command: a thin layer of click over the pipeline modules.

This is the only place that turns an :class:`EnvforgeError` into an exit code and a
one-line message; ``--debug`` shows the traceback as well.

One module per command or command group, each parsing options and calling one library
function: :mod:`.listing` (list), :mod:`.recipes` (show, validate, render), :mod:`.probe`,
:mod:`.build`, :mod:`.images` (certify, publish, verify), :mod:`.shell`, :mod:`.host`
(detect, doctor, lock), :mod:`.keys` (keys generate) and :mod:`.evidence` (evidence import,
export); shared options in :mod:`.common`, progress displays in :mod:`.display`.
Commands are loaded by name when they run (click's lazy subcommand loading, see
:data:`COMMANDS`): ``envforge list`` imports only :mod:`.listing`. Light commands never
import the docker SDK: the commands that talk to the engine import it when they run.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from envforge.cli.common import strict_option, term_as_interrupt
from envforge.core.lazy import import_module, imports_hold_ctrl_c
from envforge.errors import EnvforgeError, ExitCode
from envforge.version import __version__

#: Every command: its name -> ``module:attribute`` of its click command.
COMMANDS: Mapping[str, str] = {
    "list": "envforge.cli.listing:list_cmd",
    "show": "envforge.cli.recipes:show",
    "validate": "envforge.cli.recipes:validate",
    "render": "envforge.cli.recipes:render",
    "probe": "envforge.cli.probe:probe",
    "build": "envforge.cli.build:build",
    "certify": "envforge.cli.images:certify",
    "publish": "envforge.cli.images:publish_cmd",
    "verify": "envforge.cli.registry:verify_cmd",
    "pull": "envforge.cli.registry:pull_cmd",
    "shell": "envforge.cli.shell:shell",
    "detect": "envforge.cli.host:detect_cmd",
    "doctor": "envforge.cli.doctor:doctor_cmd",
    "lock": "envforge.cli.lock:lock_cmd",
    "knowledge": "envforge.cli.knowledge:knowledge",
    "matrix": "envforge.cli.matrix:matrix",
    "solve": "envforge.cli.solve:solve_cmd",
    "keys": "envforge.cli.keys:keys",
    "evidence": "envforge.cli.evidence:evidence",
    "init": "envforge.cli.project:init_cmd",
    "fleet": "envforge.cli.fleet:fleet",
    "audit": "envforge.cli.audit:audit",
    "attest": "envforge.cli.attest:attest",
    "du": "envforge.cli.disk:du_cmd",
    "gc": "envforge.cli.disk:gc_cmd",
    "config": "envforge.cli.config:config",
}


#: Every command's summary for ``envforge --help``: the first paragraph of its help, so
#: that the overview imports no command module (tests/unit/house/test_light_imports.py checks
#: that each one matches its command's help).
SUMMARIES: Mapping[str, str] = {
    "list": "List the recipes in the catalogue (shipped and ENVFORGE_RECIPE_PATH).",
    "show": "Show a recipe's stack, why each pin and env var is there, and how sure we are.",
    "validate": "Check recipes against the schema and the compatibility table (default: all).",
    "render": "Render a recipe's Dockerfile (or venv plan); --all -o DIR renders the catalogue.",
    "probe": (
        "Probe an environment step by step, each step under a deadline in an isolated process."
    ),
    "build": "Build a recipe's image, certify it in a container on this host's GPU, then tag it.",
    "certify": (
        "Re-certify existing images on this host (a recipe name means envforge/RECIPE:STACK)."
    ),
    "publish": (
        "Push the recipe's certified image (refused, exit 5, without a passing certificate)."
    ),
    "verify": "Check that REF's certificate passed and matches its content (exit 0/1).",
    "pull": "Pull a certified image, verify it, and tag it as its recipe's certified image.",
    "shell": "Run CMD (default: bash) in the recipe's certified image with GPUs, env and caches.",
    "detect": "Report this host's GPUs (vendor, product, arch, driver, device nodes) and `auto`.",
    "doctor": "Check this host for a recipe (default: auto); print each finding with its fix.",
    "lock": "Resolve a recipe's full requirement set, with hashes, into <recipe>.lock.txt.",
    "knowledge": ("The compatibility table: show it (with overlays), compare it with the indexes."),
    "matrix": "Write the certified-on matrix (GPU arch x recipe) as a static site.",
    "solve": "Derive the stack for a GPU arch (or the detected one) from the compatibility table.",
    "keys": "Signing keys for certificates (ed25519; formats: envforge.publish.signing).",
    "init": 'Write [tool.envforge] (or envforge.toml) with recipe "auto" and a smoke check.',
    "evidence": "Certification evidence: import reports and registry images, export bundles.",
    "fleet": "Certify recipes on a fleet's nodes: Slurm arrays, Kubernetes Jobs, Actions matrix.",
    "audit": "Check an environment: GPU code, duplicate libraries, extensions, companions.",
    "attest": ("Signed in-toto attestations of certifications: check them (signature, subject)."),
    "du": "Show what envforge keeps on disk: venvs, caches and evidence, with what reclaims it.",
    "gc": "Remove venvs no project or recipe uses: superseded builds, projects gone.",
    "config": "Show each setting's value and where it came from (flag, env, project, user file).",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when used; ``--help`` imports none of them
    (it shows :data:`SUMMARIES`)."""

    def __init__(
        self,
        *args: Any,
        lazy: Mapping[str, str],
        summaries: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)
        self.summaries = dict(summaries or {})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, with a summary standing in for a command not yet loaded."""
        commands: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            summary = self.summaries.get(name) if name in self.lazy else None
            cmd = click.Command(name, help=summary) if summary else self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                commands.append((name, cmd))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section("Commands"):
                formatter.write_dl(
                    [(name, cmd.get_short_help_str(limit)) for name, cmd in commands]
                )

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, attribute = self.lazy[cmd_name].split(":")
        command = getattr(import_module(module), attribute)  # Ctrl-C held back meanwhile
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
        return command


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    summaries=SUMMARIES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="envforge")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@strict_option
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Known-good GPU PyTorch stacks: render, build, probe, certify, publish."""
    ctx.obj = {"debug": debug}


def _print_traceback(debug: bool) -> None:
    """Print the exception being handled, under ``--debug`` only."""
    if debug:
        import traceback  # noqa: PLC0415 - only for --debug, keeps start-up light

        traceback.print_exc()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (documented in docs/guarantees.md, "Exit codes")."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        # SIGTERM and SIGHUP end every command like Ctrl-C; a command's deferred imports
        # hold Ctrl-C back until they are done (envforge.core.lazy)
        with term_as_interrupt(), imports_hold_ctrl_c():
            # Outside standalone mode click returns what ``ctx.exit(N)`` asked for instead
            # of raising: that N is the exit code (``fleet task`` ends with it).
            code = cli.main(args=args, prog_name="envforge", standalone_mode=False)
    except EnvforgeError as exc:
        _print_traceback(debug)
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
        from envforge.core.fsutil import os_error  # noqa: PLC0415 - only on this rare path

        _print_traceback(debug)
        error = os_error(exc, verb="use")
        click.echo(f"envforge: error: {error.one_line()}", err=True)
        return int(error.exit_code)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return int(ExitCode.OK)
