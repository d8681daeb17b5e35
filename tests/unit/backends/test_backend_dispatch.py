"""Commands reach a backend only through ``BACKENDS[name]``: a third backend, registered
and nothing else, is what build, certify, shell and doctor use, with no CLI edit; and
every backend, the fake one included, keeps the Protocol's contract
(tests/helpers/backend_contract.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

from envforge import backends
from envforge.backends.base import BackendOption, HostCheck, Options
from envforge.backends.docker import certification, pipeline
from envforge.cli import main
from envforge.cli.backend_options import backend_flags
from envforge.fleet.planning import load_plan
from envforge.fleet.task import command
from envforge.host.detect import HostInfo, detect, no_tools
from envforge.host.doctor import Finding
from envforge.recipe.model import Recipe
from tests.helpers import paths
from tests.helpers.backend_contract import Drive, check_doctor, check_shape, run_backend
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.fleet_args import plan_args
from tests.helpers.recipes import make_recipe
from tests.unit.backends.docker.test_docker_pipeline import CERTIFIED, FakeProbe
from tests.unit.backends.docker.test_docker_pipeline import _engine as docker_engine

NO_GPU = paths.TESTS / "fixtures" / "sysfs" / "none"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    backend = FakeBackend()
    monkeypatch.setitem(backends.BACKENDS, "fake", backend)
    return backend


def test_build_routes_to_a_registered_backend_with_one_options_value(
    fake: FakeBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "build",
            "cpu",
            "--backend",
            "fake",
            "--level",
            "quick",
            "--step-timeout",
            "7",
            "--wheelhouse",
            str(tmp_path),
        ]
    )
    assert code == 0
    ((command, recipe, options),) = fake.calls
    assert (command, recipe) == ("build", "cpu")
    assert isinstance(options, Options)
    assert (options.level, options.step_timeout, options.wheelhouse) == ("quick", 7.0, tmp_path)
    assert options.extra == {}
    out, err = capsys.readouterr()
    assert out.strip() == "fake:cpu"  # the result says what is printed
    assert "cpu: ready on the fake backend" in err


def test_certify_and_shell_route_to_it_too(
    fake: FakeBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certify", "cpu", "--backend", "fake", "--json"]) == 0
    assert '"backend": "fake"' in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:  # the command's exit code is passed through
        main(["shell", "cpu", "--backend", "fake", "--", "echo", "hi"])
    assert exited.value.code == 3
    assert [c[0] for c in fake.calls] == ["certify", "run"]
    assert fake.ran == [("cpu", ("echo", "hi"))]


def test_flags_another_backend_declared_are_refused_naming_it(
    fake: FakeBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", "cpu", "--backend", "fake", "--tag", "x:y", "--python", "p"]) == 2
    err = capsys.readouterr().err
    assert "--tag, --python: only for --backend docker or venv" in err
    assert main(["shell", "cpu", "--backend", "fake", "--image", "x", "--", "true"]) == 2
    assert "--image: only for --backend docker" in capsys.readouterr().err
    assert fake.calls == []


def test_a_backend_declares_its_own_flags(fake: FakeBackend) -> None:
    """A command made after registration has the backend's flags; given, they reach it
    in ``Options.extra``, and are refused for the other backends."""
    fake.declared = (
        BackendOption("--fake-depth", "fake_depth", "How deep.", ("build",), metavar="N"),
    )

    @click.command()
    @backend_flags("build")
    def probe(**flags: object) -> None:
        pass

    assert "--fake-depth" in {opt for p in probe.params for opt in p.opts}
    assert "--tag" in {opt for p in probe.params for opt in p.opts}
    with pytest.raises(Exception, match="--fake-depth: only for --backend fake"):
        backends.base.refuse_foreign(backends.BACKENDS, "venv", "build", {"fake_depth": "3"})


def test_doctor_asks_each_backend_for_its_findings(
    fake: FakeBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    # asked for: its finding blocks (exit 4, naming it); docker and venv are not asked
    assert main(["doctor", "cpu", "--backend", "fake", "--root", str(NO_GPU), "--json"]) == 4
    out = capsys.readouterr().out
    assert '"check": "fake"' in out
    assert '"check": "docker"' not in out


def test_an_unknown_backend_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "cpu", "--backend", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope' is not a backend (one of: docker, venv)" in err


def test_pick_prefers_the_first_backend_that_serves(
    fake: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(
        backends.BACKENDS["docker"], "serves", lambda _r, _o: (False, "no engine here")
    )
    assert backends.pick(make_recipe(), None, say=said.append) == "venv"
    assert said == ["using the venv backend (no engine here)"]
    assert backends.pick(make_recipe(), "fake", say=said.append) == "fake"
    assert backends.default_backend() == "docker"


def test_a_fleet_plan_runs_a_registered_backend_by_name(
    fake: FakeBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert main(plan_args(out, "--backend", "fake", "--wheelhouse", str(tmp_path))) == 0
    plan = load_plan(out)
    (task,) = plan.tasks
    assert task.image == ""  # the fake backend makes no image
    argv = command(plan, task, out)
    assert argv[argv.index("--backend") + 1] == "fake"
    assert argv[argv.index("--wheelhouse") + 1] == str(tmp_path)
    # Kubernetes runs images: a backend without them is refused, naming it
    capsys.readouterr()
    assert main(plan_args(tmp_path / "k8s", "--backend", "fake", engine="k8s")) == 2
    assert "--backend fake is for Slurm" in capsys.readouterr().err


def test_no_module_outside_backends_compares_a_backend_name() -> None:
    root = paths.ROOT / "envforge"
    names = {"docker", "venv"}
    found = []
    for path in root.rglob("*.py"):
        if "backends" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            words = {s.value for s in sides if isinstance(s, ast.Constant)}
            text = ast.unparse(node)
            if words & names and "backend" in text:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {text}")
    assert found == []


# --------------------------------------------------------------------------- the contract


@pytest.fixture
def host() -> HostInfo:
    return detect(root=NO_GPU, environ={}, tools=no_tools)


@pytest.mark.parametrize("name", ["docker", "venv", "fake"])
def test_every_backend_keeps_the_protocols_contract(
    name: str, fake: FakeBackend, host: HostInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shape, declared flags and doctor, for each registered backend and the fake one
    (docker's doctor asks a stand-in engine, never this machine's)."""
    ran = run_backend(
        name, make_recipe(), host, capsys, root=NO_GPU, stand_ins={"ping": lambda: None}
    )
    assert all(f.severity != "block" for f in ran.findings) or name == "fake"


def test_the_fake_backend_is_driven_through_every_command(
    fake: FakeBackend, host: HostInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run_backend("fake", make_recipe(), host, capsys, root=NO_GPU, drive=Drive(shell_exit=3))
    assert (ran.built["backend"], ran.certified["backend"], ran.shell_exit) == ("fake", "fake", 3)
    assert [c[0] for c in fake.calls] == ["build", "certify", "run"]


def test_docker_is_driven_through_build_and_certify_on_the_fake_engine(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host: HostInfo,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The Docker backend on the fake engine with a probe that passes: ``build`` certifies
    and tags, ``certify`` finds the certified image (``shell`` would run a container)."""
    engine = docker_engine()
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ENVFORGE_BUILDER", "classic")
    monkeypatch.setattr(pipeline, "_connect", lambda _options: engine)
    monkeypatch.setattr(certification, "_run_probe", FakeProbe("pass"))
    drive = Drive(commands=("build", "certify"))
    ran = run_backend(
        "docker", make_recipe(), host, capsys, root=NO_GPU, stand_ins={"ping": lambda: None},
        drive=drive,
    )  # fmt: skip
    assert ran.built["tags"] == [CERTIFIED]
    assert ran.certified["certified"] is True
    assert engine.api.builds  # the build reached the engine


class _NoStepTimeout(FakeBackend):
    def check(self, recipe: Recipe, options: Options) -> str | None:  # type: ignore[override]
        return None


class _AlwaysBlocks(FakeBackend):
    def findings(self, recipe: Recipe | None, host: HostInfo, check: HostCheck) -> list[Finding]:
        return [Finding("fake", "block", "blocks even when not asked for")]


def test_the_contract_catches_a_backend_that_breaks_it(host: HostInfo) -> None:
    with pytest.raises(AssertionError, match="check: no parameter step_timeout"):
        check_shape(_NoStepTimeout())
    with pytest.raises(AssertionError, match="blocks even when not asked for"):
        check_doctor(_AlwaysBlocks(), make_recipe(), host, NO_GPU, {})
