"""``envforge render --format apptainer``: an Apptainer/Singularity definition file.

HPC sites run Apptainer, not Docker. The definition does not rebuild anything: it
bootstraps from the certified OCI image *by digest* (``Bootstrap: docker``, ``From:
REF@sha256:...``), so the SIF holds exactly the certified content, and adds the recipe's
environment and envforge's labels (``%labels`` is ``KEY VALUE``). Converting envforge's
multi-stage Dockerfile instead loses a stage (Apptainer bootstraps from one image).
The ``%help`` names the GPU flag: ``--nv`` for NVIDIA (the driver's libraries); for AMD
none (``--rocm`` would bind the host's ROCm libraries over the ones certified; the device
files are visible without it). Checked here with a Singularity-recipe parser (spython);
Apptainer itself is not in Debian 12 and was never run on it.
"""

from __future__ import annotations

import re
import shlex

from envforge.errors import InvalidInput
from envforge.recipe.model import Recipe
from envforge.render.templates import render_template

#: A reference pinned by digest: ``NAME@sha256:<64 hex>``.
_PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*@sha256:[0-9a-f]{64}$")
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _one_line(key: str, value: str) -> str:
    if "\n" in value or "\r" in value or "\0" in value:
        raise InvalidInput(
            f"{key}: a value with a line break or NUL cannot be an Apptainer label or variable",
            hint="fix the recipe's value",
        )
    return value


def render_apptainer(recipe: Recipe, image: str) -> str:
    """The definition file for ``recipe`` from ``image`` (which must name a digest)."""
    if not _PINNED.match(image):
        raise InvalidInput(
            f"--image {image!r}: an Apptainer definition bootstraps from the certified image "
            "by digest",
            hint=f"--image REGISTRY/envforge/{recipe.name}@sha256:<digest> (envforge publish "
            "prints the digest)",
        )
    env = []
    for name, value in recipe.env_map.items():
        if not _VAR.match(name):
            raise InvalidInput(f"env {name!r}: not a variable name", hint="fix the recipe")
        env.append((name, shlex.quote(_one_line(name, value))))
    labels = [
        ("io.envforge.recipe", recipe.name),
        ("io.envforge.recipe-hash", recipe.hash),
        ("io.envforge.stack-tag", recipe.stack_tag),
        ("io.envforge.gpu-vendor", recipe.gpu.vendor),
        ("io.envforge.gpu-arch", recipe.gpu.arch or "none"),
        ("io.envforge.source-image", image),
        ("io.envforge.source-digest", image.rsplit("@", 1)[1]),
    ]
    return render_template(
        "apptainer/envforge.def.j2",
        recipe=recipe.name,
        stack_tag=recipe.stack_tag,
        image=image,
        env=env,
        labels=[(k, _one_line(k, v)) for k, v in labels],
        gpu_flag=" --nv" if recipe.gpu.vendor == "nvidia" else "",
    )
