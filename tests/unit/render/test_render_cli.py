"""``envforge render``: printing, ``--all -o DIR``, the venv format, options, refusals."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from envforge.cli import main
from tests.helpers import paths

ROOT = paths.ROOT
FIXTURES = ROOT / "tests" / "fixtures" / "recipes"


@pytest.fixture(autouse=True)
def _no_user_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


def test_render_all_matches_the_committed_dockerfiles(tmp_path: Path) -> None:
    assert main(["render", "--all", "-o", str(tmp_path)]) == 0
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    dockerfiles = ROOT / "Dockerfiles"
    committed = sorted(p.relative_to(dockerfiles) for p in dockerfiles.rglob("*") if p.is_file())
    assert written == committed
    for rel in written:
        assert (tmp_path / rel).read_bytes() == (ROOT / "Dockerfiles" / rel).read_bytes()
        assert (tmp_path / rel).stat().st_mode & 0o777 == 0o644


def test_render_prints_one_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out == (ROOT / "Dockerfiles" / "cpu" / "Dockerfile").read_text(encoding="utf-8")


def test_render_options(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["render", "cpu", "--base-image", "local/base:1"]
    argv += ["--with-wheelhouse", "--with-ca-bundle"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "FROM local/base:1 AS torch\n" in out
    assert "COPY wheelhouse/ /tmp/envforge/wheelhouse/\n" in out
    assert "COPY ca-bundle.pem /tmp/envforge/ca-bundle.pem\n" in out


def test_render_venv_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "gfx1010", "--format", "venv"]) == 0
    assert capsys.readouterr().out.startswith("#!/usr/bin/env bash\n")
    assert main(["render", "gfx1010", "--format", "venv", "-o", str(tmp_path)]) == 0
    folder = tmp_path / "gfx1010" / "venv"
    assert sorted(p.name for p in folder.iterdir()) == [
        "activate.sh",
        "constraints.txt",
        "requirements.txt",
        "setup.sh",
    ]
    assert os.access(folder / "setup.sh", os.X_OK)
    assert "torch==1.13.1+rocm5.2" in (folder / "requirements.txt").read_text()


def test_render_refuses_bad_input_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "cpu", "--base-image", "a b"]) == 2
    assert "--base-image" in capsys.readouterr().err
    assert main(["render"]) == 2
    assert main(["render", "--all"]) == 2
    # a user folder whose recipe cannot be rendered: --all writes nothing at all
    user = tmp_path / "user"
    user.mkdir()
    text = (FIXTURES / "golden-cpu.yaml").read_text().replace("name: golden-cpu", "name: zz")
    env = 'env: {FOO: {value: "a\\u2028b", why: test, confidence: uncertain}}\n'
    (user / "zz.yaml").write_text(text + env)
    shutil.copy(FIXTURES / "golden-cpu.yaml", user / "golden-cpu.yaml")
    monkeypatch.setenv("ENVFORGE_RECIPE_PATH", str(user))
    out = tmp_path / "out"
    code = main(["render", "--all", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "zz.yaml: env.FOO.value: contains '\\u2028'" in err
    assert not out.exists() or not any(out.rglob("*"))
