"""A project's environment: its own venv (keyed by recipe and project), its checks as probe
steps run by the real worker, and the Docker backend serving a project only with its image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envforge.backends import BACKENDS, Options, pick
from envforge.backends.docker import pipeline
from envforge.backends.docker.projects import project_ref
from envforge.backends.venv.layout import project_binding, venv_location
from envforge.cli import main
from envforge.errors import ProjectError
from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import ProbeSpec
from envforge.project.checks import project_checks
from envforge.project.read import load_project
from envforge.recipe.catalogue import Catalogue
from tests.helpers import paths
from tests.helpers.fake_engine import FakeEngine, image_attrs

CPU = Catalogue.default({}).load("cpu")


def project(folder: Path, *, checks: str = "[]", deps: str = '["six"]') -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "demo-proj"\nversion = "0.1"\ndependencies = {deps}\n'
        f'[tool.envforge]\nrecipe = "cpu"\nchecks = {checks}\n',
        encoding="utf-8",
    )
    pkg = folder / "src" / "demo_proj"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("VALUE = 41\n", encoding="utf-8")
    return folder


def test_each_project_gets_a_venv_of_its_own(tmp_path: Path) -> None:
    env = {"ENVFORGE_HOME": str(tmp_path / "home")}
    one = load_project(project(tmp_path / "a"))
    two = load_project(project(tmp_path / "b"))  # same name, another folder
    own = venv_location(CPU, env)
    places = {own, venv_location(CPU, env, one), venv_location(CPU, env, two)}
    assert len(places) == 3
    assert all(p.parent == own.parent for p in places)  # under the recipe's folder
    assert venv_location(CPU, env, one) == venv_location(CPU, env, load_project(tmp_path / "a"))


def test_the_binding_changes_with_the_requirements_not_the_checks(tmp_path: Path) -> None:
    first = project_binding(load_project(project(tmp_path / "p")))
    again = project_binding(load_project(project(tmp_path / "p", checks='["pytest -q"]')))
    changed = project_binding(load_project(project(tmp_path / "p", deps='["six", "idna"]')))
    assert first == again
    assert changed != first
    assert project_binding(None) is None


def test_checks_become_steps_import_first(tmp_path: Path) -> None:
    root = project(
        tmp_path / "p", checks='["tests/smoke.py", "pytest -x -q tests", "pytest -x -q tests"]'
    )
    (root / "tests").mkdir()
    (root / "tests" / "smoke.py").write_text("import demo_proj\n", encoding="utf-8")
    steps = [c.step for c in project_checks(load_project(root))]
    assert steps == [
        "check:import demo_proj",
        "check:tests/smoke.py",
        "check:pytest -x -q tests",
        "check:pytest -x -q tests#2",
    ]


@pytest.mark.parametrize(
    ("check", "key_part"),
    [
        ('["missing.py"]', "missing.py is not a file"),
        ('["pytest \\"unclosed"]', "checks[0]"),
    ],
)
def test_a_bad_check_is_one_line_naming_the_file_and_key(
    tmp_path: Path, check: str, key_part: str
) -> None:
    root = project(tmp_path / "p", checks=check)
    with pytest.raises(ProjectError) as caught:
        project_checks(load_project(root))
    line = caught.value.one_line()
    assert "pyproject.toml" in line
    assert "checks[0]" in line
    assert key_part in line
    assert "\n" not in line


def test_command_checks_run_in_the_worker_under_its_deadline(tmp_path: Path) -> None:
    """The real probe worker runs the generated steps: a command that passes, one that
    fails (its exit code and last output in the step's detail), the import of a package
    that is not installed (fails), all with this interpreter as the environment's."""
    root = project(
        tmp_path / "p",
        checks=json.dumps(
            [
                f"{Path(sys.executable).name} -c \"print('fine')\"",
                f"{Path(sys.executable).name} -c \"import sys; print('broken here'); sys.exit(3)\"",
            ]
        ),
    )
    checks = project_checks(load_project(root))
    spec = ProbeSpec(level="quick", vendor="none", step_timeout=60.0, checks=checks)
    report = run_probe(spec, LocalPythonTarget(python=sys.executable, env=None))
    status = {s.name: (s.status, s.detail) for s in report.steps}
    ok, bad, imported = (status[c.step] for c in (checks[1], checks[2], checks[0]))
    assert ok[0] == "pass"
    assert bad[0] == "fail"
    assert "exited 3" in bad[1]
    assert "broken here" in bad[1]
    assert imported[0] == "fail"  # demo_proj is not installed in this interpreter
    assert not report.passed


def test_docker_serves_a_project_only_with_its_image_and_pick_moves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = load_project(project(tmp_path / "p"))
    engine = FakeEngine()
    monkeypatch.setattr(pipeline, "_connect", lambda _options: engine)
    ok, why = BACKENDS["docker"].serves(CPU, Options(project=proj))
    assert not ok
    assert why == f"no certified image {project_ref(CPU, proj)}"
    said: list[str] = []
    assert pick(CPU, None, say=said.append, options=Options(project=proj)) == "venv"
    assert any(project_ref(CPU, proj) in s for s in said)
    # the recipe's own image does not serve the project; another project's image neither
    engine.images.add(
        image_attrs("sha256:" + "e" * 64, labels={"io.envforge.project-key": "other-12345678"}),
        project_ref(CPU, proj),
    )
    ok, why = BACKENDS["docker"].serves(CPU, Options(project=proj))
    assert not ok
    assert "is not an image of the project" in why


def test_build_with_a_project_whose_pins_clash_stops_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path / "p", deps='["torch<2.0"]')
    home = tmp_path / "home"
    monkeypatch.setenv("ENVFORGE_HOME", str(home))
    code = main(["build", "--project", str(root), "--backend", "venv"])
    err = capsys.readouterr().err
    assert code == 2
    assert "torch<2.0" in err
    assert "2.13.0" in err
    assert not home.exists()


def test_shell_and_certify_take_a_project(tmp_path: Path) -> None:
    for command in (["shell", "--help"], ["certify", "--help"], ["build", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "envforge", *command],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0
        assert "--project DIR" in done.stdout


NO_GPU = paths.TESTS / "fixtures" / "sysfs" / "none"


def test_doctor_checks_the_project_on_its_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(pipeline, "_connect", lambda _options: FakeEngine())  # no image there
    root = project(tmp_path / "p")
    main(["doctor", "--project", str(root), "--root", str(NO_GPU), "--backend", "venv", "--json"])
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert found["project"]["severity"] == "ok"
    assert found["project-lock"]["fix"] == f"envforge lock cpu --project {root}"
    assert found["project-env"]["severity"] == "warn"
    assert found["project-env"]["fix"] == f"envforge build cpu --project {root} --backend venv"
    clash = project(tmp_path / "q", deps='["torch<2.0"]')
    code = main(
        ["doctor", "--project", str(clash), "--root", str(NO_GPU), "--backend", "venv", "--json"]
    )
    assert code == 4
    found = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert found["project"]["severity"] == "block"
    assert "torch<2.0" in found["project"]["message"]
