"""The Docker backend's own flags, light to import: every command's options are built
from them (``envforge shell --backend venv`` never imports the Docker backend)."""

from __future__ import annotations

from envforge.backends.base import BackendOption
from envforge.knowledge.platforms import PLATFORMS

#: The flags only this backend has (``envforge build`` / ``shell`` / ``certify``).
CLI_OPTIONS: tuple[BackendOption, ...] = (
    BackendOption(
        "--tag", "tags", "Also tag the certified image.", ("build",), metavar="REF", multiple=True
    ),
    BackendOption(
        "--base-image",
        "base_image",
        "Build FROM this image instead of the recipe's.",
        ("build",),
        metavar="REF",
    ),
    BackendOption(
        "--base-image-mirror",
        "base_image_mirror",
        "Pull the recipe's Docker Hub base image through this registry prefix "
        "(HOST[:PORT][/PATH]; default: ENVFORGE_BASE_IMAGE_MIRROR, the settings).",
        ("build",),
        metavar="PREFIX",
    ),
    BackendOption(
        "--no-certify",
        "no_certify",
        "Build only; no probe, no certified tag.",
        ("build",),
        is_flag=True,
    ),
    BackendOption(
        "--no-cache", "no_cache", "Do not reuse cached layers.", ("build",), is_flag=True
    ),
    BackendOption(
        "--builder",
        "builder",
        "Image builder (default: ENVFORGE_BUILDER, else auto: BuildKit when available).",
        ("build",),
        choices=("auto", "buildkit", "classic"),
    ),
    BackendOption(
        "--platform",
        "platform",
        "Build the image for this platform (the table's "
        "row for it must accept the recipe; default: checked for this host's, "
        "built for the engine's own).",
        ("build",),
        choices=PLATFORMS,
    ),
    BackendOption(
        "--image",
        "image",
        "Run this image instead of the certified one.",
        ("shell",),
        metavar="REF",
    ),
    BackendOption(
        "--shm-size",
        "shm_size",
        "A private /dev/shm of SIZE (e.g. 16g). Default: GPU "
        "containers share the host's IPC namespace, others get 8g (Docker's 64 MB "
        "/dev/shm breaks DataLoader workers).",
        ("build", "certify", "shell"),
        metavar="SIZE",
        kind="size",
    ),
)


def cli_options() -> tuple[BackendOption, ...]:
    """The flags only this backend has."""
    return CLI_OPTIONS
