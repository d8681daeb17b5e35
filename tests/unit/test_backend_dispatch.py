"""Commands reach a backend only through ``BACKENDS[name]``: a third backend, registered
and nothing else, is what build, certify, shell and doctor use, with no CLI edit."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

from envforge import backends
from envforge.backends.base import BackendOption, Options
from envforge.cli import main
from envforge.cli.backend_options import backend_flags
from envforge.fleet.plan import load_plan
from envforge.fleet.task import command
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.recipes import make_recipe

NO_GPU = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "none"


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
    monkeypatch.setattr(backends.docker, "serves", lambda _r, _o: (False, "no engine here"))
    assert backends.pick(make_recipe(), None, say=said.append) == "venv"
    assert said == ["using the venv backend (no engine here)"]
    assert backends.pick(make_recipe(), "fake", say=said.append) == "fake"
    assert backends.default_backend() == "docker"


def test_a_fleet_plan_runs_a_registered_backend_by_name(
    fake: FakeBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert (
        main(
            [
                "fleet",
                "plan",
                "--engine",
                "slurm",
                "--recipe",
                "cpu",
                "--backend",
                "fake",
                "--wheelhouse",
                str(tmp_path),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    plan = load_plan(out)
    (task,) = plan.tasks
    assert task.image == ""  # the fake backend makes no image
    argv = command(plan, task, out)
    assert argv[argv.index("--backend") + 1] == "fake"
    assert argv[argv.index("--wheelhouse") + 1] == str(tmp_path)
    # Kubernetes runs images: a backend without them is refused, naming it
    capsys.readouterr()
    assert (
        main(
            [
                "fleet",
                "plan",
                "--engine",
                "k8s",
                "--recipe",
                "cpu",
                "--backend",
                "fake",
                "-o",
                str(tmp_path / "k8s"),
            ]
        )
        == 2
    )
    assert "--backend fake is for Slurm" in capsys.readouterr().err


def test_no_module_outside_backends_compares_a_backend_name() -> None:
    root = Path(__file__).resolve().parents[2] / "envforge"
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
