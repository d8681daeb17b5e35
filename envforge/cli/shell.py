"""``envforge shell``: run a command in a recipe's certified image or virtualenv."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge import backends
from envforge.backends.base import implied, refuse_foreign
from envforge.cli.backend_options import (
    backend_extra,
    backend_flags,
    backend_option,
    settled_backend,
    settled_extra,
    settled_mirrors,
)
from envforge.cli.common import (
    effective_settings,
    gpu_option,
    load_checked,
    load_project_option,
    note,
    project_option,
    say,
    trust_option,
)
from envforge.cli.display import ProbeProgress
from envforge.cli.running import load_with_gpus
from envforge.container.devices import GpuPick
from envforge.core import paths
from envforge.core.lazy import LazyModule
from envforge.host.detect import detect
from envforge.publish.signing import load_trust, trust_paths

if TYPE_CHECKING:
    from envforge.publish.admission import Gate

#: The admission check (attestations, DSSE): loaded only where keys are trusted.
_admission = LazyModule("envforge.publish.admission")


# Options may follow RECIPE (`envforge shell auto --fallback cpu -- CMD`); `--` ends them.
@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.argument("recipe_ref", metavar="RECIPE|auto")
@backend_option(
    "Where to run. Default: docker when an engine answers and has the certified image, else venv."
)
@click.option(
    "--fallback",
    metavar="RECIPE",
    help="Quick-probe the recipe's GPU first; when it fails (hang, crash, no device) run "
    "in this recipe instead (e.g. --fallback cpu).",
)
@backend_flags("shell")
@trust_option(
    "Run only an environment with a passing attestation for this host's arch signed by a "
    "key in this file (repeatable; default: $ENVFORGE_TRUSTED_KEYS)."
)
@gpu_option
@project_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD...")
def shell(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str,
    backend: str | None,
    fallback: str | None,
    trust: tuple[Path, ...],
    gpu: str | None,
    project_dir: Path | None,
    extras: tuple[str, ...],
    command: tuple[str, ...],
    **flags: Any,
) -> None:
    """Run CMD (default: bash) in the recipe's certified image with GPUs, env and caches.

    The current directory is mounted at /workspace; MIOpen, torch and Triton caches live in
    named volumes; the command runs as you; its exit code is passed through. Signals sent
    to envforge (SIGTERM, SIGINT, ...) are passed on to the command (128+N when it dies of
    one); a command that is not found is exit 127, one that cannot be executed 126.
    With --project DIR: the project's own environment, the project importable (venv: built
    first when there is none, or when its requirements changed; docker: its certified
    image, DIR mounted at /workspace).
    With trusted keys (--trust or ENVFORGE_TRUSTED_KEYS) the image's (or venv's) digest
    must have an attestation signed by one of them that records a pass on this host's
    arch (this host's own, or received by pull --trust); one line names it, or refuses.
    """
    project = load_project_option(project_dir, extras)
    recipe, _choice, gpus = load_with_gpus(recipe_ref, gpu)
    spare = load_checked(fallback) if fallback else None
    extra = backend_extra("shell", flags)
    # a backend's own flag (--image: docker) before the backend setting of a file
    settings = effective_settings(
        {"backend": backend or implied(backends.BACKENDS, "shell", extra)}, project, ("backend",)
    )
    requested = settled_backend(settings)
    chosen = backends.pick(recipe, requested, say=say, options=backends.Options(project=project))
    refuse_foreign(backends.BACKENDS, chosen, "shell", extra)
    extra = settled_extra(chosen, "shell", extra, project, ("wheelhouse", "ca_bundle"))
    mirror = effective_settings({}, project, ("index_mirror",))
    options = backends.Options(
        index_mirror=settled_mirrors(mirror)[0],
        gpus=gpus,
        listener=ProbeProgress(table=False),
        say=say,
        note=note,
        extra=extra,
        project=project,
        admit=_gate(trust, gpus),
    )
    code = backends.shell(
        backends.BACKENDS[chosen], recipe, command, options, fallback=spare, say=say
    )
    if code != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(code)


def _gate(trust: tuple[Path, ...], gpus: GpuPick | None) -> Gate | None:
    """The admission check with trusted keys (None without)."""
    files = trust_paths(trust)
    if not files:
        return None
    trusted = load_trust(files, setting="--trust" if trust else "ENVFORGE_TRUSTED_KEYS")
    archs = (gpus.arch,) if gpus is not None and gpus.arch else (g.arch for g in detect().gpus)
    gate: Gate = _admission.Gate(trusted, _admission.host_archs(archs), paths.state_dir(), say)
    return gate
