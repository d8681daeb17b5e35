"""Issue 13 without an engine: the lock split, BuildKit's output parsed from a real child
process, and the builder choice."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from envforge.backends import docker
from envforge.backends.docker import images
from envforge.backends.docker.images import BuildKitCli, build_image_buildkit, find_buildkit
from envforge.cli import main
from envforge.errors import BuildFailed, InvalidInput, Unavailable
from envforge.lock import inputs_digest, split_lock
from envforge.recipe.load import load_recipe_file
from tests.helpers import paths
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.recipes import make_recipe

ENGINES = paths.TESTS / "fixtures" / "engines"

ROOT = paths.ROOT
H = "--hash=sha256:" + "0" * 64
LOCK = f"""# envforge-lock: recipe=cpu inputs=sha256:{"1" * 64} python=3.11 platform=x
filelock==4.2.12 \\
    {H}
    # via torch
mpmath==1.3.0 \\
    {H}
    # via sympy
numpy==2.4.6 \\
    {H}
    # via -r requirements.in
six==1.17.0 \\
    {H}
    # via
    #   -r requirements.in
    #   python-dateutil
python-dateutil==2.9.0 \\
    {H}
    # via -r requirements.in
sympy==1.14.0 \\
    {H}
    # via torch
torch==2.13.0+cpu \\
    {H}
    # via -r requirements.in
typing-extensions==4.16.0 \\
    {H}
    # via
    #   torch
    #   python-dateutil
"""


def test_split_lock_puts_torch_and_what_it_needs_first(tmp_path: Path) -> None:
    path = tmp_path / "cpu.lock.txt"
    path.write_text(LOCK)
    split = split_lock(path)
    assert [line.split()[0] for line in split.torch] == [
        "filelock==4.2.12",
        "mpmath==1.3.0",  # via sympy, which torch needs
        "sympy==1.14.0",
        "torch==2.13.0+cpu",
        "typing-extensions==4.16.0",  # needed by torch and by a rest package: torch's
    ]
    assert [line.split()[0] for line in split.rest] == [
        "numpy==2.4.6",
        "six==1.17.0",
        "python-dateutil==2.9.0",
    ]
    assert all(line.endswith(H) for line in (*split.torch, *split.rest))
    assert split.name == "cpu.lock.txt"


def test_split_lock_without_notes_keeps_only_torch_first(tmp_path: Path) -> None:
    path = tmp_path / "x.lock.txt"
    path.write_text(f"numpy==2.4.6 {H}\ntorch==2.13.0+cpu {H}\n")
    split = split_lock(path)
    assert split.torch == (f"torch==2.13.0+cpu {H}",)
    assert split.rest == (f"numpy==2.4.6 {H}",)


def _fake_cli(tmp_path: Path, body: str) -> BuildKitCli:
    script = tmp_path / "docker"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return BuildKitCli((str(script), "build"), (("DOCKER_BUILDKIT", "1"),))


def test_buildkit_output_is_parsed_from_the_cli(tmp_path: Path) -> None:
    cli = _fake_cli(
        tmp_path,
        """
while [ "$1" != --iidfile ]; do shift; done
echo '#1 [internal] load build definition from Dockerfile'
echo '#4 [torch 1/5] FROM docker.io/library/debian:bookworm'
echo '#5 [torch 2/5] RUN set -eu; python3 -c pass'
echo '#5 CACHED'
echo '#6 [stage-2 3/4] COPY --from=torch /opt/venv /opt/venv'
echo '#6 DONE 1.2s'
[ "$DOCKER_BUILDKIT" = 1 ] && printf 'sha256:%064d' 7 > "$2"
""",
    )
    context = tmp_path / "ctx"
    context.mkdir()
    lines: list[str] = []
    result = build_image_buildkit(cli, context, {"PATH": "/usr/bin:/bin"}, on_line=lines.append)
    assert result.image_id == "sha256:" + "0" * 63 + "7"
    assert [(s.number, s.instruction.split()[0], s.cached) for s in result.steps] == [
        (4, "FROM", False),
        (5, "RUN", True),
        (6, "COPY", False),
    ]
    assert [s.number for s in result.rebuilt] == [6]
    assert lines[0].startswith("#1 [internal]")
    assert not (tmp_path / "ctx.iid").exists()


def test_buildkit_failure_names_the_step(tmp_path: Path) -> None:
    cli = _fake_cli(
        tmp_path,
        """
echo '#7 [build 2/2] RUN set -eu; pip install nothing'
echo '#7 ERROR: executor failed running [/bin/sh -c set -eu]: exit code: 1'
echo 'error: failed to solve: exit code: 1' >&2
exit 1
""",
    )
    context = tmp_path / "ctx"
    context.mkdir()
    with pytest.raises(
        BuildFailed, match=r"step RUN set -eu; pip install nothing failed \(BuildKit\)"
    ):
        build_image_buildkit(cli, context, {"PATH": "/usr/bin:/bin"})


def test_builder_choice_is_checked_and_forced_buildkit_needs_one() -> None:
    recipe = make_recipe()
    engine = FakeEngine()  # API 1.38: no BuildKit
    with pytest.raises(InvalidInput, match="ENVFORGE_BUILDER: 'fast' is not a builder"):
        docker.build(
            recipe, docker.DockerOptions(environ={"ENVFORGE_BUILDER": "fast"}), client=engine
        )
    with pytest.raises(Unavailable, match="--builder=buildkit: the engine"):
        docker.build(recipe, docker.DockerOptions(builder="buildkit", environ={}), client=engine)
    assert engine.api.builds == []  # refused before any build


def test_render_uses_a_matching_lock_and_the_builder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe_file = tmp_path / "cpu.yaml"
    shutil.copyfile(ROOT / "recipes" / "cpu.yaml", recipe_file)
    recipe = load_recipe_file(recipe_file)
    body = LOCK.split("\n", 1)[1]
    lock_file = tmp_path / "cpu.lock.txt"
    lock_file.write_text(f"# envforge-lock: recipe=cpu inputs={inputs_digest(recipe)} x\n{body}")
    assert main(["render", str(recipe_file), "--builder", "buildkit"]) == 0
    out = capsys.readouterr().out
    assert "# Installs exactly the lock cpu.lock.txt" in out
    assert "--mount=type=cache,id=envforge-uv" in out
    assert out.count("--require-hashes --no-deps") == 4  # two layers, uv and pip each
    # a lock that no longer matches the recipe is not used
    lock_file.write_text(f"# envforge-lock: recipe=cpu inputs=sha256:{'2' * 64} x\n{body}")
    assert main(["render", str(recipe_file)]) == 0
    out = capsys.readouterr().out
    assert "--require-hashes" not in out
    assert "--mount=" not in out


@pytest.mark.parametrize(
    ("recorded", "podman"),
    [("podman-4.3.1-version.json", True), ("docker-20.10-version.json", False)],
)
def test_podman_builds_never_take_buildkit(
    recorded: str, podman: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Podman's Docker API answers BuildKit's session with 404 (seen in CI: "failed to
    dial gRPC: unable to upgrade to h2c"); auto takes the classic builder there."""
    engine = FakeEngine()
    version = json.loads((ENGINES / recorded).read_text(encoding="utf-8"))
    monkeypatch.setattr(engine.api, "version", lambda: version)
    monkeypatch.setattr(images, "_DEBIAN_CLI", "/nonexistent/docker")  # no CLI: stop there
    found, why = find_buildkit(engine, {"PATH": ""})
    assert found is None
    if podman:
        assert "Podman's Docker API has no BuildKit" in why
    else:
        assert why.startswith("no docker CLI found")  # gets past the engine checks


@pytest.mark.parametrize("platform", ["linux/arm64", None])
def test_buildkit_builds_for_the_platform(tmp_path: Path, platform: str | None) -> None:
    """``build --platform`` reaches the engine: ``docker build --platform`` (none: its own)."""
    cli = _fake_cli(
        tmp_path,
        """
echo "$@" > "$(dirname "$0")/args"
while [ "$1" != --iidfile ]; do shift; done
printf 'sha256:%064d' 7 > "$2"
""",
    )
    context = tmp_path / "ctx"
    context.mkdir()
    build_image_buildkit(cli, context, {"PATH": "/usr/bin:/bin"}, platform=platform)
    args = (tmp_path / "args").read_text()
    assert ("--platform linux/arm64" in args) == (platform is not None)
    assert ("--platform" in args) == (platform is not None)
