"""The real builder reads hostile recipe values back exactly from the rendered Dockerfile.

The final stage's ENV and LABEL instructions of a rendered Dockerfile (bytes as
rendered) are built on ``FROM scratch`` with the engine's classic builder; the image's
config must hold every hostile value unchanged. Complements the unit property test,
whose parser follows the builder's rules: here the builder itself is the judge.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import docker
import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import build_image, inspect_image
from envforge.knowledge.platforms import host_platform
from envforge.recipe.load import load_recipe_file
from envforge.recipe.model import EnvVar
from envforge.render import RenderOptions, render_dockerfile

pytestmark = pytest.mark.engine

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "recipes" / "golden-rocm.yaml"

HOSTILE = [
    '"',
    "'",
    "\\",
    "a\\",
    '\\"',
    "\\\\\\",
    "$(touch /pwned)",
    "`touch /pwned`",
    "${HOME}",
    "$HOME",
    "$",
    "$$",
    '" \\ RUN touch /pwned #',
    '"; touch /pwned; echo "',
    'x\\" LABEL evil=1 \\',
    "\t#tab",
    "&& rm -rf / ;",
    "\u00a0\u2003\u3000 unicode spaces",
    "é😀\U0010fffd",
    " leading and trailing ",
    "=",
    "a=b c=d",
    "--index-url=http://x.invalid/",
    "\\$(x)\\`y`\\${Z}",
    "x" * 4000,
]


def test_builder_reads_hostile_values_back(client: EngineClient, sdk: docker.DockerClient) -> None:
    base = load_recipe_file(FIXTURE)
    env = tuple(
        EnvVar(f"HOSTILE_{i}", value, "test", (), "uncertain") for i, value in enumerate(HOSTILE)
    )
    recipe = dataclasses.replace(
        base,
        description=HOSTILE[12] + HOSTILE[6],
        env=env,
        gpu=dataclasses.replace(base.gpu, products=(HOSTILE[5], HOSTILE[17])),
    )
    text = render_dockerfile(recipe)
    _head, sep, tail = text.partition("COPY --from=build /opt/envforge-rest /opt/venv\n")
    assert sep
    dockerfile = "FROM scratch\n" + tail
    with tempfile.TemporaryDirectory(prefix="envforge-render-engine-") as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        result = build_image(client, context)
    try:
        info = inspect_image(client, result.image_id)
        assert info is not None
        seen = dict(str(item).split("=", 1) for item in info.config["Env"])
        for i, value in enumerate(HOSTILE):
            assert seen[f"HOSTILE_{i}"] == value, i
        labels = info.labels
        assert labels["org.opencontainers.image.description"] == recipe.description
        assert labels["io.envforge.gpu-products"] == f"{HOSTILE[5]}, {HOSTILE[17]}"
        assert labels["io.envforge.recipe-hash"] == recipe.hash
        assert "evil" not in labels
        assert not any(key.startswith("RUN") for key in seen)
    finally:
        sdk.images.remove(result.image_id, force=True)


def test_the_engine_builds_for_the_rendered_platform(
    client: EngineClient, sdk: docker.DockerClient, standin: str
) -> None:
    """``render --platform`` (this host's): the final stage's FROM names the platform and
    the real classic builder, asked for that platform as ``build --platform`` asks, builds
    an image of it (issue 20 §1)."""
    platform = host_platform()
    base = load_recipe_file(FIXTURE)
    text = render_dockerfile(base, RenderOptions(base_image=standin, platform=platform))
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms[-1] == f"FROM --platform={platform} {standin}"
    dockerfile = froms[-1] + "\nLABEL io.envforge.test=platform\n"
    with tempfile.TemporaryDirectory(prefix="envforge-render-platform-") as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        result = build_image(client, context, platform=platform)
    try:
        attrs = sdk.images.get(result.image_id).attrs
        assert f"{attrs['Os']}/{attrs['Architecture']}" == platform
    finally:
        sdk.images.remove(result.image_id, force=True)
