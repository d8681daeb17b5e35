"""The image's labels: what the recipe and stack are, and what the build used."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion

from envforge.core.mirror import Mirrors
from envforge.knowledge import unknowns
from envforge.recipe.model import Recipe
from envforge.render.quoting import docker_quote
from envforge.stack import Stack

_USERINFO = re.compile(r"://[^/\s@]*@")


@dataclass(frozen=True)
class Label:
    key: str
    #: Already quoted for a Dockerfile.
    value: str


def recipe_labels(recipe: Recipe, stack: Stack, base_image: str) -> tuple[Label, ...]:
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
        ("io.envforge.torch", stack.torch_version),
        ("io.envforge.torch-requirement", stack.torch),
        ("io.envforge.accelerator", stack.accelerator),
        ("io.envforge.rocm", recipe.rocm),
        ("io.envforge.cuda", recipe.cuda),
        ("io.envforge.numpy", stack.numpy_bound),
        ("io.envforge.gpu-vendor", recipe.gpu.vendor),
        ("io.envforge.gpu-arch", recipe.gpu.arch),
        (
            "io.envforge.gpu-products",
            ", ".join(recipe.gpu.products) if recipe.gpu.products else None,
        ),
        # Only a stack the compatibility table cannot decide is labelled (certification
        # decides it); known stacks keep their labels as they were.
        ("io.envforge.confidence", "uncertain" if uncertain(recipe) else None),
    ]
    return tuple(Label(key, docker_quote(value)) for key, value in pairs if value is not None)


def uncertain(recipe: Recipe) -> bool:
    """The compatibility table has no row for part of the stack (see knowledge.rules)."""
    try:
        return bool(unknowns(recipe))
    except (InvalidSpecifier, InvalidVersion):
        return False  # not a loaded recipe: its values were not checked by the loader


def recorded(
    provenance: tuple[tuple[str, str], ...], default_index: str | None, mirrors: Mirrors
) -> tuple[Label, ...]:
    """What the build used, recorded: ``provenance`` (digests, the base-image mirror,
    never a host path) and the index mirrors."""
    pairs = [*provenance]
    if default_index is not None or mirrors:
        index = [default_index] if default_index else []
        index += [f"{o}={m}" for o, m in mirrors]
        # a mirror's credentials (https://user:token@host) never reach the final image
        pairs.append(("io.envforge.index-mirror", _USERINFO.sub("://", " ".join(index))))
    return tuple(Label(key, docker_quote(value)) for key, value in pairs)
