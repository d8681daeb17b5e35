"""Where ``envforge shell`` (and a rendered devcontainer) keeps kernel caches (pure).

MIOpen, TorchInductor, Triton and torch's kernel cache live in named volumes, one set per
user, recipe and stack; the env vars below point the libraries at them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Fixed paths inside a shell container.
SHELL_WORKDIR = "/workspace"
SHELL_HOME = "/home/envforge"
CACHE_ROOT = "/var/cache/envforge"


@dataclass(frozen=True)
class CacheVolume:
    name: str
    mount: str
    subdirs: tuple[str, ...]


def cache_volumes(recipe_name: str, stack_tag: str, uid: int) -> tuple[CacheVolume, ...]:
    """Named volumes that keep kernel caches between shells: one set per user, recipe, stack.

    The user's uid is part of every name: MIOpen's databases break when users share them
    (ROCm/MIOpen#1878), and one user's Triton / TorchInductor kernels are no business of
    another's, so two users of one host never mount the same cache volume.
    """
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"envforge-{recipe_name}-{stack_tag}-u{uid}")
    return (
        CacheVolume(f"{stem}-miopen", f"{CACHE_ROOT}/miopen", ("db", "cache")),
        CacheVolume(f"{stem}-torch", f"{CACHE_ROOT}/torch", ("inductor", "triton", "kernels")),
    )


def cache_env() -> dict[str, str]:
    """Env vars pointing MIOpen, TorchInductor, Triton and torch's kernel cache at the volumes."""
    return {
        "MIOPEN_USER_DB_PATH": f"{CACHE_ROOT}/miopen/db",
        "MIOPEN_CUSTOM_CACHE_DIR": f"{CACHE_ROOT}/miopen/cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_ROOT}/torch/inductor",
        "TRITON_CACHE_DIR": f"{CACHE_ROOT}/torch/triton",
        "PYTORCH_KERNEL_CACHE_PATH": f"{CACHE_ROOT}/torch/kernels",
    }
