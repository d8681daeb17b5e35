"""``envforge render --format devcontainer``: a devcontainer.json that runs like ``shell``.

The container gets what ``envforge shell`` gives (pure; the CLI passes this host's device
flags in): the device flags (AMD ``runArgs``: ``--device``, ``--group-add``,
``--security-opt``; NVIDIA ``hostRequirements.gpu`` and ``runArgs`` ``--gpus all``), host IPC
(or ``--shm-size``), the host network, the recipe's env and the cache env, the per-user cache
volumes, the workspace at /workspace. It uses the certified image (``image``), or builds
the rendered Dockerfile next to it (``dockerfile``).

Cache volumes are per user as in ``shell``: the volume names carry
``${localEnv:USER}`` (devcontainer variable substitution), so one devcontainer.json
committed to a repository never makes two users share a MIOpen database
(ROCm/MIOpen#1878).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from envforge.container.caches import CACHE_ROOT, SHELL_WORKDIR, cache_env
from envforge.container.devices import DeviceFlags
from envforge.container.refs import certified_ref
from envforge.recipe.model import Recipe

Source = Literal["image", "dockerfile"]
SOURCES: tuple[Source, ...] = ("image", "dockerfile")

#: The cache volumes of ``shell`` (same mounts and subfolders), named per user.
_CACHES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("miopen", f"{CACHE_ROOT}/miopen", ("db", "cache")),
    ("torch", f"{CACHE_ROOT}/torch", ("inductor", "triton", "kernels")),
)


@dataclass(frozen=True)
class Devcontainer:
    """The files of one recipe's ``.devcontainer/`` folder (relative path -> text)."""

    files: tuple[tuple[str, str], ...]


def generic_flags(vendor: str) -> DeviceFlags:
    """What a recipe's vendor needs on a host envforge has not seen (names, not gids)."""
    if vendor == "amd":
        return DeviceFlags(
            vendor="amd",
            devices=("/dev/kfd", "/dev/dri"),
            group_add=("video", "render"),
            security_opt=("seccomp=unconfined",),
            ipc_mode="host",
            path="raw",
        )
    if vendor == "nvidia":
        return DeviceFlags(vendor="nvidia", gpu_request=True, ipc_mode="host", path="request")
    return DeviceFlags()


def _volume_stem(recipe: Recipe) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"envforge-{recipe.name}-{recipe.stack_tag}")


def devcontainer_json(
    recipe: Recipe,
    flags: DeviceFlags,
    *,
    source: Source = "image",
    image: str | None = None,
) -> dict[str, Any]:
    """The devcontainer.json document (a dict; :func:`render_devcontainer` serialises it)."""
    doc: dict[str, Any] = {"name": f"envforge {recipe.name} ({recipe.stack_tag})"}
    if source == "image":
        doc["image"] = image or certified_ref(recipe.name, recipe.stack_tag)
    else:
        doc["build"] = {"dockerfile": "Dockerfile", "context": "."}
    doc["runArgs"] = ["--network=host", *flags.cli_args()]
    if flags.vendor == "nvidia":
        doc["hostRequirements"] = {"gpu": True}
    env: dict[str, str] = dict(cache_env())
    env.update(recipe.env_map)
    env["NPROC_PER_NODE"] = str(max(flags.gpu_count, 1))
    doc["containerEnv"] = env
    stem = _volume_stem(recipe)
    doc["mounts"] = [
        {"type": "volume", "source": f"{stem}-${{localEnv:USER}}-{kind}", "target": target}
        for kind, target, _subdirs in _CACHES
    ]
    dirs = [f"{target}/{sub}" for _kind, target, subs in _CACHES for sub in subs]
    doc["postCreateCommand"] = ["mkdir", "-p", *dirs]
    # A string the docker CLI reads as CSV once the folder is substituted: the source
    # field is quoted, so a comma or '=' in the folder's path stays in the path (unquoted,
    # a folder named "q,consistency=cached" mounted its sibling "q").
    doc["workspaceMount"] = f'type=bind,"source=${{localWorkspaceFolder}}",target={SHELL_WORKDIR}'
    doc["workspaceFolder"] = SHELL_WORKDIR
    doc["updateRemoteUserUID"] = True
    return doc


def render_devcontainer(
    recipe: Recipe,
    flags: DeviceFlags,
    *,
    source: Source = "image",
    image: str | None = None,
    dockerfile: str | None = None,
) -> Devcontainer:
    """``devcontainer.json`` (and, for ``source="dockerfile"``, the rendered Dockerfile)."""
    doc = devcontainer_json(recipe, flags, source=source, image=image)
    files = [("devcontainer.json", json.dumps(doc, indent=2) + "\n")]
    if source == "dockerfile":
        if dockerfile is None:
            raise ValueError("source='dockerfile' needs the rendered Dockerfile")
        files.append(("Dockerfile", dockerfile))
    return Devcontainer(tuple(files))
