"""``certify``, ``publish`` and ``verify``: certified images on the engine and registries.

Progress goes to stderr; results (verdicts, the pushed digest, ``--json`` data) to stdout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.backends import BACKENDS, Options, default_backend, docker, pick
from envforge.backends.base import refuse_foreign
from envforge.backends.docker import engine as docker_engine
from envforge.backends.docker.images import inspect_image
from envforge.backends.docker.push import certificate_of, publish
from envforge.cli.attest import (
    attach_option,
    attach_published,
    attest_option,
    attest_result,
    check_attest,
)
from envforge.cli.backend_options import (
    backend_extra,
    backend_flags,
    backend_option,
    settled_backend,
)
from envforge.cli.common import (
    deadline_option,
    echo_json,
    effective_settings,
    gpu_option,
    json_option,
    level_option,
    load_checked,
    load_for_host,
    load_project_option,
    load_signer,
    note,
    project_option,
    report_option,
    say,
    set_option,
    signing_key_option,
    step_timeout_option,
    summary_option,
)
from envforge.cli.display import BuildDisplay, ProbeProgress
from envforge.cli.running import gpu_check_options, gpu_checks, pick_for, require_free_option
from envforge.core.fsutil import REPORT_FILES, check_folder_target
from envforge.errors import CertificationFailed, InvalidInput
from envforge.evidence.summary import summarizing
from envforge.publish.certificate import CertificateStore
from envforge.recipe.model import Level, Recipe

if TYPE_CHECKING:
    from envforge.container.refs import ImageInfo
    from envforge.project.model import Project


def _looks_like_image(ref: str) -> bool:
    if Path(ref).is_file():
        return False
    return any(ch in ref for ch in ":/@") or ref.startswith("sha256")


def _recipe_for_image(info: ImageInfo, ref: str, overrides: Sequence[str]) -> Recipe:
    name = None
    try:
        name = certificate_of(info, what=ref).recipe_name
    except CertificationFailed:
        for key in ("io.envforge.recipe", "io.envforge.recipe.name"):
            if info.labels.get(key):
                name = info.labels[key]
                break
    if not name:
        raise InvalidInput(
            f"image {ref} does not say which recipe it was built from",
            hint="certify it by recipe name (envforge certify RECIPE)",
        )
    return load_checked(name, overrides)


def _check_attach(refs: Sequence[str]) -> None:
    """``--attach`` attaches to a registry's digest: every ref must name a registry image."""
    for ref in refs:
        host = ref.split("/", 1)[0]
        if (
            not _looks_like_image(ref)
            or "/" not in ref
            or not (":" in host or "." in host or host == "localhost")
        ):
            raise InvalidInput(
                f"--attach {ref}: not an image in a registry (HOST[:PORT]/REPO:TAG or @sha256:…)",
                hint="name the pulled image by its registry reference",
            )


def _safe_name(ref: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in ref)


def _image_target(ref: str, overrides: Sequence[str]) -> tuple[Recipe, dict[str, Any]]:
    """An IMAGE ref: the recipe it was built from, and the image (retagged on a pass when
    named by tag) as backend options."""
    client = docker_engine.connect()
    try:
        info = inspect_image(client, ref)
    finally:
        client.close()
    if info is None:
        raise InvalidInput(f"no image {ref} on this engine")
    return _recipe_for_image(info, ref, overrides), {"image": ref, "retag": docker.retag_for(ref)}


def _project_backend(refs: Sequence[str], project: Project | None) -> str | None:
    """With a project and no --backend: the first backend that serves the project."""
    if project is None:
        return None

    return pick(load_checked(refs[0]), None, say=say, options=Options(project=project))


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="RECIPE|IMAGE...")
@level_option("Probe level (default: the recipe's).")
@step_timeout_option("Seconds per probe step (default: the recipe's).")
@require_free_option
@gpu_check_options
@report_option("Write probe.json, probe.junit.xml and certificate.json (per image: DIR/NAME/).")
@backend_option("Certify on this backend (default: docker; IMAGE refs: docker).")
@backend_flags("certify")
@signing_key_option
@attest_option
@attach_option
@summary_option
@gpu_option
@set_option
@project_option
@json_option
def certify(  # noqa: PLR0917 - click passes options positionally by name
    refs: tuple[str, ...],
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
    attach: bool,
    summary_file: Path | None,
    gpu: str | None,
    overrides: tuple[str, ...],
    project_dir: Path | None,
    extras: tuple[str, ...],
    as_json: bool,
    **flags: Any,
) -> None:
    """Re-certify existing images on this host (a recipe name means envforge/RECIPE:STACK).

    Every verdict goes to the local certificate store; a pass relabels and retags the
    image. Exits 1 when any image fails. With --project DIR: the project's environment
    of each recipe, its checks included.
    """
    if report_dir is not None:  # before any work: a file in the way is exit 2, one line
        check_folder_target(report_dir, setting="--report", files=REPORT_FILES)
    project = load_project_option(project_dir, extras)
    settings = effective_settings(
        {"backend": backend, "signing_key": signing_key}, project, ("backend", "signing_key")
    )
    signing_key = settings.path("signing_key")
    check_attest(attest_file, signing_key, attach)
    if attach:
        _check_attach(refs)
    backend = settled_backend(settings) or _project_backend(refs, project) or default_backend()
    chosen = BACKENDS[backend]
    extra = backend_extra("certify", flags)
    refuse_foreign(BACKENDS, backend, "certify", extra)
    with summarizing(summary_file, f"envforge certify {' '.join(refs)}") as notes:
        results: list[dict[str, Any]] = []
        failures: list[str] = []
        for ref in refs:
            target: dict[str, Any] = {}
            if _looks_like_image(ref):
                if "image" not in {o.key for o in chosen.cli_options()}:
                    raise InvalidInput(
                        f"{ref}: an image reference; --backend {backend} certifies recipes",
                        hint="name the recipe instead",
                    )
                recipe, target = _image_target(ref, overrides)
            else:
                recipe = load_checked(ref, overrides)
            sub = None
            if report_dir is not None:
                sub = report_dir if len(refs) == 1 else report_dir / _safe_name(ref)
            pick = pick_for(recipe, gpu)
            options = Options(
                level=level,
                step_timeout=step_timeout,
                require_free=require_free,
                gpu_checks=gpu_checks(health, require_healthy, collective, recipe, pick),
                report_dir=sub,
                signing_key=signing_key,
                gpus=pick,
                listener=ProbeProgress(table=False),
                say=say,
                note=note,
                extra={**extra, **target},
                project=project,
            )
            result = chosen.certify(recipe, options)
            notes.add(result.report, result.facts(), title=f"envforge certify {ref}")
            attest_result(
                result, recipe, signing_key, attest_file, attach_to=ref if attach else None
            )
            row = {"ref": ref, "recipe": recipe.name, **result.to_dict()}
            results.append(row)
            failure = result.failure()
            if failure is not None:
                failures.append(f"{ref}: {row.get('failing_step') or failure.message}")
        if as_json:
            echo_json(results)
        else:
            for row in results:
                verdict = "pass" if row["certified"] else "FAIL"
                click.echo(f"{verdict}  {row['ref']}  {row.get('certificate', row.get('path'))}")
        if failures:
            raise CertificationFailed(
                f"{len(failures)} of {len(refs)} image(s) failed certification; "
                f"first: {failures[0]}"
            )


@click.command("publish")
@click.argument("recipe_ref", metavar="RECIPE|auto")
@click.option(
    "--registry",
    default=None,
    metavar="HOST[:PORT][/NAMESPACE]",
    help="Push to REGISTRY/RECIPE:STACK (default: registry of envforge config).",
)
@click.option(
    "--require-signed",
    is_flag=True,
    help="Refuse (exit 5) unless the certificate is signed and its signature matches.",
)
@set_option
@deadline_option(
    "Seconds the push may go without progress reported by the engine (a registry that "
    "stopped answering): then exit 4, naming it."
)
@signing_key_option
@json_option
def publish_cmd(
    recipe_ref: str,
    registry: str | None,
    *,
    require_signed: bool,
    overrides: tuple[str, ...],
    deadline: float,
    signing_key: Path | None,
    as_json: bool,
) -> None:
    """Push the recipe's certified image (refused, exit 5, without a passing certificate).

    RECIPE may be `auto`: the recipe `build auto` picks for this host's GPU."""
    settings = effective_settings(
        {"registry": registry, "signing_key": signing_key}, None, ("registry", "signing_key")
    )
    registry = settings.text("registry")
    if registry is None:
        raise InvalidInput(
            "publish: no registry given",
            hint='add --registry HOST[/NAMESPACE], or registry = "HOST" in `envforge config path`',
        )
    recipe, _choice = load_for_host(recipe_ref, None, overrides)
    key = load_signer(settings.path("signing_key"))  # a bad key file: exit 2 before the push
    client = docker_engine.connect()
    display = BuildDisplay()
    try:
        result = publish(
            client,
            recipe,
            registry,
            store=CertificateStore(),
            on_line=display,
            require_signed=require_signed,
            stall=deadline,
        )
    finally:
        display.close()
    attached = attach_published(result.pinned_ref, result.image_id, key)
    if as_json:
        echo_json(
            {
                "ref": result.ref,
                "digest": result.digest,
                "pinned": result.pinned_ref,
                "certificate": result.certificate,
                "image": result.image_id,
                "signed_by": result.signed_by,
                "attestations": attached,
            }
        )
        return
    signed = f", signed by {result.signed_by[:23]}" if result.signed_by else ", unsigned"
    note(f"pushed {result.ref} (certificate {result.certificate}{signed})")
    click.echo(result.pinned_ref)
