"""The wheel variant of a stack's torch: read from its index for a lock, read back from
the lock for a certificate.

* :func:`with_served_variant` (``envforge lock --variants``): where the stack's torch
  index serves PEP 825 variants for its torch version
  (:mod:`envforge.knowledge.variant_index`), the label chosen for the recipe's arch (and
  CUDA version) goes into the stack, and :func:`envforge.lock.write_lock` writes it as a
  ``# envforge-variant:`` comment line (older locks have none; installers skip comments).
* :func:`with_locked_variant` (certification): the stack with the variant its lock
  records, only when the lock's torch line carries the hash of one of that label's wheels
  as the index listed them, i.e. the lock installs that variant. A lock resolved by an
  installer that does not read variants pins the plain wheel: then the certificate
  records no variant, since the probed environment does not hold it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from envforge.core.net import Policy
from envforge.errors import InvalidInput
from envforge.knowledge.index import IndexClient
from envforge.knowledge.variant_index import variant_for
from envforge.knowledge.wheel_variants import WheelVariant, lock_variants, supported_for
from envforge.lock import lock_path, read_lock, split_lock
from envforge.recipe.model import Recipe
from envforge.stack import Stack

#: The package whose variants are read (the torch family's root).
PACKAGE = "torch"


def with_served_variant(
    recipe: Recipe,
    stack: Stack,
    *,
    client: IndexClient | None = None,
    environ: Mapping[str, str] | None = None,
) -> Stack:
    """``stack`` with the variant its torch index serves for the recipe's target; the
    same stack when the index serves no variants for that torch version.
    :class:`InvalidInput` when the stack has no torch index or the recipe no GPU arch
    (nothing to choose a variant for), or when variants are served and none fits."""
    if stack.index is None:
        raise InvalidInput(
            f"recipe {recipe.name}: torch comes from the default index, not an index that "
            "serves wheel variants",
            hint="name the variant index as torch.index, or leave out --variants",
        )
    arch = recipe.gpu.arch
    if not arch:
        raise InvalidInput(
            f"recipe {recipe.name} names no GPU arch to choose a wheel variant for",
            hint="set gpu.arch (sm_XX or gfxNNNN), or leave out --variants",
        )
    if client is None:
        # max_age 0: variants.json "is mutable" (PEP 825), so it is always asked again
        client = IndexClient(policy=Policy.for_urls([stack.index], environ), max_age=0.0)
    found = variant_for(
        client, stack.index, PACKAGE, stack.torch_version, supported_for(arch, recipe.cuda)
    )
    return stack if found is None else replace(stack, variant=found)


def locked_variant(text: str, torch_hashes: tuple[str, ...], version: str) -> WheelVariant | None:
    """The variant a lock's text records for torch ``version`` when the lock's torch
    line (its ``--hash=`` values, ``torch_hashes``) installs one of its wheels."""
    for variant in lock_variants(text):
        if (
            variant.package == PACKAGE
            and variant.version == version
            and set(variant.hashes) & {h.removeprefix("--hash=") for h in torch_hashes}
        ):
            return variant
    return None


def with_locked_variant(recipe: Recipe, stack: Stack) -> Stack:
    """``stack`` with the variant its lock installs (see the module's docstring); the
    same stack without a lock, a variant line, or a torch line carrying its hash."""
    if stack.variant is not None:
        return stack
    try:
        path = lock_path(recipe, stack)
    except InvalidInput:  # a lock the build refuses in its own words; nothing to record
        return stack
    if path is None:
        return stack
    try:
        text = read_lock(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return stack
    torch_line = next(
        (line for line in split_lock(path).torch if line.lower().startswith(PACKAGE + "==")),
        "",
    )
    hashes = tuple(t for t in torch_line.split() if t.startswith("--hash="))
    found = locked_variant(text, hashes, stack.torch_version)
    return stack if found is None else replace(stack, variant=found)
