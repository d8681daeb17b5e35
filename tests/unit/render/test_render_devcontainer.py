"""``envforge render --format devcontainer``: what shell passes, valid devcontainer.json.

The schema (tests/fixtures/devcontainer/devcontainer.subset.schema.json) is a hand-written
subset of the Dev Container spec's schema (image and Dockerfile forms); no package on the
index ships the spec's schema file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from envforge.backends.docker.shell import shell_argv, shell_env
from envforge.cli import main
from envforge.container.devices import SharedMemory, device_flags
from envforge.container.refs import certified_ref
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe
from envforge.render.devcontainer import devcontainer_json, generic_flags, render_devcontainer
from tests.helpers import paths

FIXTURES = paths.TESTS / "fixtures"
SCHEMA = json.loads((FIXTURES / "devcontainer" / "devcontainer.subset.schema.json").read_text())
SYSFS = FIXTURES / "sysfs"


@pytest.fixture(autouse=True)
def _no_user_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


def validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft201909Validator.check_schema(SCHEMA)
    jsonschema.Draft201909Validator(SCHEMA).validate(doc)


def recipe(name: str) -> Recipe:
    catalogue = Catalogue.default()
    return catalogue.load(name)


def amd_host_flags() -> Any:
    return device_flags(
        "amd",
        dev_root=SYSFS / "mi300x" / "dev",
        proc_root=SYSFS / "mi300x" / "proc",
        cdi_roots=(),
    )


def test_the_schema_refuses_what_the_spec_refuses() -> None:
    """The fixture schema is not a rubber stamp."""
    good = {"image": "x", "runArgs": ["--ipc=host"], "hostRequirements": {"gpu": True}}
    validate(good)
    for bad in (
        {},  # neither image nor build
        {"image": "x", "build": {"dockerfile": "Dockerfile"}},  # both
        {"image": "x", "runArgs": "--ipc=host"},  # not a list
        {"image": "x", "hostRequirements": {"gpu": "yes"}},
        {"image": "x", "containerEnv": {"A": 1}},
        {"image": "x", "mounts": [{"type": "tmpfs", "target": "/t"}]},
        {"image": "x", "runargs": []},  # misspelt key
        {"build": {"context": "."}},  # no dockerfile
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)


def test_amd_devcontainer_runs_like_shell() -> None:
    r = recipe("gfx942")
    flags = amd_host_flags()
    doc = devcontainer_json(r, flags)
    validate(doc)
    assert doc["image"] == certified_ref(r.name, r.stack_tag)
    # The same device flags, groups, seccomp and IPC as `envforge shell` passes.
    argv = shell_argv(
        image="i",
        command=[],
        name="n",
        env={},
        flags=flags,
        cwd=Path("/w"),
        volumes=(),
        user="0:0",
        tty=False,
    )
    for flag in flags.cli_args():
        assert flag in argv
        assert flag in doc["runArgs"]
    assert "--network=host" in doc["runArgs"]
    assert "--ipc=host" in doc["runArgs"]
    assert "hostRequirements" not in doc
    # The shell's env, less HOME (the devcontainer's user keeps its own).
    env = shell_env(r.env_map, flags)
    del env["HOME"]
    assert doc["containerEnv"] == env
    assert doc["workspaceFolder"] == "/workspace"


def test_nvidia_devcontainer_requires_a_gpu_and_passes_gpus_all() -> None:
    r = recipe("sm_90")
    flags = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        cdi_roots=(),
    )
    doc = devcontainer_json(r, flags)
    validate(doc)
    assert doc["hostRequirements"] == {"gpu": True}
    i = doc["runArgs"].index("--gpus")
    assert doc["runArgs"][i + 1] == "all"
    assert "--ipc=host" in doc["runArgs"]
    sized = devcontainer_json(
        r,
        device_flags(
            "nvidia",
            dev_root=SYSFS / "h100" / "dev",
            proc_root=SYSFS / "h100" / "proc",
            cdi_roots=(),
            shm=SharedMemory.sized("16g"),
        ),
    )
    validate(sized)
    assert "--shm-size" in sized["runArgs"]
    assert "--ipc=host" not in sized["runArgs"]


def test_cache_mounts_are_per_user() -> None:
    r = recipe("gfx942")
    doc = devcontainer_json(r, amd_host_flags())
    sources = [m["source"] for m in doc["mounts"]]
    assert len(sources) == 2
    assert all("${localEnv:USER}" in s for s in sources)
    targets = {m["target"] for m in doc["mounts"]}
    for key in ("MIOPEN_USER_DB_PATH", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        assert any(doc["containerEnv"][key].startswith(t + "/") for t in targets), key


def test_dockerfile_source_writes_the_rendered_dockerfile() -> None:
    r = recipe("cpu")
    out = render_devcontainer(r, generic_flags("none"), source="dockerfile", dockerfile="FROM x\n")
    files = dict(out.files)
    doc = json.loads(files["devcontainer.json"])
    validate(doc)
    assert doc["build"] == {"dockerfile": "Dockerfile", "context": "."}
    assert "image" not in doc
    assert files["Dockerfile"] == "FROM x\n"
    with pytest.raises(ValueError, match="Dockerfile"):
        render_devcontainer(r, generic_flags("none"), source="dockerfile")


def test_generic_flags_for_hosts_without_the_gpu() -> None:
    amd = generic_flags("amd")
    assert amd.devices == ("/dev/kfd", "/dev/dri")
    assert amd.group_add == ("video", "render")
    assert generic_flags("nvidia").gpu_request
    assert generic_flags("none").cli_args() == []


@pytest.mark.parametrize("source", ["image", "dockerfile"])
def test_cli_writes_dir_recipe_devcontainer(tmp_path: Path, source: str) -> None:
    argv = ["render", "gfx942", "--format", "devcontainer", "--devcontainer-from", source]
    assert main([*argv, "-o", str(tmp_path)]) == 0
    folder = tmp_path / "gfx942" / ".devcontainer"
    doc = json.loads((folder / "devcontainer.json").read_text())
    validate(doc)
    assert ("image" in doc) is (source == "image")
    assert (folder / "Dockerfile").is_file() is (source == "dockerfile")
    if source == "dockerfile":
        assert (folder / "Dockerfile").read_text().startswith(("#", "FROM", "ARG", "# syntax"))


def test_cli_all_renders_every_recipe_valid(tmp_path: Path) -> None:
    assert main(["render", "--all", "--format", "devcontainer", "-o", str(tmp_path)]) == 0
    docs = sorted(tmp_path.glob("*/.devcontainer/devcontainer.json"))
    assert len(docs) == len(Catalogue.default().files())
    for path in docs:
        validate(json.loads(path.read_text()))


def test_cli_prints_devcontainer_json_without_o(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["render", "sm_90", "--format", "devcontainer"]) == 0
    doc = json.loads(capsysbinary.readouterr().out)
    validate(doc)
    assert doc["hostRequirements"] == {"gpu": True}
