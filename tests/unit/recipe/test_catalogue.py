"""The shipped catalogue, ENVFORGE_RECIPE_PATH and path references."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from envforge.cli import main
from envforge.core.resources import recipes_dir
from envforge.errors import InvalidInput
from envforge.knowledge import load_table
from envforge.recipe.catalogue import Catalogue

REQUIRED = (
    "cpu",
    "gfx1010",
    "gfx1030",
    "gfx1031",
    "gfx1100",
    "gfx90a",
    "gfx942",
    "gfx906",
    "sm_90",
    "sm_61",
    # issue 10, section 3: the GPUs people own
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_89",
    "sm_100",
    "sm_120",
    "gfx908",
    "gfx1032",
    "gfx1101",
    "gfx1102",
    "gfx1200",
    "gfx1201",
    "gfx1151",
)

MINE = """\
name: {name}
description: {description}
gpu: {{vendor: none}}
base_image: debian:bookworm-slim
python: "3.11"
torch: {{version: "2.13.0", index: https://download.pytorch.org/whl/cpu}}
numpy: ">=1.26,<3"
"""


@pytest.fixture(autouse=True)
def _no_user_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


def write_recipe(folder: Path, name: str, description: str = "user recipe") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(MINE.format(name=name, description=description), encoding="utf-8")
    return path


def list_json(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list)
    return rows


def test_list_shows_all_required_recipes(capsys: pytest.CaptureFixture[str]) -> None:
    rows = list_json(capsys)
    names = [r["name"] for r in rows]
    for name in REQUIRED:
        assert name in names
    by_name = {r["name"]: r for r in rows}
    assert by_name["gfx1010"]["stack"] == "torch1.13.1-rocm5.2-py3.10"
    assert by_name["cpu"]["stack"] == "torch2.13.0-cpu-py3.11"
    assert by_name["sm_61"]["stack"].endswith("-cu126-py3.12")
    assert by_name["gfx906"]["stack"] == "torch2.9.1-rocm6.3-py3.12"
    # Volta: the last stack with sm_70 code is the cu126 wheels of 2.14.1.
    assert by_name["sm_70"]["stack"] == "torch2.14.1-cu126-py3.12"
    assert by_name["gfx908"]["stack"] == "torch2.9.1-rocm6.3-py3.12"
    assert by_name["gfx1032"]["stack"] == by_name["gfx1031"]["stack"]
    for name in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_100", "sm_120"):
        assert by_name[name]["stack"] == "torch2.14.1-cu130-py3.12", name
    for name in ("gfx1101", "gfx1102", "gfx1200", "gfx1201", "gfx1151"):
        assert by_name[name]["stack"] == "torch2.14.1-rocm7.2-py3.12", name
    for name in REQUIRED:
        if name != "cpu":
            assert by_name[name]["arch"] == name, name


def test_list_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for name in REQUIRED:
        assert any(line.split()[0] == name for line in lines), name


def test_file_stem_is_the_recipe_name() -> None:
    files = Catalogue.default().files()
    assert set(REQUIRED) <= set(files)
    for name, path in files.items():
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert data["name"] == name == path.stem


def test_shipped_recipes_are_sourced_and_honest() -> None:
    table = load_table()
    for r in Catalogue.default().load_all():
        assert len(r.description) > 40, r.name
        assert r.sources, r.name
        assert table.base_image(r.base_image) is not None, (r.name, r.base_image)
        assert r.certify.step_timeout > 0
        for e in r.env:
            assert e.evidence, (r.name, e.name)
            assert len(e.why) > 20, (r.name, e.name)
        for k in r.known_issues:
            assert k.evidence, (r.name, k.symptom)
        if r.gpu.vendor == "amd":
            assert r.rocm
        if r.gpu.vendor == "nvidia":
            assert r.cuda
        if r.gpu.vendor != "none":
            assert r.gpu.products, r.name
            assert r.torch.index is not None


def test_gfx1010_recipe_is_the_rdna1_stack() -> None:
    r = Catalogue.default().load("gfx1010")
    assert (r.python, r.rocm, r.numpy) == ("3.10", "5.2", "<2")
    assert r.torch.version.split("+")[0] == "1.13.1"
    assert r.torch.index == "https://download.pytorch.org/whl/rocm5.2"
    env = {e.name: e for e in r.env}
    hsa = env["HSA_OVERRIDE_GFX_VERSION"]
    assert (hsa.value, hsa.confidence) == ("10.3.0", "community")
    assert "ISA differs" in hsa.why
    miopen = env["MIOPEN_DEBUG_CONV_IMPLICIT_GEMM"]
    assert (miopen.value, miopen.confidence) == ("1", "uncertain")
    assert "no-op" in miopen.why
    assert "unset already means enabled" in miopen.why


def test_gfx1031_carries_the_override() -> None:
    r = Catalogue.default().load("gfx1031")
    assert r.env_map["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0"
    assert "Radeon RX 6700 XT" in r.gpu.products


def test_user_folders_are_searched_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    second = tmp_path / "second"
    write_recipe(first, "cpu", "mine shadows the shipped cpu recipe")
    write_recipe(second, "cpu", "second folder loses")
    write_recipe(second, "extra", "only in the second folder")
    monkeypatch.setenv("ENVFORGE_RECIPE_PATH", os.pathsep.join([str(first), str(second)]))

    catalogue = Catalogue.default()
    assert catalogue.folders[:2] == (first, second)
    assert catalogue.folders[-1] == recipes_dir()
    assert catalogue.resolve("cpu") == first / "cpu.yaml"
    assert catalogue.resolve("extra") == second / "extra.yaml"
    assert catalogue.resolve("gfx1010") == recipes_dir() / "gfx1010.yaml"

    by_name = {r["name"]: r for r in list_json(capsys)}
    assert by_name["cpu"]["description"] == "mine shadows the shipped cpu recipe"
    assert by_name["cpu"]["path"] == str(first / "cpu.yaml")
    assert "extra" in by_name
    assert "gfx1010" in by_name

    assert main(["show", "cpu"]) == 0
    assert "mine shadows" in capsys.readouterr().out


def test_missing_user_folder_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_RECIPE_PATH", str(tmp_path / "does-not-exist"))
    names = [r["name"] for r in list_json(capsys)]
    assert set(REQUIRED) <= set(names)


def test_path_references(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_recipe(tmp_path / "elsewhere", "mine")
    assert main(["validate", str(path)]) == 0
    assert "ok    mine" in capsys.readouterr().out
    assert main(["show", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "mine"
    assert data["stack_tag"] == "torch2.13.0-cpu-py3.11"
    # A file name that does not look like a recipe name still works as a path.
    other = tmp_path / "elsewhere" / "other-name.yml"
    other.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["validate", str(other)]) == 0
    capsys.readouterr()


def test_path_reference_is_checked_against_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_recipe(tmp_path, "old")
    text = path.read_text(encoding="utf-8").replace('"3.11"', '"3.8"')
    text = text.replace("debian:bookworm-slim", "ubuntu:20.04")
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "[python-range]" in err


def test_validate_several_refs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "cpu", "gfx1010", "sm_61"]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == 3


def test_unknown_recipe_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "gfx1O30"]) == 2
    err = capsys.readouterr().err
    assert "no recipe named 'gfx1O30'" in err
    assert "did you mean 'gfx1030'?" in err
    with pytest.raises(InvalidInput):
        Catalogue.default().resolve("no-such-recipe-anywhere")


SECTION_3 = REQUIRED[REQUIRED.index("sm_70") :]


@pytest.mark.parametrize("name", SECTION_3)
def test_curated_recipe_has_the_rigour_of_gfx1010(name: str) -> None:
    recipe = Catalogue.default().load(name)
    assert len(recipe.description) > 150
    assert recipe.gpu.products
    assert recipe.known_issues
    for issue in recipe.known_issues:
        assert issue.symptom
        assert issue.workaround
        assert issue.evidence, issue.symptom
        assert all(link.startswith("https://") for link in issue.evidence)
    assert recipe.sources
    for var in recipe.env:
        assert var.evidence
        assert var.why


@pytest.mark.parametrize("name", SECTION_3)
def test_auto_chooses_the_curated_recipe_for_its_arch(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", name)
    assert main(["detect", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["auto"]["recipe"] == name


# --------------------------------------------------------------------------- broken recipes
# issue 11, class 8: one broken user recipe does not make `list` fail.

BROKEN = {
    "broken-yaml": "name: [unclosed\n",
    "broken-key": "name: broken-key\ndescriptio: typo\n",
}


def _broken_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "mine"
    write_recipe(folder, "extra", "a good user recipe")
    write_recipe(folder, "broken-esc", '"an ESC \\e[2J in the description"')
    for name, text in BROKEN.items():
        (folder / f"{name}.yaml").write_text(text, encoding="utf-8")
    os.mkfifo(folder / "fifo.yaml")
    monkeypatch.setenv("ENVFORGE_RECIPE_PATH", str(folder))
    return folder


def test_list_marks_broken_recipes_and_lists_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _broken_path(tmp_path, monkeypatch)
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    lines = {line.split()[0]: line for line in captured.out.splitlines()}
    for name in [*REQUIRED, "extra"]:
        assert "BROKEN" not in lines[name], name
    for name in [*BROKEN, "broken-esc", "fifo"]:
        assert lines[name].split()[1:3] == ["-", "BROKEN"], lines[name]
    errors = captured.err.splitlines()
    assert len(errors) == len(BROKEN) + 2  # one line each
    assert f"envforge: broken-yaml: {folder / 'broken-yaml.yaml'}: line 2: not valid YAML" in (
        captured.err
    )
    assert "descriptio: unknown key" in captured.err
    assert "broken-esc.yaml: description: contains the control character '\\x1b'" in captured.err
    assert "\x1b" not in captured.err
    assert "fifo.yaml: it is a FIFO, not a regular file" in captured.err
    assert "Traceback" not in captured.err


def test_list_json_gives_the_error_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _broken_path(tmp_path, monkeypatch)
    by_name = {r["name"]: r for r in list_json(capsys)}
    assert by_name["extra"]["error"] is None
    assert by_name["extra"]["description"] == "a good user recipe"
    assert by_name["cpu"]["error"] is None
    row = by_name["broken-key"]
    assert row["path"] == str(folder / "broken-key.yaml")
    assert row["stack"] is None
    assert row["error"].startswith(f"{folder / 'broken-key.yaml'}: descriptio: unknown key")
    assert "\n" not in row["error"]


def test_validate_of_the_broken_recipe_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _broken_path(tmp_path, monkeypatch)
    assert main(["validate", "broken-key"]) == 2
    assert main(["validate", "extra"]) == 0
    assert main(["validate"]) == 2  # the whole catalogue, broken ones included
    err = capsys.readouterr().err
    assert "descriptio: unknown key" in err
    assert "Traceback" not in err


def test_list_escapes_a_file_name_with_control_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "bad\x1b[2J.yaml").write_text("name: x\n", encoding="utf-8")
    monkeypatch.setenv("ENVFORGE_RECIPE_PATH", str(folder))
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err
    assert "bad\\x1b[2J  " in captured.out
    assert "BROKEN" in captured.out


def test_strix_halo_names_its_hangs_and_their_workarounds_with_evidence() -> None:
    """gfx1151's silent hangs (HSA_ENABLE_INTERRUPT=0) and the MES firmware / CWSR page
    faults (MES 0x80, amdgpu.cwsr_enable=0) are known issues with their reports
    (audit 2026-11-27 §4.6)."""
    recipe = Catalogue(folders=(recipes_dir(),)).load("gfx1151")
    fixes = {
        "HSA_ENABLE_INTERRUPT=0": "ROCm/legacy-rocm-build/issues/6530",
        "amdgpu.cwsr_enable=0": "ROCm/legacy-rocm-build/issues/5991",
        "MES firmware": "ROCm/legacy-rocm-build/issues/5724",
    }
    for fix, report in fixes.items():
        issue = next((k for k in recipe.known_issues if fix in k.workaround), None)
        assert issue is not None, fix
        assert any(report in e for e in issue.evidence), (fix, issue.evidence)
