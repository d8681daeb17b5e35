"""The base-image mirror and the default index's mirror: each from flag, environment,
project, user file or default; shown by ``envforge config``; and where each appears in
what is rendered and built (and nowhere else), recorded with the environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envforge.backends import docker
from envforge.backends.docker import images, pipeline
from envforge.backends.docker.provenance import build_provenance, wheelhouse_digest
from envforge.backends.venv.layout import VenvOptions, remembered
from envforge.cli import cli, main
from envforge.core.mirror import (
    check_registry_prefix,
    index_mirror_from_env,
    mirrored_image,
    parse_index_mirror,
)
from envforge.core.settings import resolve
from envforge.errors import InvalidInput
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, plan_venv, render_dockerfile
from tests.helpers.fake_engine import FakeEngine, image_attrs
from tests.helpers.recipes import make_recipe

MIRROR = "http://127.0.0.1:3141/root/pypi/+simple"
PREFIX = "mirror.example:5000"


@pytest.fixture
def cuda() -> Recipe:
    recipe = Catalogue.default().load("sm_90")
    assert recipe.torch.index is not None
    return recipe


@pytest.fixture(autouse=True)
def no_mirrors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ENVFORGE_INDEX_MIRROR", "ENVFORGE_BASE_IMAGE_MIRROR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ENVFORGE_CONFIG", raising=False)
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))


# --------------------------------------------------------------------------- parsing


def test_a_bare_url_is_the_default_index_mirror_pairs_map_the_rest() -> None:
    parsed = parse_index_mirror(f"{MIRROR} https://a.example/whl=http://127.0.0.1:8/whl")
    assert parsed.default == MIRROR
    assert parsed.pairs == (("https://a.example/whl", "http://127.0.0.1:8/whl"),)
    assert parse_index_mirror(MIRROR).pairs == ()
    with pytest.raises(InvalidInput, match="two default index mirrors"):
        parse_index_mirror(f"{MIRROR} http://127.0.0.1:9/simple")
    with pytest.raises(InvalidInput, match=r"^--index-mirror: 'nonsense'"):
        parse_index_mirror("nonsense", setting="--index-mirror")


@pytest.mark.parametrize(
    ("image", "mirrored"),
    [
        ("ubuntu:22.04", f"{PREFIX}/library/ubuntu:22.04"),
        ("rocm/dev-ubuntu-22.04:6.2", f"{PREFIX}/rocm/dev-ubuntu-22.04:6.2"),
        ("ubuntu@sha256:" + "a" * 64, f"{PREFIX}/library/ubuntu@sha256:" + "a" * 64),
        ("registry.example/nvidia/cuda:12.4", "registry.example/nvidia/cuda:12.4"),
        ("localhost:5000/base:1", "localhost:5000/base:1"),
        ("localhost/base:1", "localhost/base:1"),
    ],
)
def test_only_a_docker_hub_base_image_goes_through_the_mirror(image: str, mirrored: str) -> None:
    assert mirrored_image(image, PREFIX) == mirrored
    assert mirrored_image(image, None) == image


def test_a_registry_prefix_is_checked() -> None:
    assert check_registry_prefix("mirror.example:5000/hub/", "x") == "mirror.example:5000/hub"
    assert check_registry_prefix("localhost", "x") == "localhost"
    for bad in ("ubuntu", "http://mirror.example", "a b.example", "m.example/Up"):
        with pytest.raises(InvalidInput, match=r"^where: .* is not a registry prefix"):
            check_registry_prefix(bad, "where")


# --------------------------------------------------------------------------- sources


@pytest.mark.parametrize("key", ["index_mirror", "base_image_mirror"])
def test_each_source_in_order(key: str, tmp_path: Path) -> None:
    env_name = {"index_mirror": "ENVFORGE_INDEX_MIRROR"}.get(key, "ENVFORGE_BASE_IMAGE_MIRROR")
    user = tmp_path / "config.toml"
    user.write_text(f'{key} = "user"\n', encoding="utf-8")
    env = {"ENVFORGE_CONFIG": str(user)}
    project = {key: "project"}
    pyproject = tmp_path / "pyproject.toml"

    def found(flags: dict[str, Any], environ: dict[str, str], proj: Any) -> tuple[Any, str]:
        value = resolve(
            flags, environ=environ, project=proj, project_file=pyproject, keys=(key,)
        ).get(key)
        return value.value, value.source

    assert found({key: "flag"}, {**env, env_name: "env"}, project) == ("flag", "flag")
    assert found({}, {**env, env_name: "env"}, project) == ("env", "environment")
    assert found({}, env, project) == ("project", "project")
    assert found({}, env, None) == ("user", "user file")
    assert found({}, {"XDG_CONFIG_HOME": str(tmp_path / "empty")}, None) == (None, "default")


def test_config_shows_the_mirrors_with_their_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_BASE_IMAGE_MIRROR", PREFIX)
    user = tmp_path / "config.toml"
    user.write_text(f'index_mirror = "{MIRROR}"\n', encoding="utf-8")
    monkeypatch.setenv("ENVFORGE_CONFIG", str(user))
    done = CliRunner().invoke(cli, ["config", "--json"])
    assert done.exit_code == 0, done.output
    rows = {row["key"]: row for row in json.loads(done.output)["settings"]}
    assert rows["base_image_mirror"]["value"] == PREFIX
    assert rows["base_image_mirror"]["source"] == "environment"
    assert rows["base_image_mirror"]["origin"] == "$ENVFORGE_BASE_IMAGE_MIRROR"
    assert rows["index_mirror"] == {
        "key": "index_mirror",
        "value": MIRROR,
        "source": "user file",
        "origin": str(user),
    }


def test_config_refuses_a_bad_prefix_naming_where_it_was_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "config.toml"
    user.write_text('base_image_mirror = "not a prefix"\n', encoding="utf-8")
    monkeypatch.setenv("ENVFORGE_CONFIG", str(user))
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert f"{user}: base_image_mirror: 'not a prefix' is not a registry prefix" in err


# --------------------------------------------------------------------------- render


def test_the_default_index_mirror_is_the_build_stages_and_never_the_torch_index(
    cuda: Recipe,
) -> None:
    text = render_dockerfile(cuda, RenderOptions(mirrors=(), default_index=MIRROR))
    plain = render_dockerfile(cuda, RenderOptions(mirrors=()))
    assert f'UV_INDEX_URL="{MIRROR}"' in text
    assert f'PIP_INDEX_URL="{MIRROR}"' in text
    # in the build stage's ENV and the label that records it: nowhere else
    assert text.count(MIRROR) == 3
    assert f'io.envforge.index-mirror="{MIRROR}"' in text
    assert cuda.torch.index is not None
    assert text.count(cuda.torch.index) == plain.count(cuda.torch.index) > 0
    assert "UV_INDEX_URL" not in plain
    assert "PIP_INDEX_URL" not in plain
    assert "io.envforge.index-mirror" not in plain
    final = text.rsplit("\nFROM ", 1)[1]  # the final stage: no installer settings
    assert "UV_INDEX_URL" not in final.split("LABEL", 1)[0]


def test_a_pair_maps_the_torch_index_beside_the_default_mirror(cuda: Recipe) -> None:
    assert cuda.torch.index is not None
    original = cuda.torch.index.rsplit("/", 1)[0]
    mirrored = "http://127.0.0.1:8/torch"
    parsed = parse_index_mirror(f"{MIRROR} {original}={mirrored}")
    text = render_dockerfile(
        cuda, RenderOptions(mirrors=parsed.pairs, default_index=parsed.default)
    )
    assert cuda.torch.index not in text.split("LABEL", 1)[0]
    assert cuda.torch.index.replace(original, mirrored) in text


def test_the_venv_plan_exports_the_default_index_mirror(cuda: Recipe) -> None:
    setup = plan_venv(cuda, RenderOptions(mirrors=(), default_index=MIRROR)).setup_script
    assert f"export UV_INDEX_URL={MIRROR} PIP_INDEX_URL={MIRROR}" in setup
    assert setup.count(MIRROR) == 2
    assert cuda.torch.index is not None
    assert cuda.torch.index in setup
    plain = plan_venv(cuda, RenderOptions(mirrors=())).setup_script
    assert "INDEX_URL" not in plain


def test_the_environment_gives_the_default_index_mirror_at_render(
    cuda: Recipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_INDEX_MIRROR", MIRROR)
    assert index_mirror_from_env().default == MIRROR
    assert f'UV_INDEX_URL="{MIRROR}"' in render_dockerfile(cuda)


# --------------------------------------------------------------------------- the build


def _engine() -> FakeEngine:
    engine = FakeEngine()
    candidate = "sha256:" + "c" * 64
    engine.api.build_chunks = [
        {"stream": "Step 1/1 : FROM base\n"},
        {"aux": {"ID": candidate}},
    ]
    engine.images.add(image_attrs(candidate))
    return engine


def _built(monkeypatch: pytest.MonkeyPatch, options: docker.DockerOptions) -> tuple[str, list[str]]:
    """The Dockerfile a fake build was given, and what it said."""
    seen: list[str] = []
    real = images.assemble_context

    def capture(context: Path, dockerfile: str, **kwargs: Any) -> None:
        seen.append(dockerfile)
        real(context, dockerfile, **kwargs)

    monkeypatch.setattr(pipeline, "assemble_context", capture)
    said: list[str] = []
    options = docker.DockerOptions(
        **{**options.__dict__, "certify": False, "builder": "classic", "say": said.append}
    )
    docker.build(make_recipe(), options, client=_engine())
    return seen[0], said


def test_the_build_pulls_the_recipes_base_image_through_the_mirror(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recipe = make_recipe()
    text, said = _built(monkeypatch, docker.DockerOptions(base_image_mirror=PREFIX))
    mirrored = mirrored_image(recipe.base_image, PREFIX)
    assert mirrored != recipe.base_image
    assert f"FROM {mirrored} AS torch" in text
    assert f"\nFROM {mirrored}\n" in text  # the final stage too
    assert recipe.base_image not in text.replace(mirrored, "")
    assert f'io.envforge.base-image-mirror="{PREFIX}"' in text
    assert said[0].endswith(f"from {mirrored}")
    # --base-image is used as given: the mirror rewrites only the recipe's image
    text, _ = _built(
        monkeypatch, docker.DockerOptions(base_image_mirror=PREFIX, base_image="local/b:1")
    )
    assert PREFIX not in text
    assert "FROM local/b:1 AS torch" in text


def test_the_image_records_wheelhouse_and_ca_bundle_by_digest_never_by_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wheels = tmp_path / "home-of-me" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "torch-2.0-py3-none-any.whl").write_bytes(b"w" * 10)
    bundle = tmp_path / "home-of-me" / "proxy.pem"
    bundle.write_text("pem\n")
    text, _ = _built(
        monkeypatch,
        docker.DockerOptions(wheelhouse=wheels, ca_bundle=bundle, index_mirror=MIRROR),
    )
    labels = text.split("\nLABEL ", 1)[1]
    assert f'io.envforge.wheelhouse="{wheelhouse_digest(wheels)}"' in labels
    assert 'io.envforge.ca-bundle="sha256:' in labels
    assert f'io.envforge.index-mirror="{MIRROR}"' in labels
    assert "home-of-me" not in text
    assert "base-image-mirror" not in text


def test_provenance_changes_with_the_wheels(tmp_path: Path) -> None:
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"1")
    before = wheelhouse_digest(tmp_path)
    (tmp_path / "b-1-py3-none-any.whl").write_bytes(b"2")
    assert wheelhouse_digest(tmp_path) != before
    assert build_provenance(None, None, None) == ()


# --------------------------------------------------------------------------- venv reuse


def test_a_venv_rebuild_reuses_the_index_mirror_its_last_build_used(tmp_path: Path) -> None:
    said: list[str] = []
    built = {"index_mirror": MIRROR}
    again = remembered(VenvOptions(say=said.append), built, tmp_path)
    assert again.index_mirror == MIRROR
    assert said == [
        f"--index-mirror {MIRROR}: what the last build of {tmp_path} used (give the flag to "
        "change it)"
    ]
    given = remembered(VenvOptions(index_mirror=""), built, tmp_path)
    assert given.index_mirror == ""  # given (even as none) wins over the record


def test_a_mirrors_credentials_are_not_recorded(cuda: Recipe) -> None:
    secret = "http://me:s3cret@127.0.0.1:3141/simple"
    text = render_dockerfile(cuda, RenderOptions(mirrors=(), default_index=secret))
    labels = text.split("\nLABEL ", 1)[1]
    assert 'io.envforge.index-mirror="http://127.0.0.1:3141/simple"' in labels
    assert "s3cret" not in labels
