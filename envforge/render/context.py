"""Recipe -> render contexts: every rendering decision is made here, in Python.

Templates only print the fields of :class:`DockerContext` and :class:`VenvContext`.
Every value that comes from a recipe is checked by
:func:`envforge.recipe.checks.check_renderable`, the function the loader calls too (no
line breaks, control characters, NULs or lone surrogates; values that are spliced in
unquoted, such as the base image, Python version and recipe name, match a strict
pattern), and quoted here: Dockerfile strings with :func:`docker_quote`, shell words
with :func:`shell_quote`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from packaging.requirements import InvalidRequirement, Requirement

from envforge.core.mirror import Mirrors, index_mirror_from_env, rewrite
from envforge.core.patterns import IMAGE_RE
from envforge.errors import InvalidInput
from envforge.knowledge.platforms import PLATFORMS
from envforge.knowledge.torch_index import IndexForm
from envforge.recipe.checks import check_renderable
from envforge.recipe.model import Recipe
from envforge.render.indexes import SOURCES_FILE, PipIndexed, index_sources, pip_indexed
from envforge.render.labels import Label, recipe_labels, recorded
from envforge.render.quoting import check_one_line, docker_quote, shell_quote
from envforge.stack import Stack, stack_of

if TYPE_CHECKING:  # a lock's layers, read by envforge.lock (below render)
    from envforge.lock import LockedInstall

#: Where the virtual environment lives inside images.
VENV_DIR = "/opt/venv"
#: Where the build stage puts the optional build-context files (never copied onward).
STAGING_DIR = "/tmp/envforge"
#: File names at the root of the build context (see the Docker backend).
CONTEXT_WHEELHOUSE = "wheelhouse"
CONTEXT_CA_BUNDLE = "ca-bundle.pem"

__all__ = ["IndexForm"]  # re-exported: the index form is the stack's (envforge.stack)

_PIP_FLAGS = "--no-cache-dir --disable-pip-version-check --no-input --progress-bar off"

#: uv for the image's build stage, installed with pip from the wheelhouse or the package
#: index (never downloaded from anywhere else); pip stays the fallback where it cannot run.
UV_REQUIREMENT = "uv==0.13.9"
#: Where the build stage puts uv (outside the venv: it never reaches the final stage).
UV_DIR = "/opt/envforge-uv"
#: uv's cache inside the build (a BuildKit cache mount; the classic builder uses none).
UV_CACHE_DIR = "/root/.cache/uv"
#: The build stage collects the files the second install adds here (the final stage's
#: second venv layer).
REST_DIR = "/opt/envforge-rest"

Builder = Literal["classic", "buildkit"]
Installer = Literal["uv", "pip"]
BUILDERS: tuple[Builder, ...] = ("classic", "buildkit")
INSTALLERS: tuple[Installer, ...] = ("uv", "pip")


@dataclass(frozen=True)
class RenderOptions:
    """How the output will be used (not part of the recipe, so not in its hash)."""

    #: Replaces the recipe's ``base_image`` (``--base-image``).
    base_image: str | None = None
    #: The build context has ``wheelhouse/`` at its root (Docker), or the venv setup
    #: script is given ``--wheelhouse DIR``: torch comes from there via ``--find-links``
    #: instead of ``torch.index``; other requirements from the default index.
    wheelhouse: bool = False
    #: The build context has ``ca-bundle.pem`` at its root (Docker), or the setup script
    #: is given ``--ca-bundle FILE``: the installer must trust it.
    ca_bundle: bool = False
    #: Index mirrors (original, mirror) and the default index's mirror; ``mirrors``
    #: None: both from ``ENVFORGE_INDEX_MIRROR`` (or the user's file) at render time. The
    #: rendered output uses them; the recipe (and its hash) do not change.
    mirrors: Mirrors | None = None
    default_index: str | None = None
    #: What the image records of its build (:mod:`envforge.render.provenance`): the
    #: wheelhouse's and CA bundle's digests, the base-image mirror (never a host path).
    provenance: tuple[tuple[str, str], ...] = ()

    #: ``buildkit``: wheelhouse and CA bundle are bind-mounted into the installing steps
    #: (never a layer) and uv's cache is a cache mount; ``classic``: COPY into the build stage.
    builder: Builder = "classic"
    #: ``pip``: never try uv (for a base image where uv cannot run).
    installer: Installer = "uv"
    #: Install exactly this lock, hashes required (Docker only).
    lock: LockedInstall | None = None
    #: ``linux/amd64`` / ``linux/arm64`` (``--platform``): every ``FROM`` of the base image
    #: names it, so the engine builds for it; None: the engine's own platform.
    platform: str | None = None


#: The defaults: the recipe's base image, torch from its index, the system's CAs.
DEFAULT_OPTIONS = RenderOptions()


# --------------------------------------------------------------------------- contexts


@dataclass(frozen=True)
class EnvLine:
    name: str
    #: Quoted for a Dockerfile (``docker``) and for a POSIX shell (``shell``).
    docker: str
    shell: str


@dataclass(frozen=True)
class DockerContext:
    recipe: str
    stack_tag: str
    base_image: str
    #: ``--platform=linux/arm64 `` for the base image's ``FROM`` lines ("" by default).
    from_platform: str
    python: str
    python_bin: str
    #: Shell words (already quoted) for apt package names.
    python_apt: str
    venv_apt: str
    #: The recipe's ``system_packages`` (apt names, checked by the recipe loader), or "".
    system_apt: str
    venv_dir: str
    rest_dir: str
    #: ``classic`` or ``buildkit`` (see :class:`RenderOptions`).
    builder: str
    copy_ca_bundle: str | None
    copy_wheelhouse: str | None
    #: ``NAME=VALUE`` words for the build stage's ENV (uv's settings, the CA bundle).
    build_env: tuple[str, ...]
    #: ``--mount=...`` words (BuildKit) that prefix each installing RUN, with a trailing space.
    mounts: str
    #: Shell scripts (lines joined with backslash continuations) of the installing RUN steps;
    #: ``uv_step`` None: pip only.
    uv_step: str | None
    torch_step: str
    rest_step: str
    #: The lock file installed (hashes required), or None.
    lock_name: str | None
    env: tuple[EnvLine, ...]
    labels: tuple[Label, ...]


@dataclass(frozen=True)
class VenvContext:
    recipe: str
    recipe_hash: str
    stack_tag: str
    python: str
    #: Shell-quoted words.
    torch_requirement: str
    torch_index_args: tuple[str, ...]
    rest_index_args: tuple[str, ...]
    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    #: Raw lines for requirements.txt / constraints.txt (checked: one line each).
    requirement_lines: tuple[str, ...]
    constraint_lines: tuple[str, ...]
    needs_wheelhouse: bool
    needs_ca_bundle: bool
    env: tuple[EnvLine, ...]
    #: The stack the context was made from.
    stack: Stack
    #: The packages from their own index: the pyproject.toml lines uv reads them from
    #: (raw, and as shell words), and for pip each one to download alone.
    index_sources: tuple[str, ...] = ()
    index_source_words: tuple[str, ...] = ()
    pip_indexed: tuple[PipIndexed, ...] = ()
    #: The default index's mirror (a shell word), exported for uv and pip; None: none.
    default_index: str | None = None


def _check_recipe(recipe: Recipe, options: RenderOptions) -> str:
    """Check every recipe value a renderer uses; return the effective base image."""
    check_renderable(recipe)
    if options.base_image is not None:
        check_one_line("--base-image", options.base_image, source="command line")
        if not IMAGE_RE.match(options.base_image):
            raise InvalidInput(
                f"--base-image: {options.base_image!r} is not an image reference",
                hint="e.g. ubuntu:22.04",
            )
        return options.base_image
    return recipe.base_image


def _env_lines(recipe: Recipe) -> tuple[EnvLine, ...]:
    return tuple(
        EnvLine(name=e.name, docker=docker_quote(e.value), shell=shell_quote(e.value))
        for e in recipe.env
    )


def torch_index_url(stack: Stack, options: RenderOptions = DEFAULT_OPTIONS) -> str | None:
    """The URL the installer is given for the stack's index: on its mirror when
    ``ENVFORGE_INDEX_MIRROR`` (or ``options.mirrors``) names one."""
    if stack.index is None:
        return None
    return rewrite(stack.index, mirrors_of(options))


def _torch_index_args(stack: Stack, options: RenderOptions) -> tuple[str, ...]:
    url = torch_index_url(stack, options)
    if stack.index_form is None or url is None:
        return ()
    return (f"--{stack.index_form}", shell_quote(url))


def _rest_index_args(stack: Stack, options: RenderOptions) -> tuple[str, ...]:
    """The rest comes from the default index; the torch index is an extra one so that
    companion packages with local labels (``torchvision==0.14.1+rocm5.2``) resolve."""
    url = torch_index_url(stack, options)
    if url is None:
        return ()
    return ("--extra-index-url", shell_quote(url))


rest_index_args = _rest_index_args


def mirrors_of(options: RenderOptions) -> Mirrors:
    """The index pairs ``options`` render with (from the environment when not given)."""
    return index_mirror_from_env().pairs if options.mirrors is None else options.mirrors


def default_index_of(options: RenderOptions) -> str | None:
    """The default index's mirror (``UV_INDEX_URL``/``PIP_INDEX_URL`` of the installing
    steps): never the torch index, which only a pair maps."""
    return index_mirror_from_env().default if options.mirrors is None else options.default_index


def _script(lines: list[str]) -> str:
    """Shell lines as one RUN command: backslash continuations, four spaces in; each line
    ends with ``;`` but the last and those ending ``then`` or ``else``."""
    ended = [
        line if i == len(lines) - 1 or line.endswith((" then", " else", "else")) else line + ";"
        for i, line in enumerate(lines)
    ]
    return " \\\n    ".join(ended)


def _printf(lines: tuple[str, ...], target: str) -> str:
    """``printf`` writing ``lines`` (one shell word each, a line of their own) to ``target``."""
    words = "".join(f" \\\n        {shell_quote(x)}" for x in lines)
    return f"printf '%s\\n'{words} > {target}"


#: For the project partials (:mod:`envforge.render.project`): the same shell rendering.
script_lines = _script
printf_lines = _printf

_UV = f"{UV_DIR}/bin/uv"
_PYTHON = f"{VENV_DIR}/bin/python"
#: The venv's file listing (sorted, files and links) a step takes before and after.
_LISTING = f"find {VENV_DIR} ! -type d | LC_ALL=C sort"


def installer_commands(options: RenderOptions) -> tuple[str, str]:
    """The build stage's ``uv pip install`` and ``pip install`` command prefixes."""
    uv_pip = f"{_UV} pip install --python {_PYTHON}"
    if options.builder == "classic":
        uv_pip += " --no-cache"
    return uv_pip, f"{_PYTHON} -m pip install {_PIP_FLAGS}"


def either_installer(
    options: RenderOptions, uv_cmd: str | list[str], pip_cmd: str | list[str]
) -> list[str]:
    """Shell lines running ``uv_cmd`` when the build stage has uv, else ``pip_cmd``,
    saying so (``pip_cmd`` alone with ``installer: pip``)."""
    uv_lines = [uv_cmd] if isinstance(uv_cmd, str) else uv_cmd
    pip_lines = [pip_cmd] if isinstance(pip_cmd, str) else pip_cmd
    if options.installer == "pip":
        return pip_lines
    return [
        f"if [ -x {_UV} ]; then",
        *(f"    {line}" for line in uv_lines),
        "else",
        "    echo 'envforge: installing with pip (uv is not available in this build)' >&2",
        *(f"    {line}" for line in pip_lines),
        "fi",
    ]


def added_files_lines(
    listings: tuple[str, str],
    target: str,
    *,
    removed: str,
    strict_compile: bool = True,
    remove: tuple[str, ...] = (),
) -> list[str]:
    """After an install step whose venv listing was written to ``listings[0]``: fail the
    build naming the files it removed (``removed`` says why), byte-compile the files it
    added (``strict_compile``: a file that does not compile fails the build) and copy
    exactly those files to ``target`` (a venv layer of the final stage)."""
    before, after = listings
    return [
        f"{_LISTING} > {after}",
        f"if LC_ALL=C comm -23 {before} {after} | grep -q .; then",
        f"    echo 'envforge: {removed}:' >&2",
        f"    LC_ALL=C comm -23 {before} {after} | head -n 5 >&2",
        "    exit 1",
        "fi",
        f"LC_ALL=C comm -13 {before} {after} | grep '\\.py$'"
        f" | {_PYTHON} -m compileall -q -i - >/dev/null{'' if strict_compile else ' || true'}",
        f"{_LISTING} > {after}",
        f"LC_ALL=C comm -13 {before} {after} | sed 's|^{VENV_DIR}/||'"
        f" | tar -C {VENV_DIR} -cf - -T - | tar -C {target} -xf -",
        f"rm -f {' '.join((before, after, *remove))}",
    ]


def _installs(
    stack: Stack, options: RenderOptions, sources: tuple[tuple[str, ...], tuple[str, ...]]
) -> tuple[str | None, str, str]:
    """The uv step (None for pip only), the torch step and the rest step.

    Each installing step runs uv when the build stage has it, else pip, saying so. The
    torch step installs into the venv (the final stage's first venv layer); the rest step
    installs NumPy and the recipe's packages on top, with what the torch step installed
    as constraints (nothing of torch's layer may move), byte-compiles the new files and
    copies exactly the files it added to ``REST_DIR`` (the second venv layer). Files of
    torch's layer that the rest step removed fail the build, naming them.
    """
    torch_source, rest_source = sources
    staging = STAGING_DIR
    python = f"{VENV_DIR}/bin/python"
    uv = _UV
    uv_pip, pip = installer_commands(options)
    uv_step: str | None = None
    if options.installer == "uv":
        wheels = ("--find-links", f"{staging}/{CONTEXT_WHEELHOUSE}") if options.wheelhouse else ()
        uv_step = _script(
            [
                "set -eu",
                f"if {pip} --target {UV_DIR} {' '.join(wheels)}{' ' if wheels else ''}"
                f"-- {shell_quote(UV_REQUIREMENT)} && {uv} --version; then :; else",
                f"    rm -rf {UV_DIR}",
                "    echo 'envforge: uv cannot be installed or run in this base image;"
                " installing with pip' >&2",
                "fi",
            ]
        )

    def choose(uv_cmd: str | list[str], pip_cmd: str | list[str]) -> list[str]:
        return either_installer(options, uv_cmd, pip_cmd)

    lock = options.lock
    torch_words = " ".join(torch_source)
    rest_words = " ".join(rest_source)
    if lock is not None:
        torch_file = f"{staging}/torch.lock.txt"
        torch_lines = [
            "set -eu",
            f"mkdir -p {staging}",
            _printf(lock.torch, torch_file),
            *choose(
                f"{uv_pip} --compile-bytecode --require-hashes --no-deps {torch_words}"
                f" -r {torch_file}",
                f"{pip} --require-hashes --no-deps {torch_words} -r {torch_file}",
            ),
        ]
    else:
        req = " ".join(shell_quote(r) for r in stack.first_layer())
        torch_lines = [
            "set -eu",
            *choose(
                f"{uv_pip} --compile-bytecode {torch_words} -- {req}",
                f"{pip} {torch_words} -- {req}",
            ),
        ]

    before, after = f"{staging}/before.txt", f"{staging}/after.txt"
    listing = _LISTING
    rest_lines = ["set -eu", f"mkdir -p {staging} {REST_DIR}"]
    if lock is not None:
        if lock.rest:
            rest_file = f"{staging}/rest.lock.txt"
            rest_lines += [
                _printf(lock.rest, rest_file),
                f"{listing} > {before}",
                *choose(
                    f"{uv_pip} --require-hashes --no-deps {rest_words} -r {rest_file}",
                    f"{pip} --no-compile --require-hashes --no-deps {rest_words} -r {rest_file}",
                ),
            ]
        else:
            rest_lines.append(f"{listing} > {before}")
    else:
        # torch repeated (with the torch layer's pins as constraints), so nothing moves it
        reqs = " ".join(shell_quote(r) for r in stack.install_lines())
        pins = f"{staging}/torch-layer.txt"
        rest_lines += [
            f"{python} -m pip freeze --all --disable-pip-version-check > {pins}",
            f"{listing} > {before}",
        ]
        uv_extra, pip_lines, pip_extra = _indexed_steps(stack, options, pip)
        rest_lines += uv_extra[:1]
        rest_lines += choose(
            f"{uv_pip} -c {pins} {rest_words}{uv_extra[1] if uv_extra else ''} -- {reqs}",
            [*pip_lines, f"{pip} --no-compile -c {pins} {rest_words} -- {reqs}{pip_extra}"],
        )
    rest_lines += added_files_lines(
        (before, after),
        REST_DIR,
        removed="installing NumPy and the recipe packages removed files of the torch layer"
        " (pin the packages to versions that agree with torch)",
    )
    return uv_step, _script(torch_lines), _script(rest_lines)


def _indexed_steps(
    stack: Stack, options: RenderOptions, pip: str
) -> tuple[list[str], list[str], str]:
    """The packages from their own index in the image's rest step: (for uv: the line that
    writes their pyproject.toml and the `` -r FILE`` words; for pip: the lines that
    download each one alone, and the ``name @ file://...`` words naming the downloads)."""
    sources = index_sources(stack, mirrors_of(options))
    if not sources:
        return [], [], ""
    folder = f"{STAGING_DIR}/indexes"
    uv_extra = [
        f"mkdir -p {folder} && {_printf(sources, f'{folder}/{SOURCES_FILE}')}",
        f" -r {folder}/{SOURCES_FILE}",
    ]
    pip_lines: list[str] = []
    words = ""
    for i, entry in enumerate(pip_indexed(stack, mirrors_of(options))):
        pip_lines += [
            f"{pip.replace(' install ', ' download ', 1)} --no-deps --index-url {entry.url}"
            f" -d {folder}/{i} -- {entry.requirement}",
            f"indexed_{i}=$(ls -d {folder}/{i}/*)",
        ]
        words += f' {entry.name}" @ file://$indexed_{i}"'
    return uv_extra, pip_lines, words


def docker_context(
    recipe: Recipe, options: RenderOptions, stack: Stack | None = None
) -> DockerContext:
    """``stack``: the recipe's stack as the caller computed it (None: from the recipe)."""
    base_image = _check_recipe(recipe, options)
    stack = stack_of(recipe) if stack is None else stack
    py = f"python{recipe.python}"
    wheelhouse = f"{STAGING_DIR}/{CONTEXT_WHEELHOUSE}"
    ca_bundle = f"{STAGING_DIR}/{CONTEXT_CA_BUNDLE}"
    if options.wheelhouse:
        torch_source: tuple[str, ...] = ("--find-links", wheelhouse)
        rest_source: tuple[str, ...] = ("--find-links", wheelhouse)
    else:
        torch_source = _torch_index_args(stack, options)
        rest_source = _rest_index_args(stack, options)
    buildkit = options.builder == "buildkit"
    build_env = ["UV_PYTHON_DOWNLOADS=never", "UV_NO_PROGRESS=1", "UV_LINK_MODE=copy"]
    build_env.append(f"UV_CACHE_DIR={UV_CACHE_DIR}" if buildkit else "UV_NO_CACHE=1")
    if options.ca_bundle:
        build_env += [f"PIP_CERT={ca_bundle}", f"SSL_CERT_FILE={ca_bundle}"]
    default_index = default_index_of(options)
    if default_index is not None:
        url = docker_quote(default_index)
        build_env += [f"UV_INDEX_URL={url}", f"PIP_INDEX_URL={url}"]
    mounts: list[str] = []
    if buildkit:
        mounts.append(f"--mount=type=cache,id=envforge-uv,target={UV_CACHE_DIR},sharing=locked")
        if options.wheelhouse:
            mounts.append(f"--mount=type=bind,source={CONTEXT_WHEELHOUSE},target={wheelhouse}")
        if options.ca_bundle:
            mounts.append(f"--mount=type=bind,source={CONTEXT_CA_BUNDLE},target={ca_bundle}")
    uv_step, torch_step, rest_step = _installs(stack, options, (torch_source, rest_source))
    return DockerContext(
        recipe=recipe.name,
        stack_tag=recipe.stack_tag,
        base_image=base_image,
        from_platform=_from_platform(options.platform),
        python=recipe.python,
        python_bin=py,
        python_apt=py,
        venv_apt=f"{py}-venv",
        system_apt=" ".join(shell_quote(p) for p in recipe.system_packages),
        venv_dir=VENV_DIR,
        rest_dir=REST_DIR,
        builder=options.builder,
        copy_ca_bundle=(
            f"{CONTEXT_CA_BUNDLE} {ca_bundle}" if options.ca_bundle and not buildkit else None
        ),
        copy_wheelhouse=(
            f"{CONTEXT_WHEELHOUSE}/ {wheelhouse}/" if options.wheelhouse and not buildkit else None
        ),
        build_env=tuple(build_env),
        mounts="".join(m + " " for m in mounts),
        uv_step=uv_step,
        torch_step=torch_step,
        rest_step=rest_step,
        lock_name=options.lock.name if options.lock is not None else None,
        env=_env_lines(recipe),
        labels=recipe_labels(recipe, stack, base_image)
        + recorded(options.provenance, default_index, mirrors_of(options)),
    )


def _requirement_file_lines(recipe: Recipe, stack: Stack, constraints: bool) -> tuple[str, ...]:
    """Lines for a requirements file, which has its own option syntax (``-r``, ``--hash``):
    only plain PEP 508 requirements can be written there (the packages from their own
    index are not: they are installed from it, see :func:`index_sources`)."""
    lines = stack.constraint_lines() if constraints else stack.requirement_lines()
    for key, line in zip(stack.requirement_keys(), lines):
        try:
            Requirement(line)
        except InvalidRequirement:
            raise InvalidInput(
                f"{recipe.origin}: {key}: {line!r} is not a PEP 508 requirement",
                hint="write it like name==VERSION",
            ) from None
    return lines if constraints else stack.install_lines()


def venv_context(recipe: Recipe, options: RenderOptions, stack: Stack | None = None) -> VenvContext:
    """``stack``: the recipe's stack as the caller computed it (None: from the recipe)."""
    _check_recipe(recipe, options)
    stack = stack_of(recipe) if stack is None else stack
    reqs = _requirement_file_lines(recipe, stack, constraints=False)
    cons = _requirement_file_lines(recipe, stack, constraints=True)
    return VenvContext(
        recipe=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        python=recipe.python,
        torch_requirement=" ".join(shell_quote(r) for r in stack.first_layer()),
        torch_index_args=_torch_index_args(stack, options),
        rest_index_args=_rest_index_args(stack, options),
        requirements=tuple(shell_quote(r) for r in reqs),
        constraints=tuple(shell_quote(r) for r in cons),
        requirement_lines=reqs,
        constraint_lines=cons,
        needs_wheelhouse=options.wheelhouse,
        needs_ca_bundle=options.ca_bundle,
        env=_env_lines(recipe),
        stack=stack,
        index_sources=(sources := index_sources(stack, mirrors_of(options))),
        index_source_words=tuple(shell_quote(line) for line in sources),
        pip_indexed=pip_indexed(stack, mirrors_of(options)),
        default_index=shell_quote(url) if (url := default_index_of(options)) else None,
    )


def _from_platform(platform: str | None) -> str:
    """``FROM --platform=…`` words for ``platform`` ("" when None); refuses an unknown one."""
    if platform is None:
        return ""
    if platform not in PLATFORMS:
        raise InvalidInput(
            f"--platform {platform!r} is not one of {', '.join(PLATFORMS)}",
            hint="--platform linux/amd64 or --platform linux/arm64",
        )
    return f"--platform={platform} "
