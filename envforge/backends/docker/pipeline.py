"""The Docker backend's pipeline: recipe -> Dockerfile -> image -> certified tag, shells.

What :mod:`envforge.backends.docker` (the backend's face) delegates to. Bound to the
engine: it imports the ``docker`` SDK's modules (:mod:`.engine`, :mod:`.images`,
:mod:`.certification`, ...) at the top, and the face imports it only when a function runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envforge import lock
from envforge.backends.base import Options
from envforge.backends.docker import certification
from envforge.backends.docker import engine as docker_engine
from envforge.backends.docker import shell as docker_shell
from envforge.backends.docker.certified import image_for_use, tag_note
from envforge.backends.docker.images import (
    BUILDER_CHOICES,
    assemble_context,
    build_image,
    build_image_buildkit,
    find_buildkit,
    inspect_image,
    tag_image,
)
from envforge.backends.docker.leftovers import context_prefix
from envforge.backends.docker.options import DockerOptions, docker_options
from envforge.backends.docker.probe_target import DockerTarget
from envforge.backends.docker.projects import (
    build_command,
    image_problem,
    prepare,
    probe_for,
    project_ref,
    shell_for,
)
from envforge.backends.docker.provenance import build_provenance
from envforge.backends.docker.results import Certified, DockerBuildResult
from envforge.backends.venv import problem_of
from envforge.container.devices import (
    DeviceFlags,
    SharedMemory,
    device_flags,
    select_devices,
)
from envforge.container.refs import CERTIFIED_REPOSITORY_PREFIX, certified_ref
from envforge.core.fsutil import write_atomically
from envforge.core.mirror import index_mirror_options, mirrored_image
from envforge.errors import EnvforgeError, InvalidInput, Unavailable
from envforge.probe.runner import run_probe
from envforge.probe.spec import ProbeSpec
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, render_dockerfile
from envforge.stack import Stack, stack_of

if TYPE_CHECKING:
    from envforge.backends.docker.certification import Prober
    from envforge.backends.docker.client import EngineClient
    from envforge.backends.docker.images import BuildKitCli
    from envforge.backends.docker.projects import ProjectBuild, ProjectProbe
    from envforge.lock import LockedInstall
    from envforge.render.context import Builder


#: The options of a call that gives none.
DEFAULT_OPTIONS = DockerOptions()


def _connect(options: DockerOptions) -> EngineClient:
    return docker_engine.connect(options.environ)


def flags_for(client: EngineClient, recipe: Recipe, options: DockerOptions) -> DeviceFlags:
    """This host's device flags for ``recipe`` on the engine behind ``client``, narrowed
    to ``options.gpus`` (``--gpu``).

    The engine decides the path (CDI names, raw nodes, Docker's GPU request: see
    :func:`~envforge.container.devices.device_flags`); ``options.shm_size`` replaces
    host IPC by a private /dev/shm.
    """
    gpu = recipe.gpu.vendor in ("amd", "nvidia")
    engine = docker_engine.identify_engine(client) if gpu else None
    flags = device_flags(recipe.gpu.vendor, engine=engine, shm=SharedMemory.sized(options.shm_size))
    # ``--gpu``: only the chosen GPUs (and their variables) in the container
    return flags if options.gpus is None else select_devices(flags, options.gpus)


# --------------------------------------------------------------------------- certify


def certify_and_tag(
    client: EngineClient,
    recipe: Recipe,
    image: str,
    options: DockerOptions,
    *,
    extra_tags: Sequence[str] = (),
    report_dir: Path | None = None,
    prober: Prober | None = None,
    stack: Stack | None = None,
    project: ProjectProbe | None = None,
) -> Certified:
    """Probe ``image``; on a pass, tag the labelled image as certified (and ``extra_tags``).

    With ``options.project``: the project's steps run too (``project``: made already),
    and the certified tag is the project's (:func:`.projects.project_ref`)."""

    say = options.say
    ref, project = _project_part(recipe, options, project)
    say(f"certifying {image[:19]} for {recipe.name} (no network, host devices)")
    outcome = certification.certify_image(
        client,
        recipe,
        image,
        level=options.level,
        step_timeout=options.step_timeout,
        require_free=options.require_free,
        gpu_checks=options.gpu_checks,
        listener=options.listener,
        flags=flags_for(client, recipe, options),
        prober=prober,
        signer=options.signer,
        stack=stack,
        project=project,
    )
    if report_dir is not None:
        json_path, junit_path = outcome.report.write(report_dir)
        cert_path = report_dir / "certificate.json"
        write_atomically(cert_path, outcome.certificate.to_json(compact=False) + "\n")
        say(f"reports: {json_path}, {junit_path}, {cert_path}")
    signed = outcome.certificate.signed_by
    say(
        f"certificate {outcome.certificate.digest} ({outcome.certificate.status}"
        f"{', signed by ' + signed[:23] if signed else ''}) stored at {outcome.stored_at}"
    )
    if outcome.certified_image is not None:
        for tag in (ref, *extra_tags):
            tag_image(client, outcome.certified_image, tag)
        say(f"certified: {ref} -> {outcome.certified_image[:19]}")
    else:
        previous = inspect_image(client, ref)
        if previous is not None and previous.id != image:
            say(f"{ref} still names the previously certified image {previous.id[:19]}")
    return Certified(recipe, outcome, tuple(extra_tags), ref)


def _project_part(
    recipe: Recipe, options: DockerOptions, probe: ProjectProbe | None
) -> tuple[str, ProjectProbe | None]:
    """The certified tag, and the project's part of the probe (None without a project)."""
    if options.project is None:
        return _certified_tag(recipe, options), None

    return _certified_tag(recipe, options), probe or probe_for(options.project)


def _build_command(recipe: Recipe, options: DockerOptions) -> str | None:
    """The command that makes the project's image (None: the recipe's, the default)."""
    if options.project is None:
        return None

    return build_command(recipe, options.project)


def _certified_tag(recipe: Recipe, options: DockerOptions) -> str:
    """``envforge/RECIPE:STACK``, or the project's (:func:`.projects.project_ref`)."""
    if options.project is None:
        return certified_ref(recipe.name, recipe.stack_tag)

    return project_ref(recipe, options.project)


def certify(
    recipe: Recipe,
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    image: str | None = None,
    retag: Sequence[str] = (),
    client: EngineClient | None = None,
    prober: Prober | None = None,
) -> Certified:
    """Probe ``image`` (default: the recipe's certified tag) again; retag it on a pass.

    Every verdict goes to the local certificate store. Returns the verdict (a failed probe
    is a result, not an error: see :meth:`Certified.failure`).
    """

    if isinstance(options, Options):  # a command's options: IMAGE refs come in extra
        image = image or options.extra.get("image")
        retag = retag or tuple(options.extra.get("retag", ()))
    options = docker_options(options)
    engine = client if client is not None else _connect(options)
    if image is None:
        image = _certified_tag(recipe, options)
        info = inspect_image(engine, image)
        if info is None:
            raise InvalidInput(
                f"no certified image {image} on this engine",
                hint=f"envforge build {recipe.name}"
                + (
                    f" --project {options.project.root} --backend docker" if options.project else ""
                ),
            )
        note = tag_note(info, image, recipe)
        if note is not None:
            options.say(note)
    return certify_and_tag(
        engine,
        recipe,
        image,
        options,
        extra_tags=retag,
        report_dir=options.report_dir,
        prober=prober,
    )


# --------------------------------------------------------------------------- build


def build(
    recipe: Recipe,
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    client: EngineClient | None = None,
    prober: Prober | None = None,
) -> DockerBuildResult:
    """Render, build and (unless ``options.certify`` is False) certify and tag ``recipe``.

    The image is tagged ``envforge/RECIPE:STACK`` only when the probe passed. A failed
    probe is a result (``certified`` False; :meth:`Certified.failure` is the error to
    raise); a failed build raises :class:`BuildFailed`, a missing engine
    :class:`Unavailable`.
    """

    options = docker_options(options)
    reserved = [t for t in options.tags if t.startswith(CERTIFIED_REPOSITORY_PREFIX + "/")]
    if not options.certify and reserved:
        raise InvalidInput(
            f"--tag {reserved[0]}: envforge/ names certified images, and --no-certify "
            "certifies nothing",
            hint="choose another --tag, or drop --no-certify",
        )
    engine = client if client is not None else _connect(options)
    # --base-image as given; the recipe's own through the base-image mirror, if any
    base = options.base_image or mirrored_image(recipe.base_image, options.base_image_mirror)
    # the docker CLI (BuildKit) runs with this process's environment (PATH, HOME, its
    # config) and, over it, the engine settings given in options.environ
    environ = {**os.environ, **(options.environ or {})}
    builder, buildkit, why = _choose_builder(engine, options, environ)
    stack, locked, project = _plan(recipe, options)
    dockerfile = render_dockerfile(
        recipe,
        RenderOptions(
            base_image=base,
            wheelhouse=options.wheelhouse is not None,
            ca_bundle=options.ca_bundle is not None,
            builder=builder,
            installer="pip" if options.installer == "pip" else "uv",
            lock=locked,
            platform=options.platform,
            **index_mirror_options(options.index_mirror),
            provenance=build_provenance(
                options.wheelhouse,
                options.ca_bundle,
                None if options.base_image else options.base_image_mirror,
            ),
        ),
        stack,
        project=project.layer if project is not None else None,
    )
    context = Path(tempfile.mkdtemp(prefix=context_prefix()))  # names its owner: swept
    try:
        assemble_context(
            context, dockerfile, wheelhouse=options.wheelhouse, ca_bundle=options.ca_bundle
        )
        options.say(
            f"building {recipe.name} ({recipe.stack_tag}) from {base}"
            + (f" for the project {project.layer.name}" if project else "")
        )
        if buildkit is not None:
            result = build_image_buildkit(
                buildkit,
                context,
                environ,
                on_line=options.output,
                nocache=options.no_cache,
                platform=options.platform,
            )
        else:
            result = build_image(
                engine,
                context,
                on_line=options.output,
                nocache=options.no_cache,
                platform=options.platform,
            )
    finally:
        options.output.close()
        shutil.rmtree(context, ignore_errors=True)
    reused = sum(1 for s in result.steps if s.cached)
    options.say(
        f"built {result.image_id[:19]} in {result.seconds:.1f}s "
        f"({reused} of {len(result.steps)} steps from cache)"
    )
    options.say(
        "builder: "
        + (f"BuildKit ({buildkit.describe()})" if buildkit else f"classic ({why})")
        + (f"; installed exactly the lock {locked.name}" if locked else "")
    )
    ref, probe = _project_part(recipe, options, project.probe if project else None)
    if not options.certify:
        for tag in options.tags:
            tag_image(engine, result.image_id, tag)
        return DockerBuildResult(recipe, result, None, options.tags, ref)
    certified = certify_and_tag(
        engine,
        recipe,
        result.image_id,
        options,
        extra_tags=options.tags,
        report_dir=options.report_dir,
        prober=prober,
        stack=stack,
        project=probe,
    )
    return DockerBuildResult(recipe, result, certified, options.tags, ref)


def _plan(
    recipe: Recipe, options: DockerOptions
) -> tuple[Stack, LockedInstall | None, ProjectBuild | None]:
    """The stack to build and certify, the lock to install (split for the layers), and
    the project's part (None without ``--project``: the recipe's own image)."""
    if options.project is None:
        stack = stack_of(recipe)
        _check_wheelhouse(stack, options)
        return stack, _lock_for(recipe, options, stack), None

    project = prepare(
        recipe,
        options.project,
        wheelhouse=options.wheelhouse,
        ca_bundle=options.ca_bundle,
        platform=options.platform,
        say=options.say,
    )
    _check_wheelhouse(project.stack, options)
    return project.stack, project.locked, project


def _choose_builder(
    engine: EngineClient, options: DockerOptions, environ: Mapping[str, str]
) -> tuple[Builder, BuildKitCli | None, str]:
    """``classic`` or ``buildkit`` (with the CLI that drives it), as asked or as available,
    and why the classic builder was chosen."""

    asked = options.builder or environ.get("ENVFORGE_BUILDER") or "auto"
    setting = "--builder" if options.builder else "ENVFORGE_BUILDER"
    if asked not in BUILDER_CHOICES:
        raise InvalidInput(
            f"{setting}: {asked!r} is not a builder", hint="auto, buildkit or classic"
        )
    if asked == "classic":
        return "classic", None, f"{setting}=classic"
    cli, why = find_buildkit(engine, environ)
    if cli is not None:
        return "buildkit", cli, ""
    if asked == "buildkit":
        raise Unavailable(
            f"{setting}=buildkit: {why}",
            hint="install Debian's docker.io CLI or the buildx plugin, or use the classic builder",
        )
    return "classic", None, why


def _check_wheelhouse(stack: Stack, options: DockerOptions) -> None:
    """The companions the image needs are in the wheelhouse (see :func:`lock.check_wheelhouse`)."""
    lock.check_wheelhouse(stack, options.wheelhouse)


def _lock_for(recipe: Recipe, options: DockerOptions, stack: Stack) -> LockedInstall | None:
    """The recipe's matching lock, split for the image's layers; a stale one is named."""
    if not options.use_lock:
        return None
    if not lock.serves_platform(options.platform):
        options.say(
            f"note: not using the recipe's lock: it is resolved for {lock.LOCK_PLATFORM} "
            f"({lock.PLATFORM}), the image for {options.platform}"
        )
        return None
    stale = lock.stale_lock(recipe, stack)
    if stale is not None:
        options.say(
            f"note: ignoring stale lock {stale} (the recipe changed): run `envforge lock "
            f"{recipe.name}`"
        )
    path = lock.lock_path(recipe, stack)
    return lock.split_lock(path, stack.family()) if path is not None else None


# --------------------------------------------------------------------------- shell


def serves(recipe: Recipe, options: Options | DockerOptions = DEFAULT_OPTIONS) -> tuple[bool, str]:
    """Whether this backend can run ``recipe`` now: an engine answers and has its image."""
    options = docker_options(options)
    try:
        client = _connect(options)
    except EnvforgeError as exc:
        return False, exc.message

    try:
        ref = _certified_tag(recipe, options)
        info = inspect_image(client, ref)
        if info is None:
            return False, f"no certified image {ref}"
    finally:
        client.close()
    if options.project is not None:
        problem = image_problem(info, ref, options.project, recipe)
        if problem is not None:
            return False, problem
    return True, ""


def check(
    recipe: Recipe,
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    step_timeout: float = 30.0,
) -> str | None:
    """Quick probe of the recipe's certified image now; None on a pass, else why not."""

    options = docker_options(options)
    try:
        client = _connect(options)
        try:
            info = image_for_use(
                client,
                recipe,
                image=None,
                say=options.say,
                ref=_certified_tag(recipe, options),
                build=_build_command(recipe, options),
            )
            spec = ProbeSpec.from_recipe(recipe, level="quick", step_timeout=step_timeout)
            target = DockerTarget(client, info.id, flags_for(client, recipe, options))
            report = run_probe(spec, target, listener=options.listener)
        finally:
            client.close()
    except EnvforgeError as exc:
        return exc.one_line()
    return None if report.passed else "quick probe: " + problem_of(report)


def run(
    recipe: Recipe,
    argv: Sequence[str],
    options: Options | DockerOptions = DEFAULT_OPTIONS,
    *,
    client: EngineClient | None = None,
) -> int:
    """Run ``argv`` (default: bash) in the recipe's certified image (or ``options.image``).

    GPUs, the recipe's env and the cache volumes are passed in; the current directory is
    mounted at /workspace; the command's exit code is returned.
    """

    options = docker_options(options)
    engine = client if client is not None else _connect(options)
    ref = _certified_tag(recipe, options)
    info = image_for_use(
        engine,
        recipe,
        image=options.image,
        say=options.say,
        ref=ref,
        build=_build_command(recipe, options),
    )
    if options.admit is not None:
        options.admit(info.id, options.image or ref, ())
    env, cwd = dict(recipe.env_map), Path(os.getcwd())
    if options.project is not None:
        env, cwd = shell_for(
            info, ref, options.project, recipe, asked=options.image is not None, say=options.say
        )
    return docker_shell.run_shell(
        engine,
        image=info.id,
        command=list(argv) or ["bash"],
        recipe_name=recipe.name,
        stack_tag=recipe.stack_tag,
        env=env,
        flags=flags_for(engine, recipe, options),
        cwd=cwd,
    )
