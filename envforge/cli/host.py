"""``detect``, ``doctor`` and ``lock``: the host side of the CLI."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from envforge.choose import Choice, choose
from envforge.cli.common import echo_json, json_option, load_checked, set_option
from envforge.detect import HostInfo, detect
from envforge.doctor import Backend, DoctorReport, Finding, diagnose
from envforge.errors import EnvforgeError, InvalidInput, Unavailable
from envforge.recipe.model import Recipe


def register(group: click.Group) -> None:
    for command in (detect_cmd, doctor_cmd, lock_cmd):
        group.add_command(command)


def _root_option(func: Any) -> Any:
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("/"),
        show_default=True,
        help="Read sys/, proc/ and dev/ under ROOT (a fixture tree or a mounted host); "
        "tools such as rocminfo run only for /.",
    )(func)


def _choice_or_error(host: HostInfo) -> tuple[Choice | None, str | None]:
    try:
        return choose(host), None
    except EnvforgeError as exc:
        return None, exc.one_line()


@click.command("detect")
@_root_option
@json_option
def detect_cmd(root: Path, as_json: bool) -> None:
    """Report this host's GPUs (vendor, product, arch, driver, device nodes) and `auto`.

    Override variables for build machines without the GPU: ENVFORGE_GPU_ARCH (gfx1031,
    sm_90), ENVFORGE_GPU_VENDOR (amd, nvidia, none), ENVFORGE_GPU_COUNT,
    ENVFORGE_GPU_PRODUCT, ENVFORGE_DRIVER_VERSION.
    """
    host = detect(root=root)
    choice, problem = _choice_or_error(host)
    if as_json:
        data = host.to_dict()
        data["auto"] = choice.to_dict() if choice else None
        data["auto_error"] = problem
        echo_json(data)
        return
    out = click.echo
    if not host.gpus:
        out("no GPU detected")
    else:
        out(f"{host.count} GPU(s):")
        for g in host.gpus:
            out(
                f"  {g.index}  {g.vendor:<6} {g.product:<28} {g.arch or '?':<8} "
                f"driver {g.driver_version or '?'}  {' '.join(g.device_nodes)}  [{g.source}]"
            )
    out(
        f"kernel {host.kernel or '?'} ({host.machine});"
        f" sources: {', '.join(host.sources) or 'none'}"
    )
    for note in host.notes:
        out(f"note: {note}")
    if choice is not None:
        out(f"auto -> {choice.recipe}: {choice.reason}")
    else:
        out(f"auto -> no recipe: {problem}")


def load_for_host(
    ref: str, host: HostInfo, overrides: tuple[str, ...] = ()
) -> tuple[Recipe, Choice | None]:
    """``auto`` → the chosen recipe; anything else → that recipe. Both checked."""
    if ref != "auto":
        return load_checked(ref, overrides), None
    choice = choose(host)
    target = str(choice.path) if choice.path is not None else choice.recipe
    return load_checked(target, overrides), choice


def _print_report(report: DoctorReport, choice: Choice | None) -> None:
    out = click.echo
    title = report.recipe or "this host"
    if choice is not None:
        title += f" (auto: {choice.reason})"
    out(f"doctor: {title}")
    width = max((len(f.check) for f in report.findings), default=6)
    for f in report.findings:
        mark = {"ok": "ok   ", "warn": "warn ", "block": "BLOCK"}[f.severity]
        out(f"  {mark} {f.check:<{width}}  {f.message}")
        if f.fix and f.severity != "ok":
            out(f"  {'':5} {'':<{width}}  fix: {f.fix}")


@click.command("doctor")
@click.argument("recipe_ref", metavar="[RECIPE|auto]", default="auto", required=False)
@click.option(
    "--backend",
    type=click.Choice(["docker", "venv"]),
    default=None,
    help="Check for this backend only (an unreachable engine blocks only for docker).",
)
@_root_option
@set_option
@json_option
def doctor_cmd(
    recipe_ref: str, backend: str | None, root: Path, overrides: tuple[str, ...], as_json: bool
) -> None:
    """Check this host for a recipe (default: auto); print each finding with its fix.

    Exit 0 when nothing blocks, 4 otherwise.
    """
    host = detect(root=root)
    recipe: Recipe | None
    no_recipe: Finding | None = None
    try:
        recipe, choice = load_for_host(recipe_ref, host, overrides)
    except InvalidInput as exc:
        if recipe_ref != "auto":
            raise
        # No recipe for this GPU: still check the host, and say so as a blocking finding.
        recipe, choice = None, None
        no_recipe = Finding("recipe", "block", exc.message, exc.hint)
    chosen: Backend | None = (
        "docker" if backend == "docker" else "venv" if backend == "venv" else None
    )
    report = diagnose(recipe, host, root=root, backend=chosen)
    if no_recipe is not None:
        report = replace(report, findings=(no_recipe, *report.findings))
    if as_json:
        data = report.to_dict()
        data["auto"] = choice.to_dict() if choice else None
        echo_json(data)
    else:
        _print_report(report, choice)
    if report.blocking:
        first = report.blocking[0]
        raise Unavailable(
            f"{len(report.blocking)} problem(s) block {report.recipe or 'auto'} on this host;"
            f" first: {first.message}",
            hint=first.fix,
        )


@click.command("lock")
@click.argument("recipe_ref", metavar="RECIPE")
@click.option(
    "--wheelhouse",
    type=click.Path(file_okay=False, path_type=Path),
    help="A folder of wheels to resolve from as well (uv --find-links).",
)
@click.option(
    "--ca-bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    help="PEM file of CA certificates for the package indexes.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),  # a folder there: fsutil's one-line error, exit 2
    help="Write the lock here instead of next to the recipe (<recipe>.lock.txt).",
)
@set_option
def lock_cmd(
    recipe_ref: str,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    output: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Resolve a recipe's full requirement set, with hashes, into <recipe>.lock.txt."""
    from envforge.lock import write_lock

    if recipe_ref == "auto":
        raise InvalidInput("lock needs a recipe name, not auto", hint="envforge lock cpu")
    recipe = load_checked(recipe_ref, overrides)
    result = write_lock(recipe, wheelhouse=wheelhouse, ca_bundle=ca_bundle, output=output)
    click.echo(f"wrote {result.path} ({result.count} packages, hashes required)")


# --------------------------------------------------------------------------- build/shell routing
#
# ``envforge build`` and ``envforge shell`` live in envforge/cli/docker.py; these functions
# are their ``--backend venv`` / ``auto`` / ``--fallback cpu`` side.


def _say(text: str) -> None:
    click.echo(f"envforge: {text}", err=True)


def python_option(func: Any) -> Any:
    return click.option(
        "--python",
        "python",
        metavar="PATH",
        help="venv backend: the interpreter to use (must be the recipe's Python version).",
    )(func)


def fallback_option(func: Any) -> Any:
    return click.option(
        "--fallback",
        metavar="RECIPE",
        help="Quick-probe the recipe's GPU first; when it fails (hang, crash, no device) run "
        "in this recipe instead (e.g. --fallback cpu).",
    )(func)


def resolve_auto(recipe_ref: str) -> str:
    """``auto`` → the chosen recipe (its file when it came from a folder), said on stderr."""
    if recipe_ref != "auto":
        return recipe_ref
    choice = choose(detect())
    _say(f"auto -> {choice.recipe}: {choice.reason}")
    return str(choice.path) if choice.path is not None else choice.recipe


def _venv_options(
    *,
    python: str | None = None,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    level: str | None = None,
    step_timeout: float | None = None,
) -> Any:
    from envforge.backends.venv import VenvOptions
    from envforge.cli.docker import StepPrinter

    return VenvOptions(
        python=python,
        wheelhouse=wheelhouse,
        ca_bundle=ca_bundle,
        level="quick" if level == "quick" else "full" if level == "full" else None,
        step_timeout=step_timeout,
        listener=StepPrinter(),
        say=_say,
    )


def route_build(
    recipe_ref: str,
    backend: str,
    *,
    overrides: tuple[str, ...],
    python: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    level: str | None,
    step_timeout: float | None,
    report_dir: Path | None,
    as_json: bool,
    docker_only: list[str] | None = None,
) -> str | None:
    """``auto`` → the chosen recipe. ``--backend venv``: build here, return None.
    ``docker``: return the recipe reference for the Docker build to use."""
    ref = resolve_auto(recipe_ref)
    if backend != "venv":
        if python is not None:
            raise InvalidInput("--python is for --backend venv", hint="drop --python")
        return ref
    if docker_only:
        raise InvalidInput(
            f"{', '.join(docker_only)}: only for --backend docker",
            hint="drop them; venv builds are always certified",
        )
    from envforge.backends.venv import build as venv_build

    recipe = load_checked(ref, overrides)
    options = _venv_options(
        python=python,
        wheelhouse=wheelhouse,
        ca_bundle=ca_bundle,
        level=level,
        step_timeout=step_timeout,
    )
    try:
        result = venv_build(recipe, options)
    finally:
        if report_dir is not None:
            _copy_reports(recipe, report_dir)
    data = {
        "recipe": recipe.name,
        "backend": "venv",
        "path": str(result.path),
        "status": result.status,
        "certified": True,
        "python": result.interpreter.version,
        "lock": str(result.lock) if result.lock else None,
        "seconds": round(result.seconds, 3),
    }
    if as_json:
        echo_json(data)
        return None
    if result.status == "up-to-date":
        _say(f"{recipe.name}: up to date ({result.path})")
    else:
        _say(f"{recipe.name}: certified ({result.status} in {result.seconds:.1f}s)")
    click.echo(str(result.path))
    return None


def _copy_reports(recipe: Recipe, report_dir: Path) -> None:
    from envforge.backends.venv import MARKER_DIR, venv_location
    from envforge.fsutil import write_atomically

    markers = venv_location(recipe) / MARKER_DIR
    for name in ("probe.json", "probe.junit.xml", "certified.json"):
        if (markers / name).is_file():
            write_atomically(report_dir / name, (markers / name).read_bytes())


def _docker_serves(recipe: Recipe) -> tuple[bool, str]:
    """Whether the Docker backend can run ``recipe`` now: an engine and its certified image."""
    try:
        from envforge.backends import docker as engine

        client = engine.connect()
    except EnvforgeError as exc:
        return False, exc.message
    try:
        ref = engine.certified_ref(recipe.name, recipe.stack_tag)
        if engine.inspect_image(client, ref) is None:
            return False, f"no certified image {ref}"
    finally:
        client.close()
    return True, ""


def _docker_quick_probe(recipe: Recipe, timeout: float) -> str | None:
    """Quick probe of the recipe's certified image; None on a pass, else why not."""
    from envforge.backends import docker as engine
    from envforge.backends.venv import problem_of
    from envforge.cli.docker import StepPrinter
    from envforge.probe.runner import run_probe
    from envforge.probe.spec import ProbeSpec

    try:
        client = engine.connect()
        try:
            ref = engine.certified_ref(recipe.name, recipe.stack_tag)
            info = engine.inspect_image(client, ref)
            if info is None:
                return f"no certified image {ref} (envforge build {recipe.name})"
            spec = ProbeSpec.from_recipe(recipe, level="quick", step_timeout=timeout)
            target = engine.DockerTarget(client, info.id, engine.device_flags(recipe.gpu.vendor))
            report = run_probe(spec, target, listener=StepPrinter())
        finally:
            client.close()
    except EnvforgeError as exc:
        return exc.one_line()
    return None if report.passed else "quick probe: " + problem_of(report)


#: Seconds per step of the quick probe ``--fallback`` runs before choosing.
FALLBACK_STEP_TIMEOUT = 30.0


def route_shell(
    recipe_ref: str,
    backend: str | None,
    *,
    image: str | None,
    fallback: str | None,
    python: str | None,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    command: tuple[str, ...],
) -> str:
    """Where and in which recipe ``envforge shell`` runs.

    * ``auto`` → the recipe chosen for this host.
    * Backend: ``--backend`` when given; else docker when an engine answers and holds the
      recipe's certified image, else venv (said on stderr).
    * ``--fallback R``: quick-probe the GPU recipe first (in its container or venv);
      when it fails, run in R instead, saying why.
    * venv: runs the command here and exits with its status (SystemExit); docker: returns
      the recipe reference for the Docker shell to run.
    """
    ref = resolve_auto(recipe_ref)
    recipe = load_checked(ref)
    spare = load_checked(fallback) if fallback else None
    if backend is None:
        if image is not None:
            backend = "docker"
        else:
            ok, why = _docker_serves(recipe)
            backend = "docker" if ok else "venv"
            if not ok:
                _say(f"using the venv backend ({why})")
    if backend == "venv":
        if image is not None:
            raise InvalidInput("--image is for --backend docker", hint="drop --image")
        from envforge.backends.venv import shell as venv_shell

        options = _venv_options(python=python, wheelhouse=wheelhouse, ca_bundle=ca_bundle)
        code = venv_shell(
            recipe,
            list(command) or [os.environ.get("SHELL") or "bash"],
            options,
            fallback=spare,
            quick_timeout=FALLBACK_STEP_TIMEOUT,
            warn=_say,
        )
        sys.stdout.flush()
        raise SystemExit(code)
    if python is not None or wheelhouse is not None or ca_bundle is not None:
        raise InvalidInput(
            "--python, --wheelhouse and --ca-bundle are for --backend venv in shell",
            hint="envforge build RECIPE --wheelhouse DIR builds the image",
        )
    if spare is not None and recipe.gpu.vendor != "none" and spare.name != recipe.name:
        problem = _docker_quick_probe(recipe, FALLBACK_STEP_TIMEOUT)
        if problem is not None:
            _say(f"{recipe.name} cannot be used here: {problem}")
            _say(f"falling back to {spare.name}")
            return fallback or spare.name
    return ref


def shell_venv_options(func: Any) -> Any:
    """``--fallback``, ``--python``, ``--wheelhouse``, ``--ca-bundle`` for ``envforge shell``."""
    func = click.option(
        "--ca-bundle",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="venv backend, when the venv must be built: PEM bundle uv trusts.",
    )(func)
    func = click.option(
        "--wheelhouse",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help="venv backend, when the venv must be built: install torch from these wheels.",
    )(func)
    return fallback_option(python_option(func))


def docker_only_flags(**given: object) -> list[str]:
    """``--tag`` style names of Docker-only build options that were given."""
    return ["--" + name.replace("_", "-") for name, value in given.items() if value]
