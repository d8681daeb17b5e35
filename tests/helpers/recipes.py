"""One way to make a recipe in a test: :func:`make_recipe`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from envforge.recipe.model import Gpu, Recipe, Torch

#: The recipe every test starts from: the shipped cpu recipe's shape, no GPU.
BASE = Recipe(
    name="cpu",
    description="test",
    gpu=Gpu(vendor="none", arch=None),
    base_image="debian:bookworm",
    python="3.11",
    torch=Torch(version="2.13.0", index=None),
    numpy=">=1.26",
)


def make_recipe(base: Recipe = BASE, /, **changes: Any) -> Recipe:
    """``base`` (default :data:`BASE`) with ``changes`` (any :class:`Recipe` field), plus
    three shortcuts.

    * ``vendor=`` / ``arch=``: the GPU (``Gpu(vendor, arch)``; either alone keeps the other);
    * ``torch="2.5.1"``: a torch version (with ``index=`` for its index; default none).
    """
    gpu_changes = {k: changes.pop(k) for k in ("vendor", "arch") if k in changes}
    if gpu_changes:
        changes["gpu"] = replace(changes.get("gpu", base.gpu), **gpu_changes)
    index = changes.pop("index", None)
    if isinstance(changes.get("torch"), str):
        changes["torch"] = Torch(version=changes["torch"], index=index)
    return replace(base, **changes)
