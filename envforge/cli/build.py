"""``envforge build``: a recipe -> a certified environment on the backend chosen
(``BACKENDS[name]``: an image with docker, a virtualenv with venv).

Progress and build output go to stderr; results (the certified tag or venv path,
``--json`` data) go to stdout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from envforge.backends import BACKENDS, Options, default_backend, pick
from envforge.backends.base import ProbeFailed, refuse_foreign
from envforge.cli.attest import attest_option, attest_result, check_attest
from envforge.cli.backend_options import (
    backend_extra,
    backend_flags,
    backend_option,
    settled_backend,
    settled_extra,
    settled_mirrors,
    with_base_mirror,
)
from envforge.cli.common import (
    ca_bundle_option,
    echo_json,
    effective_settings,
    gpu_option,
    index_mirror_option,
    json_option,
    level_option,
    load_project_option,
    note,
    project_option,
    recipe_ref_for,
    report_option,
    say,
    set_option,
    signing_key_option,
    step_timeout_option,
    strict_option,
    summary_option,
    term_as_interrupt,
    wheelhouse_option,
)
from envforge.cli.display import ProbeProgress
from envforge.cli.heartbeat import Heartbeat, build_display, build_output
from envforge.cli.running import (
    gpu_check_options,
    gpu_checks,
    load_with_gpus,
    require_free_option,
)
from envforge.core.fsutil import REPORT_FILES, check_folder_target
from envforge.evidence.summary import summarizing
from envforge.recipe.model import Level

#: The settings build reads (flag > environment > project > the user's file).
KEYS_USED = (
    "backend",
    "wheelhouse",
    "ca_bundle",
    "signing_key",
    "index_mirror",
    "base_image_mirror",
)


@click.command()
@click.argument("recipe_ref", metavar="[RECIPE|auto]", required=False)
@wheelhouse_option(
    "Folder of .whl files pip may install from (air-gapped sites, local torch wheels)."
)
@ca_bundle_option("PEM bundle pip inside the build trusts (TLS-intercepting proxies).")
@index_mirror_option
@level_option("Probe level (default: the recipe's).")
@step_timeout_option("Seconds per probe step (default: the recipe's).")
@require_free_option
@gpu_check_options
@report_option("Write probe.json, probe.junit.xml and certificate.json here.")
@backend_option("Build an image (docker, the default) or a virtualenv on this host (venv).")
@backend_flags("build")
@signing_key_option
@attest_option
@summary_option
@gpu_option
@set_option
@strict_option
@project_option
@json_option
def build(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    index_mirror: str | None,
    level: Level | None,
    step_timeout: float | None,
    require_free: float | None,
    health: bool | None,
    require_healthy: bool,
    collective: bool | None,
    report_dir: Path | None,
    backend: str | None,
    signing_key: Path | None,
    attest_file: Path | None,
    summary_file: Path | None,
    gpu: str | None,
    overrides: tuple[str, ...],
    project_dir: Path | None,
    extras: tuple[str, ...],
    as_json: bool,
    **flags: Any,
) -> None:
    """Build a recipe's image, certify it in a container on this host's GPU, then tag it.

    The image is tagged envforge/RECIPE:STACK (e.g. envforge/gfx1010:torch1.13.1-rocm5.2-py3.10)
    only when the probe passed; a failed probe exits 1 and tags nothing. With --project DIR:
    the project's own environment (its requirements on the stack, its checks certified;
    venv: the project installed editable; docker: an image of its own, tagged
    envforge/PROJECT-XXXXXXXX:RECIPE-STACK); RECIPE defaults to the project's.
    """
    if report_dir is not None:  # before any work: a file in the way is exit 2, one line
        check_folder_target(report_dir, setting="--report", files=REPORT_FILES)
    project = load_project_option(project_dir, extras)
    # flag > environment > the project's [tool.envforge] > the user's file (envforge config)
    settings = effective_settings(
        {
            "backend": backend,
            "wheelhouse": wheelhouse,
            "ca_bundle": ca_bundle,
            "signing_key": signing_key,
            "index_mirror": index_mirror,
            "base_image_mirror": flags.get("base_image_mirror"),
        },
        project,
        KEYS_USED,
    )
    backend = settled_backend(settings)
    index_mirror, base_mirror = settled_mirrors(settings)
    signing_key = settings.path("signing_key")
    check_attest(attest_file, signing_key)
    recipe_ref = recipe_ref_for(recipe_ref, project)
    with summarizing(summary_file, f"envforge build {recipe_ref}") as notes:
        # --platform (docker) or this host's: the table's row for it must accept the recipe
        # (a Jetson arch, ROCm on arm64 or an arch the platform's wheels lack: exit 2)
        platform = flags.get("platform")
        recipe, _choice, gpus = load_with_gpus(
            recipe_ref, gpu, overrides, platform=str(platform) if platform else None
        )
        if project is not None:  # the first backend that builds projects
            backend = pick(recipe, backend, say=say, options=Options(project=project))
        backend = backend or default_backend()
        extra = backend_extra("build", flags)
        refuse_foreign(BACKENDS, backend, "build", extra)
        extra = settled_extra(backend, "build", extra, project, ("base_image",))
        extra = with_base_mirror(backend, extra, base_mirror)
        checks = gpu_checks(health, require_healthy, collective, recipe, gpus)
        display = build_display()  # its ticker runs until build_output below ends it
        options = Options(
            level=level,
            step_timeout=step_timeout,
            require_free=require_free,
            gpu_checks=checks,
            report_dir=report_dir,
            wheelhouse=settings.path("wheelhouse"),
            ca_bundle=settings.path("ca_bundle"),
            index_mirror=index_mirror,
            signing_key=signing_key,
            gpus=gpus,
            listener=ProbeProgress(table=False),
            say=_stepping(say, display),
            note=_stepping(note, display),
            output=display,
            extra=extra,
            project=project,
        )
        try:
            # a SIGTERM'd build leaves nothing aside, nothing running; on a log, a failed
            # build's tail is shown and its full log kept (envforge.cli.heartbeat)
            with term_as_interrupt(), build_output(display):
                result = BACKENDS[backend].build(recipe, options)
        except ProbeFailed as exc:
            notes.add(exc.report, [("backend", backend)])
            raise
        if as_json:
            echo_json(result.to_dict())
        notes.add(result.report, result.facts())
        attest_result(result, recipe, signing_key, attest_file)
        failure = result.failure()
        if failure is not None:
            raise failure
        if not as_json:
            closing = result.closing()
            if closing is not None:
                say(closing)
            click.echo(result.printed())


def _stepping(said: Callable[[str], None], display: object) -> Callable[[str], None]:
    """``said``, and on a log each line also names the step the next heartbeat shows."""
    if not isinstance(display, Heartbeat):
        return said

    def both(text: str) -> None:
        said(text)
        display.step(text)

    return both
