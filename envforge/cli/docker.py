"""``build``, ``certify``, ``publish``, ``verify`` and ``shell``: the Docker side of the CLI.

Progress and build output go to stderr; results (the certified tag, the pushed digest,
``--json`` data) go to stdout.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import click

from envforge.backends import docker as engine
from envforge.certify import CertificateStore, Outcome, certify_image
from envforge.cli import host as host_cli
from envforge.cli.common import echo_json, json_option, load_checked, set_option
from envforge.errors import CertificationFailed, EnvforgeError, InvalidInput, Unavailable
from envforge.probe.report import StepResult
from envforge.publish import certificate_of, publish, verify
from envforge.recipe.model import Level, Recipe
from envforge.render import RenderOptions, render_dockerfile

LEVEL_CHOICE = click.Choice(["quick", "full"])


def register(group: click.Group) -> None:
    for command in (build, certify, publish_cmd, verify_cmd, shell):
        group.add_command(command)


# --------------------------------------------------------------------------- displays


class BuildDisplay:
    """Build output for people (a TTY: step lines kept, other output on one status line)
    or for logs (every line as it comes)."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._status = False

    def __call__(self, line: str) -> None:
        if not self.tty:
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        width = shutil.get_terminal_size((100, 20)).columns
        elapsed = time.monotonic() - self.started
        if line.startswith("Step "):
            self._clear()
            self.stream.write(f"\x1b[1m[{elapsed:6.1f}s] {line[: width - 10]}\x1b[0m\n")
        else:
            text = " ".join(line.split())
            self.stream.write(f"\r\x1b[K\x1b[2m    {text[: width - 6]}\x1b[0m")
            self._status = True
        self.stream.flush()

    def _clear(self) -> None:
        if self._status:
            self.stream.write("\r\x1b[K")
            self._status = False

    def close(self) -> None:
        if self.tty:
            self._clear()
            self.stream.flush()


class StepPrinter:
    """The probe's progress, one line per step (a live line on a TTY while it runs)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()

    def step_started(self, step: str, deadline: float) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[K  {step:<24} running (deadline {deadline:g}s)")
            self.stream.flush()

    def step_finished(self, result: StepResult) -> None:
        prefix = "\r\x1b[K" if self.tty else ""
        detail = f"  {result.detail[:100]}" if result.status != "pass" and result.detail else ""
        self.stream.write(
            f"{prefix}  {result.name:<24} {result.status:<9} {result.seconds:7.2f}s{detail}\n"
        )
        self.stream.flush()


def _note(text: str) -> None:
    click.echo(text, err=True)


# --------------------------------------------------------------------------- build


@click.command()
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--tag", "tags", multiple=True, metavar="REF", help="Also tag the certified image.")
@click.option("--base-image", metavar="REF", help="Build FROM this image instead of the recipe's.")
@click.option(
    "--wheelhouse",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Folder of .whl files pip may install from (air-gapped sites, local torch wheels).",
)
@click.option(
    "--ca-bundle",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="PEM bundle pip inside the build trusts (TLS-intercepting proxies).",
)
@click.option("--no-certify", is_flag=True, help="Build only; no probe, no certified tag.")
@click.option("--no-cache", is_flag=True, help="Do not reuse cached layers.")
@click.option("--level", type=LEVEL_CHOICE, help="Probe level (default: the recipe's).")
@click.option("--step-timeout", type=float, help="Seconds per probe step (default: the recipe's).")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write probe.json, probe.junit.xml and certificate.json here.",
)
@click.option(
    "--backend",
    type=click.Choice(["docker", "venv"]),
    default="docker",
    show_default=True,
    help="Build an image (docker) or a virtualenv on this host (venv).",
)
@host_cli.python_option
@set_option
@json_option
def build(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str,
    tags: tuple[str, ...],
    base_image: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    no_certify: bool,
    no_cache: bool,
    level: str | None,
    step_timeout: float | None,
    report_dir: Path | None,
    backend: str,
    python: str | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build a recipe's image, certify it in a container on this host's GPU, then tag it.

    The image is tagged envforge/RECIPE:STACK (e.g. envforge/gfx1010:torch1.13.1-rocm5.2-py3.10)
    only when the probe passed; a failed probe exits 1 and tags nothing.
    """
    routed = host_cli.route_build(
        recipe_ref, backend, overrides=overrides, python=python, wheelhouse=wheelhouse,
        ca_bundle=ca_bundle, level=level, step_timeout=step_timeout, report_dir=report_dir,
        as_json=as_json, docker_only=host_cli.docker_only_flags(
            tag=tags, base_image=base_image, no_certify=no_certify, no_cache=no_cache),
    )
    if routed is None:
        return  # built by the venv backend
    recipe = load_checked(routed, overrides)
    reserved = [t for t in tags if t.startswith(engine.CERTIFIED_REPOSITORY_PREFIX + "/")]
    if no_certify and reserved:
        raise InvalidInput(
            f"--tag {reserved[0]}: envforge/ names certified images, and --no-certify "
            "certifies nothing",
            hint="choose another --tag, or drop --no-certify",
        )
    client = engine.connect()
    dockerfile = render_dockerfile(
        recipe,
        RenderOptions(
            base_image=base_image or recipe.base_image,
            wheelhouse=wheelhouse is not None,
            ca_bundle=ca_bundle is not None,
        ),
    )
    context = Path(tempfile.mkdtemp(prefix="envforge-build-"))
    display = BuildDisplay()
    try:
        engine.assemble_context(context, dockerfile, wheelhouse=wheelhouse, ca_bundle=ca_bundle)
        _note(f"building {recipe.name} ({recipe.stack_tag}) from {base_image or recipe.base_image}")
        result = engine.build_image(client, context, on_line=display, nocache=no_cache)
    finally:
        display.close()
        shutil.rmtree(context, ignore_errors=True)
    reused = sum(1 for s in result.steps if s.cached)
    _note(
        f"built {result.image_id[:19]} in {result.seconds:.1f}s "
        f"({reused} of {len(result.steps)} steps from cache)"
    )
    data: dict[str, Any] = {
        "recipe": recipe.name,
        "candidate": result.image_id,
        "build_seconds": round(result.seconds, 3),
        "steps_cached": reused,
        "steps_rebuilt": len(result.rebuilt),
        "steps": len(result.steps),
    }
    if no_certify:
        for tag in tags:
            engine.tag_image(client, result.image_id, tag)
        data.update({"certified": False, "tags": list(tags)})
        if as_json:
            echo_json(data)
        else:
            click.echo(result.image_id)
            certified = engine.certified_ref(recipe.name, recipe.stack_tag)
            _note(f"not certified (--no-certify): {certified} left as it was")
        return
    outcome = _certify_and_tag(
        client,
        recipe,
        result.image_id,
        level=_level(level),
        step_timeout=step_timeout,
        extra_tags=tags,
        report_dir=report_dir,
    )
    data.update(_outcome_data(outcome, recipe, tags))
    if as_json:
        echo_json(data)
    if not outcome.passed:
        raise _failed(outcome, recipe)
    if not as_json:
        click.echo(engine.certified_ref(recipe.name, recipe.stack_tag))


def _level(level: str | None) -> Level | None:
    if level == "quick":
        return "quick"
    if level == "full":
        return "full"
    return None


def _certify_and_tag(
    client: engine.Client,
    recipe: Recipe,
    image: str,
    *,
    level: Level | None,
    step_timeout: float | None,
    extra_tags: Sequence[str],
    report_dir: Path | None,
) -> Outcome:
    """Probe ``image``; on a pass, tag the labelled image as certified (and ``extra_tags``)."""
    ref = engine.certified_ref(recipe.name, recipe.stack_tag)
    _note(f"certifying {image[:19]} for {recipe.name} (no network, host devices)")
    outcome = certify_image(
        client, recipe, image, level=level, step_timeout=step_timeout, listener=StepPrinter()
    )
    if report_dir is not None:
        json_path, junit_path = outcome.report.write(report_dir)
        cert_path = report_dir / "certificate.json"
        from envforge.fsutil import write_atomically  # one mapping of write errors

        write_atomically(cert_path, outcome.certificate.to_json(compact=False) + "\n")
        _note(f"reports: {json_path}, {junit_path}, {cert_path}")
    _note(f"certificate {outcome.certificate.digest} ({outcome.certificate.status}) stored at "
          f"{outcome.stored_at}")
    if outcome.certified_image is not None:
        for tag in (ref, *extra_tags):
            engine.tag_image(client, outcome.certified_image, tag)
        _note(f"certified: {ref} -> {outcome.certified_image[:19]}")
    else:
        previous = engine.inspect_image(client, ref)
        if previous is not None and previous.id != image:
            _note(f"{ref} still names the previously certified image {previous.id[:19]}")
    return outcome


def _outcome_data(outcome: Outcome, recipe: Recipe, tags: Sequence[str]) -> dict[str, Any]:
    return {
        "certified": outcome.passed,
        "image": outcome.certified_image,
        "tags": [engine.certified_ref(recipe.name, recipe.stack_tag), *tags]
        if outcome.passed
        else [],
        "certificate": outcome.certificate.digest,
        "certificate_path": str(outcome.stored_at),
        "status": outcome.certificate.status,
        "failing_step": outcome.certificate.failing_step,
    }


def _failed(outcome: Outcome, recipe: Recipe) -> CertificationFailed:
    return CertificationFailed(
        f"certification of {recipe.name} failed at step {outcome.certificate.failing_step}; "
        f"{engine.certified_ref(recipe.name, recipe.stack_tag)} was not tagged",
        hint="see the step detail above; envforge doctor checks the host",
    )


# --------------------------------------------------------------------------- certify


def _looks_like_image(ref: str) -> bool:
    if Path(ref).is_file():
        return False
    return any(ch in ref for ch in ":/@") or ref.startswith("sha256")


def _recipe_for_image(info: engine.ImageInfo, ref: str, overrides: Sequence[str]) -> Recipe:
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


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="RECIPE|IMAGE...")
@click.option("--level", type=LEVEL_CHOICE, help="Probe level (default: the recipe's).")
@click.option("--step-timeout", type=float, help="Seconds per probe step (default: the recipe's).")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write probe.json, probe.junit.xml and certificate.json (per image: DIR/NAME/).",
)
@set_option
@json_option
def certify(  # noqa: PLR0917 - click passes options positionally by name
    refs: tuple[str, ...],
    level: str | None,
    step_timeout: float | None,
    report_dir: Path | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """Re-certify existing images on this host (a recipe name means envforge/RECIPE:STACK).

    Every verdict goes to the local certificate store; a pass relabels and retags the
    image. Exits 1 when any image fails.
    """
    client = engine.connect()
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    for ref in refs:
        if _looks_like_image(ref):
            info = engine.inspect_image(client, ref)
            if info is None:
                raise InvalidInput(f"no image {ref} on this engine")
            recipe = _recipe_for_image(info, ref, overrides)
            image_ref = ref
            # A tag given by name follows the new certificate; an ID or digest cannot.
            retag = [ref] if engine.split_ref(ref)[1] is not None else []
        else:
            recipe = load_checked(ref, overrides)
            image_ref = engine.certified_ref(recipe.name, recipe.stack_tag)
            if engine.inspect_image(client, image_ref) is None:
                raise InvalidInput(
                    f"no certified image {image_ref} on this engine",
                    hint=f"envforge build {recipe.name}",
                )
            retag = []
        sub = None
        if report_dir is not None:
            sub = report_dir if len(refs) == 1 else report_dir / _safe_name(ref)
        outcome = _certify_and_tag(
            client,
            recipe,
            image_ref,
            level=_level(level),
            step_timeout=step_timeout,
            extra_tags=retag,
            report_dir=sub,
        )
        row = {"ref": ref, "recipe": recipe.name, **_outcome_data(outcome, recipe, retag)}
        results.append(row)
        if not outcome.passed:
            failures.append(f"{ref}: {outcome.certificate.failing_step}")
    if as_json:
        echo_json(results)
    else:
        for row in results:
            verdict = "pass" if row["certified"] else "FAIL"
            click.echo(f"{verdict}  {row['ref']}  {row['certificate']}")
    if failures:
        raise CertificationFailed(
            f"{len(failures)} of {len(refs)} image(s) failed certification; first: {failures[0]}"
        )


def _safe_name(ref: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in ref)


# --------------------------------------------------------------------------- publish/verify


@click.command("publish")
@click.argument("recipe_ref", metavar="RECIPE")
@click.option(
    "--registry",
    required=True,
    metavar="HOST[:PORT][/NAMESPACE]",
    help="Push to REGISTRY/RECIPE:STACK.",
)
@set_option
@json_option
def publish_cmd(recipe_ref: str, registry: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Push the recipe's certified image (refused, exit 5, without a passing certificate)."""
    recipe = load_checked(recipe_ref, overrides)
    client = engine.connect()
    display = BuildDisplay()
    try:
        result = publish(client, recipe, registry, store=CertificateStore(), on_line=display)
    finally:
        display.close()
    if as_json:
        echo_json(
            {
                "ref": result.ref,
                "digest": result.digest,
                "pinned": result.pinned_ref,
                "certificate": result.certificate,
                "image": result.image_id,
            }
        )
        return
    _note(f"pushed {result.ref} (certificate {result.certificate})")
    click.echo(result.pinned_ref)


@click.command("verify")
@click.argument("ref", metavar="REF")
@click.option("--no-pull", is_flag=True, help="Verify the local image; do not pull.")
@json_option
def verify_cmd(ref: str, no_pull: bool, as_json: bool) -> None:
    """Pull REF and check that its certificate passed and matches its content (exit 0/1)."""
    client = engine.connect()
    result = verify(client, ref, pull=not no_pull)
    cert = result.certificate
    if as_json:
        echo_json(
            {
                "ref": ref,
                "ok": True,
                "image": result.image_id,
                "certificate": cert.digest,
                "recipe": cert.recipe_name,
                "stack": cert.stack_tag,
                "layers": len(cert.layers),
            }
        )
        return
    click.echo(
        f"ok  {ref}: certified ({cert.report.get('level', '?')} probe passed) for "
        f"{cert.recipe_name} {cert.stack_tag}; {len(cert.layers)} layers match "
        f"certificate {cert.digest[:19]}"
    )


# --------------------------------------------------------------------------- shell


# Options may follow RECIPE (`envforge shell auto --fallback cpu -- CMD`); `--` ends them.
@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True})
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--image", metavar="REF", help="Run this image instead of the certified one.")
@click.option(
    "--backend",
    type=click.Choice(["docker", "venv"]),
    default=None,
    help="Where to run. Default: docker when an engine answers and has the certified image, "
    "else venv.",
)
@host_cli.shell_venv_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD...")
def shell(  # noqa: PLR0917 - click passes options positionally by name
    recipe_ref: str,
    image: str | None,
    backend: str | None,
    ca_bundle: Path | None,
    wheelhouse: Path | None,
    fallback: str | None,
    python: str | None,
    command: tuple[str, ...],
) -> None:
    """Run CMD (default: bash) in the recipe's certified image with GPUs, env and caches.

    The current directory is mounted at /workspace; MIOpen, torch and Triton caches live in
    named volumes; the command runs as you; its exit code is passed through.
    """
    routed = host_cli.route_shell(
        recipe_ref, backend, image=image, fallback=fallback, python=python,
        wheelhouse=wheelhouse, ca_bundle=ca_bundle, command=command,
    )  # RECIPE may be auto; --backend venv runs here and exits
    recipe = load_checked(routed)
    client = engine.connect()
    certified = engine.certified_ref(recipe.name, recipe.stack_tag)
    ref = image or certified
    info = engine.inspect_image(client, ref)
    if info is None:
        if image is None:
            raise Unavailable(
                f"no certified image {certified} on this engine",
                hint=f"envforge build {recipe.name} (or pass --image REF)",
            )
        raise InvalidInput(f"no image {image} on this engine", hint="docker images")
    if image is not None:
        try:
            certificate_of(info, what=image)
        except EnvforgeError:
            _note(f"warning: {image} is not a certified image; running it as asked")
    code = engine.run_shell(
        client,
        image=info.id,
        command=list(command) or ["bash"],
        recipe_name=recipe.name,
        stack_tag=recipe.stack_tag,
        env=recipe.env_map,
        flags=engine.device_flags(recipe.gpu.vendor),
        cwd=Path(os.getcwd()),
    )
    if code != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(code)
