"""``render --format apptainer`` (issue 21 §5): a definition that bootstraps from the
certified image by digest, with the recipe's environment and labels. Checked with spython's
Singularity-recipe parser (from the package index): Apptainer is not in Debian 12, so no
SIF is built here."""

from __future__ import annotations

from pathlib import Path

import pytest
from spython.main.parse.parsers import SingularityParser

from envforge.cli import main
from envforge.recipe.catalogue import Catalogue

DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE = f"127.0.0.1:5000/envforge/gfx1031@{DIGEST}"


def parsed(path: Path) -> object:
    (stage,) = SingularityParser(str(path)).recipe.values()
    return stage


def test_the_definition_parses_and_pins_the_certified_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "gfx1031", "--format", "apptainer", "--image", IMAGE]) == 0
    path = tmp_path / "envforge.def"
    path.write_text(capsys.readouterr().out)
    stage = parsed(path)
    recipe = Catalogue.default({}).load("gfx1031")
    assert stage.fromHeader == IMAGE  # type: ignore[attr-defined]
    assert stage.environ == [  # type: ignore[attr-defined]
        f"{k}={v}" for k, v in recipe.env_map.items()
    ]
    labels = dict(line.split(" ", 1) for line in stage.labels)  # type: ignore[attr-defined]
    assert labels["io.envforge.recipe-hash"] == recipe.hash
    assert labels["io.envforge.stack-tag"] == recipe.stack_tag
    assert labels["io.envforge.source-digest"] == DIGEST


def test_written_under_dir_and_an_unpinned_image_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "render",
                "sm_90",
                "--format",
                "apptainer",
                "--image",
                f"127.0.0.1:5000/envforge/sm_90@{DIGEST}",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    text = (out / "sm_90" / "envforge.def").read_text()
    assert "apptainer exec --nv" in text  # NVIDIA needs the driver's libraries bound
    capsys.readouterr()
    assert (
        main(
            [
                "render",
                "cpu",
                "--format",
                "apptainer",
                "--image",
                "127.0.0.1:5000/envforge/cpu:latest",
                "-o",
                str(tmp_path / "no"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("error") == 1
    assert "bootstraps from the certified image by digest" in err
    assert not (tmp_path / "no").exists()
    assert main(["render", "cpu", "--format", "apptainer"]) == 2
    assert "--format apptainer needs --image" in capsys.readouterr().err
