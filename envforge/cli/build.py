"""``envforge build``: a recipe -> a certified image (docker) or virtualenv (venv).

Progress and build output go to stderr; results (the certified tag or venv path,
``--json`` data) go to stdout.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envforge.cli.common import (
    SummaryNotes,
    backend_option,
    ca_bundle_option,
    echo_json,
    gpu_environ,
    gpu_option,
    json_option,
    level_option,
    load_signer,
    load_with_gpus,
    note,
    python_option,
    report_option,
    say,
    set_option,
    shm_size_option,
    signing_key_option,
    step_timeout_option,
    strict_option,
    summarizing,
    summary_option,
    term_as_interrupt,
    wheelhouse_option,
)
from envforge.errors import CertificationFailed, EnvforgeError, InvalidInput
from envforge.fsutil import REPORT_FILES, check_folder_target, write_atomically
from envforge.recipe.model import Level, Recipe

if TYPE_CHECKING:
    from envforge.backends.docker import Certified
    from envforge.probe.report import ProbeReport


@click.command()
@click.argument("recipe_ref", metavar="RECIPE|auto")
@click.option("--tag", "tags", multiple=True, metavar="REF", help="Also tag the certified image.")
@click.option("--base-image", metavar="REF", help="Build FROM this image instead of the recipe's.")
@wheelhouse_option(
    "Folder of .whl files pip may install from (air-gapped sites, local torch wheels)."
)
@ca_bundle_option("PEM bundle pip inside the build trusts (TLS-intercepting proxies).")
@click.option("--no-certify", is_flag=True, help="Build only; no probe, no certified tag.")
@click.option("--no-cache", is_flag=True, help="Do not reuse cached layers.")
@click.option(
    "--builder",
    type=click.Choice(["auto", "buildkit", "classic"]),
    default=None,
    help="Image builder (default: ENVFORGE_BUILDER, else auto: BuildKit when available).",
)
@level_option("Probe level (default: the recipe's).")
@step_timeout_option("Seconds per probe step (default: the recipe's).")
@report_option("Write probe.json, probe.junit.xml and certificate.json here.")
@backend_option(
    "Build an image (docker) or a virtualenv on this host (venv).", default="docker"
)
@python_option("venv backend: the interpreter to use (must be the recipe's Python version).")
@shm_size_option
@signing_key_option
@summary_option
@gpu_option
@set_option
@strict_option
@json_option
def build(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str,
    tags: tuple[str, ...],
    base_image: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    no_certify: bool,
    no_cache: bool,
    builder: str | None,
    level: Level | None,
    step_timeout: float | None,
    report_dir: Path | None,
    backend: str,
    python: str | None,
    shm_size: str | None,
    signing_key: Path | None,
    summary_file: Path | None,
    gpu: str | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build a recipe's image, certify it in a container on this host's GPU, then tag it.

    The image is tagged envforge/RECIPE:STACK (e.g. envforge/gfx1010:torch1.13.1-rocm5.2-py3.10)
    only when the probe passed; a failed probe exits 1 and tags nothing.
    """
    if report_dir is not None:  # before any work: a file in the way is exit 2, one line
        check_folder_target(report_dir, setting="--report", files=REPORT_FILES)
    with summarizing(summary_file, f"envforge build {recipe_ref}") as notes:
        _build(
            recipe_ref, tags, base_image, wheelhouse, ca_bundle, no_certify, no_cache, level,
            step_timeout, report_dir, backend, python, shm_size, signing_key, overrides, as_json,
            notes, builder, gpu,
        )


def _build(  # noqa: PLR0917 - the command's options, passed on
    recipe_ref: str,
    tags: tuple[str, ...],
    base_image: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    no_certify: bool,
    no_cache: bool,
    level: Level | None,
    step_timeout: float | None,
    report_dir: Path | None,
    backend: str,
    python: str | None,
    shm_size: str | None,
    signing_key: Path | None,
    overrides: tuple[str, ...],
    as_json: bool,
    notes: SummaryNotes,
    builder: str | None = None,
    gpu: str | None = None,
) -> None:
    recipe, _choice, pick = load_with_gpus(recipe_ref, gpu, overrides)
    if backend == "venv":
        docker_only = [
            flag
            for flag, given in (
                ("--tag", tags),
                ("--base-image", base_image),
                ("--no-certify", no_certify),
                ("--no-cache", no_cache),
                ("--shm-size", shm_size),
                ("--builder", builder),
            )
            if given
        ]
        if docker_only:
            raise InvalidInput(
                f"{', '.join(docker_only)}: only for --backend docker",
                hint="drop them; venv builds are always certified",
            )
        if signing_key is not None:
            say("venv certifications are not signed (--signing-key signs Docker images)")
        _build_venv(
            recipe,
            python=python,
            wheelhouse=wheelhouse,
            ca_bundle=ca_bundle,
            level=level,
            step_timeout=step_timeout,
            report_dir=report_dir,
            as_json=as_json,
            notes=notes,
            environ=gpu_environ(pick),
        )
        return
    if python is not None:
        raise InvalidInput("--python is for --backend venv", hint="drop --python")
    signer = None if no_certify else load_signer(signing_key)
    from envforge.backends import docker  # noqa: PLC0415 - keeps the SDK out of light commands
    from envforge.cli.display import BuildDisplay, ProbeProgress  # noqa: PLC0415 - --help light
    from envforge.container.refs import certified_ref  # noqa: PLC0415 - as above

    result = docker.build(
        recipe,
        docker.DockerOptions(
            wheelhouse=wheelhouse,
            ca_bundle=ca_bundle,
            level=level,
            step_timeout=step_timeout,
            tags=tags,
            base_image=base_image,
            no_cache=no_cache,
            builder=builder,
            certify=not no_certify,
            report_dir=report_dir,
            shm_size=shm_size,
            listener=ProbeProgress(table=False),
            output=BuildDisplay(),
            say=note,
            signer=signer,
            gpus=pick,
        ),
    )
    if as_json:
        echo_json(result.to_dict())
    certified = certified_ref(recipe.name, recipe.stack_tag)
    if result.certification is None:
        notes.add(None, [("image", result.image_id), ("certified", "no (--no-certify)")])
        if not as_json:
            click.echo(result.image_id)
            note(f"not certified (--no-certify): {certified} left as it was")
        return
    notes.add(result.certification.outcome.report, certificate_facts(result.certification))
    if not result.certified:
        raise result.certification.failure()
    if not as_json:
        click.echo(certified)


def _build_venv(
    recipe: Recipe,
    *,
    python: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    level: Level | None,
    step_timeout: float | None,
    report_dir: Path | None,
    as_json: bool,
    notes: SummaryNotes,
    environ: Mapping[str, str] | None = None,
) -> None:
    from envforge.backends import venv  # noqa: PLC0415 - only for --backend venv
    from envforge.cli.display import ProbeProgress  # noqa: PLC0415 - keeps --help light

    options = venv.VenvOptions(
        python=python,
        wheelhouse=wheelhouse,
        ca_bundle=ca_bundle,
        level=level,
        step_timeout=step_timeout,
        listener=ProbeProgress(table=False),
        say=say,
        environ=environ,
    )
    markers = venv.venv_location(recipe, environ) / venv.MARKER_DIR
    try:
        with term_as_interrupt():  # a SIGTERM'd build leaves nothing aside, nothing running
            result = venv.build(recipe, options)
    except CertificationFailed:
        notes.add(_venv_report(markers / "probe.json"), [("backend", "venv")])
        raise
    finally:
        if report_dir is not None:
            for name in ("probe.json", "probe.junit.xml", "certified.json"):
                if (markers / name).is_file():
                    write_atomically(report_dir / name, (markers / name).read_bytes())
    notes.add(
        result.report or _venv_report(markers / "probe.json"),
        [("backend", "venv"), ("status", result.status)],
    )
    if as_json:
        echo_json(result.to_dict())
        return
    if result.status == "up-to-date":
        say(f"{recipe.name}: up to date ({result.path})")
    else:
        say(f"{recipe.name}: certified ({result.status} in {result.seconds:.1f}s)")
    click.echo(str(result.path))


def _venv_report(path: Path) -> ProbeReport | None:
    from envforge.probe.report import ProbeReport  # noqa: PLC0415 - only for summaries

    try:
        return ProbeReport.from_json(path.read_text(encoding="utf-8"))
    except (OSError, EnvforgeError):
        return None


def certificate_facts(certified: Certified) -> list[tuple[str, str]]:
    """The certificate rows of a summary (digest, signer, the certified tag)."""
    cert = certified.outcome.certificate
    tags = certified.to_dict()["tags"]
    return [
        ("certificate", cert.digest),
        ("signed by", cert.signed_by or "unsigned"),
        ("certified image", ", ".join(tags) if tags else "not tagged"),
    ]
