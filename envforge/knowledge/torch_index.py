"""How a recipe's torch comes from its index: a PyTorch wheel index (whose builds carry a
local label), the torch pin and whether the index is *the* index or an extra one."""

from __future__ import annotations

import re
from typing import Literal

from packaging.version import InvalidVersion, Version

from envforge.errors import InvalidInput
from envforge.knowledge import variant_of
from envforge.knowledge.table import CompatTable
from envforge.recipe.model import Recipe

IndexForm = Literal["index-url", "extra-index-url"]

#: A PyTorch wheel index (``.../whl/rocm5.2``, ``.../whl/cu126``, ``.../whl/nightly/cpu``):
#: these publish torch under local version labels (``+rocm5.2``).
_PYTORCH_INDEX_RE = re.compile(r"/whl/(?:nightly/|test/)?(?:cpu|cu\d+|rocm\d+(?:\.\d+)*)/?$")


def is_pytorch_index(url: str | None) -> bool:
    """True for a PyTorch wheel index, which names torch builds with a local label."""
    return url is not None and _PYTORCH_INDEX_RE.search(url) is not None


def local_tag(recipe: Recipe) -> str | None:
    """The local version label the stack's torch family carries (``cpu``, ``rocm5.2``):
    the one written in ``torch.version``, else the variant's on a PyTorch index."""
    version = recipe.torch.version
    if "+" in version:
        return version.split("+", 1)[1]
    return recipe.accelerator if is_pytorch_index(recipe.torch.index) else None


def torch_requirement(recipe: Recipe) -> str:
    """``torch==1.13.1+rocm5.2`` for a PyTorch index, ``torch==2.4.1`` for the default one.

    A version that already carries a local label is used as written.
    """
    version = recipe.torch.version
    if "+" not in version and is_pytorch_index(recipe.torch.index):
        version = f"{version}+{recipe.accelerator}"
    return f"torch=={version}"


def index_form(recipe: Recipe, table: CompatTable | None = None) -> IndexForm | None:
    """How ``torch.index`` is passed to the installer; None without an index.

    The compatibility table says, per wheel variant: torch 1.11-1.13 wheels are published
    on the PyTorch index as an *extra* index with an explicit local version; from 2.0 the
    variant index is *the* index (matrix 2a). For a variant the table does not know (or
    an index that is not a PyTorch one) the same rule is applied to the version.
    """
    if recipe.torch.index is None:
        return None
    if is_pytorch_index(recipe.torch.index):
        variant = variant_of(recipe, table)
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
