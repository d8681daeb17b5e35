"""``envforge shell``: run a command in a recipe's certified image or virtualenv."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envforge.cli.common import (
    backend_option,
    ca_bundle_option,
    gpu_environ,
    gpu_option,
    load_checked,
    load_with_gpus,
    note,
    python_option,
    say,
    shm_size_option,
    wheelhouse_option,
)
from envforge.errors import InvalidInput


# Options may follow RECIPE (`envforge shell auto --fallback cpu -- CMD`); `--` ends them.
@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.argument("recipe_ref", metavar="RECIPE|auto")
@click.option("--image", metavar="REF", help="Run this image instead of the certified one.")
@backend_option(
    "Where to run. Default: docker when an engine answers and has the certified image, "
    "else venv."
)
@click.option(
    "--fallback",
    metavar="RECIPE",
    help="Quick-probe the recipe's GPU first; when it fails (hang, crash, no device) run "
    "in this recipe instead (e.g. --fallback cpu).",
)
@python_option("venv backend: the interpreter to use (must be the recipe's Python version).")
@wheelhouse_option("venv backend, when the venv must be built: install torch from these wheels.")
@ca_bundle_option("venv backend, when the venv must be built: PEM bundle uv trusts.")
@shm_size_option
@gpu_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD...")
def shell(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str,
    image: str | None,
    backend: str | None,
    ca_bundle: Path | None,
    wheelhouse: Path | None,
    fallback: str | None,
    python: str | None,
    shm_size: str | None,
    gpu: str | None,
    command: tuple[str, ...],
) -> None:
    """Run CMD (default: bash) in the recipe's certified image with GPUs, env and caches.

    The current directory is mounted at /workspace; MIOpen, torch and Triton caches live in
    named volumes; the command runs as you; its exit code is passed through. Signals sent
    to envforge (SIGTERM, SIGINT, ...) are passed on to the command (128+N when it dies of
    one); a command that is not found is exit 127, one that cannot be executed 126.
    """
    from envforge import backends  # noqa: PLC0415 - keeps the SDK out of light commands
    from envforge.cli.display import ProbeProgress  # noqa: PLC0415 - keeps --help light

    recipe, _choice, pick = load_with_gpus(recipe_ref, gpu)
    spare = load_checked(fallback) if fallback else None
    chosen = backends.pick(recipe, backend or ("docker" if image else None), say=say)
    listener = ProbeProgress(table=False)
    if chosen == "venv":
        if image is not None:
            raise InvalidInput("--image is for --backend docker", hint="drop --image")
        if shm_size is not None:
            raise InvalidInput("--shm-size is for --backend docker", hint="drop --shm-size")
        code = backends.shell(
            backends.venv,
            recipe,
            command,
            backends.venv.VenvOptions(
                python=python,
                wheelhouse=wheelhouse,
                ca_bundle=ca_bundle,
                listener=listener,
                say=say,
                environ=gpu_environ(pick),
            ),
            fallback=spare,
            say=say,
        )
    else:
        if python is not None or wheelhouse is not None or ca_bundle is not None:
            raise InvalidInput(
                "--python, --wheelhouse and --ca-bundle are for --backend venv in shell",
                hint="envforge build RECIPE --wheelhouse DIR builds the image",
            )
        code = backends.shell(
            backends.docker,
            recipe,
            command,
            backends.docker.DockerOptions(
                image=image, shm_size=shm_size, listener=listener, say=note, gpus=pick
            ),
            fallback=spare,
            say=say,
        )
    if code != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(code)
