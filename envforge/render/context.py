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

import re
from dataclasses import dataclass
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion, Version

from envforge.errors import InvalidInput
from envforge.knowledge import unknowns, variant_of
from envforge.mirror import Mirrors, mirrors_from_env, rewrite
from envforge.patterns import IMAGE_RE
from envforge.recipe.checks import check_renderable
from envforge.recipe.model import Recipe
from envforge.render.quoting import check_one_line, docker_quote, shell_quote

#: Where the virtual environment lives inside images.
VENV_DIR = "/opt/venv"
#: Where the build stage puts the optional build-context files (never copied onward).
STAGING_DIR = "/tmp/envforge"
#: File names at the root of the build context (see the Docker backend).
CONTEXT_WHEELHOUSE = "wheelhouse"
CONTEXT_CA_BUNDLE = "ca-bundle.pem"

IndexForm = Literal["index-url", "extra-index-url"]

#: A PyTorch wheel index (``.../whl/rocm5.2``, ``.../whl/cu126``, ``.../whl/nightly/cpu``):
#: these publish torch under local version labels (``+rocm5.2``).
_PYTORCH_INDEX_RE = re.compile(r"/whl/(?:nightly/|test/)?(?:cpu|cu\d+|rocm\d+(?:\.\d+)*)/?$")

_PIP_FLAGS = "--no-cache-dir --disable-pip-version-check --no-input --progress-bar off"


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
    #: Index mirrors (original, mirror); None: from ``ENVFORGE_INDEX_MIRROR`` at render
    #: time. The rendered output uses the mirror; the recipe (and its hash) do not change.
    mirrors: Mirrors | None = None


#: The defaults: the recipe's base image, torch from its index, the system's CAs.
DEFAULT_OPTIONS = RenderOptions()


# --------------------------------------------------------------------------- decisions


def is_pytorch_index(url: str | None) -> bool:
    """True for a PyTorch wheel index, which names torch builds with a local label."""
    return url is not None and _PYTORCH_INDEX_RE.search(url) is not None


def torch_requirement(recipe: Recipe) -> str:
    """``torch==1.13.1+rocm5.2`` for a PyTorch index, ``torch==2.4.1`` for the default one.

    A version that already carries a local label is used as written.
    """
    version = recipe.torch.version
    if "+" not in version and is_pytorch_index(recipe.torch.index):
        version = f"{version}+{recipe.accelerator}"
    return f"torch=={version}"


def numpy_requirement(recipe: Recipe) -> str:
    return f"numpy{recipe.numpy.strip()}"


def index_form(recipe: Recipe) -> IndexForm | None:
    """How ``torch.index`` is passed to the installer; None without an index.

    The compatibility table says, per wheel variant: torch 1.11-1.13 wheels are published
    on the PyTorch index as an *extra* index with an explicit local version; from 2.0 the
    variant index is *the* index (matrix 2a). For a variant the table does not know (or
    an index that is not a PyTorch one) the same rule is applied to the version.
    """
    if recipe.torch.index is None:
        return None
    if is_pytorch_index(recipe.torch.index):
        variant = variant_of(recipe)
        if variant is not None:
            return variant.form
    base = recipe.torch.version.split("+", 1)[0]
    try:
        version = Version(base)
    except InvalidVersion:
        raise InvalidInput(
            f"{recipe.origin}: torch.version: {recipe.torch.version!r} is not a version",
            hint='write it like "2.4.1"',
        ) from None
    return "extra-index-url" if version < Version("2.0") else "index-url"


# --------------------------------------------------------------------------- contexts


@dataclass(frozen=True)
class Label:
    key: str
    #: Already quoted for a Dockerfile.
    value: str


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
    python: str
    python_bin: str
    #: Shell words (already quoted) for apt package names.
    python_apt: str
    venv_apt: str
    venv_dir: str
    staging_dir: str
    copy_ca_bundle: str | None
    copy_wheelhouse: str | None
    pip_cert_env: str | None
    pip: str
    #: Shell-quoted installer option words for the torch step and for the rest.
    torch_source: tuple[str, ...]
    rest_source: tuple[str, ...]
    torch_requirement: str
    #: Shell-quoted requirement words for the second install step.
    requirements: tuple[str, ...]
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


def torch_index_url(recipe: Recipe, options: RenderOptions = DEFAULT_OPTIONS) -> str | None:
    """The URL the installer is given for ``torch.index``: on its mirror when
    ``ENVFORGE_INDEX_MIRROR`` (or ``options.mirrors``) names one."""
    if recipe.torch.index is None:
        return None
    mirrors = mirrors_from_env() if options.mirrors is None else options.mirrors
    return rewrite(recipe.torch.index, mirrors)


def _torch_index_args(recipe: Recipe, options: RenderOptions) -> tuple[str, ...]:
    form = index_form(recipe)
    url = torch_index_url(recipe, options)
    if form is None or url is None:
        return ()
    return (f"--{form}", shell_quote(url))


def _rest_index_args(recipe: Recipe, options: RenderOptions) -> tuple[str, ...]:
    """The rest comes from the default index; the torch index is an extra one so that
    companion packages with local labels (``torchvision==0.14.1+rocm5.2``) resolve."""
    url = torch_index_url(recipe, options)
    if url is None:
        return ()
    return ("--extra-index-url", shell_quote(url))


def requirement_lines(recipe: Recipe) -> tuple[str, ...]:
    """torch, the NumPy bound, then the recipe's packages, in that order."""
    return (torch_requirement(recipe), numpy_requirement(recipe), *recipe.packages)


def constraint_lines(recipe: Recipe) -> tuple[str, ...]:
    """What nothing else may move: the torch build and the NumPy bound."""
    return (torch_requirement(recipe), numpy_requirement(recipe))


def _labels(recipe: Recipe, base_image: str) -> tuple[Label, ...]:
    torch_version = recipe.torch.version.split("+", 1)[0]
    pairs: list[tuple[str, str | None]] = [
        ("org.opencontainers.image.title", f"envforge/{recipe.name}"),
        ("org.opencontainers.image.description", recipe.description),
        ("org.opencontainers.image.version", recipe.stack_tag),
        ("org.opencontainers.image.vendor", "envforge"),
        ("org.opencontainers.image.base.name", base_image),
        ("io.envforge.recipe", recipe.name),
        ("io.envforge.recipe-hash", recipe.hash),
        ("io.envforge.stack-tag", recipe.stack_tag),
        ("io.envforge.python", recipe.python),
        ("io.envforge.torch", torch_version),
        ("io.envforge.torch-requirement", torch_requirement(recipe)),
        ("io.envforge.accelerator", recipe.accelerator),
        ("io.envforge.rocm", recipe.rocm),
        ("io.envforge.cuda", recipe.cuda),
        ("io.envforge.numpy", recipe.numpy),
        ("io.envforge.gpu-vendor", recipe.gpu.vendor),
        ("io.envforge.gpu-arch", recipe.gpu.arch),
        (
            "io.envforge.gpu-products",
            ", ".join(recipe.gpu.products) if recipe.gpu.products else None,
        ),
        # Only a stack the compatibility table cannot decide is labelled (certification
        # decides it); known stacks keep their labels as they were.
        ("io.envforge.confidence", "uncertain" if _uncertain(recipe) else None),
    ]
    return tuple(Label(key, docker_quote(value)) for key, value in pairs if value is not None)


def _uncertain(recipe: Recipe) -> bool:
    """The compatibility table has no row for part of the stack (see knowledge.rules)."""
    try:
        return bool(unknowns(recipe))
    except (InvalidSpecifier, InvalidVersion):
        return False  # not a loaded recipe: its values were not checked by the loader


def docker_context(recipe: Recipe, options: RenderOptions) -> DockerContext:
    base_image = _check_recipe(recipe, options)
    py = f"python{recipe.python}"
    pip = f"{VENV_DIR}/bin/python -m pip install {_PIP_FLAGS}"
    wheelhouse = f"{STAGING_DIR}/{CONTEXT_WHEELHOUSE}"
    ca_bundle = f"{STAGING_DIR}/{CONTEXT_CA_BUNDLE}"
    if options.wheelhouse:
        torch_source: tuple[str, ...] = ("--find-links", wheelhouse)
        rest_source: tuple[str, ...] = ("--find-links", wheelhouse)
    else:
        torch_source = _torch_index_args(recipe, options)
        rest_source = _rest_index_args(recipe, options)
    return DockerContext(
        recipe=recipe.name,
        stack_tag=recipe.stack_tag,
        base_image=base_image,
        python=recipe.python,
        python_bin=py,
        python_apt=py,
        venv_apt=f"{py}-venv",
        venv_dir=VENV_DIR,
        staging_dir=STAGING_DIR,
        copy_ca_bundle=f"{CONTEXT_CA_BUNDLE} {ca_bundle}" if options.ca_bundle else None,
        copy_wheelhouse=f"{CONTEXT_WHEELHOUSE}/ {wheelhouse}/" if options.wheelhouse else None,
        pip_cert_env=ca_bundle if options.ca_bundle else None,
        pip=pip,
        torch_source=torch_source,
        rest_source=rest_source,
        torch_requirement=shell_quote(torch_requirement(recipe)),
        requirements=tuple(shell_quote(r) for r in requirement_lines(recipe)),
        env=_env_lines(recipe),
        labels=_labels(recipe, base_image),
    )


def _requirement_file_lines(recipe: Recipe, lines: tuple[str, ...]) -> tuple[str, ...]:
    """Lines for a requirements file, which has its own option syntax (``-r``, ``--hash``):
    only plain PEP 508 requirements can be written there."""
    keys = ("torch.version", "numpy", *(f"packages[{i}]" for i in range(len(recipe.packages))))
    for key, line in zip(keys, lines):
        try:
            Requirement(line)
        except InvalidRequirement:
            raise InvalidInput(
                f"{recipe.origin}: {key}: {line!r} is not a PEP 508 requirement",
                hint="write it like name==VERSION",
            ) from None
    return lines


def venv_context(recipe: Recipe, options: RenderOptions) -> VenvContext:
    _check_recipe(recipe, options)
    reqs = _requirement_file_lines(recipe, requirement_lines(recipe))
    cons = _requirement_file_lines(recipe, constraint_lines(recipe))
    return VenvContext(
        recipe=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        python=recipe.python,
        torch_requirement=shell_quote(torch_requirement(recipe)),
        torch_index_args=_torch_index_args(recipe, options),
        rest_index_args=_rest_index_args(recipe, options),
        requirements=tuple(shell_quote(r) for r in reqs),
        constraints=tuple(shell_quote(r) for r in cons),
        requirement_lines=reqs,
        constraint_lines=cons,
        needs_wheelhouse=options.wheelhouse,
        needs_ca_bundle=options.ca_bundle,
        env=_env_lines(recipe),
    )
