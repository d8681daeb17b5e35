"""Issue 31 §1: commands reach a fleet engine only through ``ENGINES[name]``: an engine
registered and nothing else is what ``fleet plan|submit|status`` use, with no CLI edit;
a name not registered is refused, on the command line and in a plan file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.fleet import engines
from envforge.fleet.planning import load_plan
from tests.helpers import fake_fleet_engine


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    monkeypatch.setitem(engines.ENGINES, "fake", fake_fleet_engine)
    fake_fleet_engine.CALLS.clear()
    yield fake_fleet_engine.CALLS
    fake_fleet_engine.CALLS.clear()


def _plan(engine: str, out: Path, *extra: str) -> int:
    args = ["fleet", "plan", "--engine", engine, "--recipe", "cpu", "--arch", "gfx942"]
    return main([*args, *extra, "-o", str(out)])


def test_fleet_plan_routes_to_a_registered_engine(
    fake: list[tuple[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert _plan("fake", out, "--backend", "venv", "--nodes", "2") == 0
    plan = load_plan(out)
    assert plan.engine == "fake"
    assert sorted(p.name for p in out.iterdir()) == ["fake.tasks", "logs", "plan.json"]
    assert (out / "fake.tasks").read_text() == (
        f"# plan {plan.id} for the fake scheduler\n"
        "reports/000 cpu gfx942 gpus=1\nreports/001 cpu gfx942 gpus=1\n"
    )
    assert not list(out.glob("*.yml"))
    assert not list(out.glob("*.sbatch"))
    capsys.readouterr()
    assert main(["fleet", "submit", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"fake-{plan.id}"
    assert main(["fleet", "status", str(out), "--json"]) == 1  # queued: not finished
    states = json.loads(capsys.readouterr().out)["tasks"]
    assert [s["state"] for s in states] == ["queued", "queued"]
    assert [c[0] for c in fake] == ["files", "submit", "queued"]


def test_the_engine_refuses_a_backend_before_any_file(
    fake: list[tuple[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envforge import backends
    from tests.helpers.fake_backend import FakeBackend

    monkeypatch.setitem(backends.BACKENDS, "refused", FakeBackend())
    assert _plan("fake", tmp_path / "p", "--backend", "refused") == 2
    assert not (tmp_path / "p").exists()
    assert fake == []


def test_an_unregistered_engine_is_refused_naming_the_registered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _plan("pbs", tmp_path / "p") == 2
    err = capsys.readouterr().err
    assert "'pbs'" in err
    for name in engines.ENGINES:
        assert name in err
    assert not (tmp_path / "p").exists()


def test_a_plan_file_naming_an_unknown_engine_is_refused_in_one_line(
    fake: list[tuple[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert _plan("fake", out, "--backend", "venv") == 0
    data = json.loads((out / "plan.json").read_text())
    data["engine"] = "pbs"
    (out / "plan.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["fleet", "status", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) <= 2  # the error, and its hint
    first = err.splitlines()[0]
    assert str(out / "plan.json") in first
    assert "'engine'" in first
    assert "'pbs'" in first
    assert "--engine" in err  # the fix


@pytest.mark.parametrize("name", list(engines.ENGINES))
def test_every_registered_engine_plans_and_reads_back(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    assert _plan(name, out, "--backend", "docker") == 0
    plan = load_plan(out)
    assert plan.engine == name
    written = engines.ENGINES[name].files(plan, out.resolve())
    assert written, f"{name} wrote no file of its own"
    for file, text in written.items():
        assert (out / file).read_text() == text  # what plan wrote is what it renders
    assert engines.ENGINES[name].queued(plan, out.resolve()) == {}  # nothing submitted
    capsys.readouterr()
    assert main(["fleet", "status", str(out), "--json"]) == 1  # every task missing
    states = json.loads(capsys.readouterr().out)["tasks"]
    assert {s["state"] for s in states} == {"missing"}
