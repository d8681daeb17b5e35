"""``auto`` in every recipe command (issue 10 §2): a curated recipe that covers the detected
arch wins, otherwise the solved stack under the arch's own name; never another arch's recipe.
Detection is driven by ENVFORGE_GPU_VENDOR/ENVFORGE_GPU_ARCH, through main()."""

from __future__ import annotations

import json

import pytest

from envforge.cli import main
from envforge.container.refs import certified_ref
from envforge.host.detect import OVERRIDE_VARS
from tests.helpers import paths

SYSFS = paths.TESTS / "fixtures" / "sysfs"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OVERRIDE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    monkeypatch.delenv("ENVFORGE_STRICT", raising=False)


def _gpu(monkeypatch: pytest.MonkeyPatch, arch: str) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_VENDOR", "amd" if arch.startswith("gfx") else "nvidia")
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", arch)


def _auto_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("envforge: auto -> ")]


@pytest.mark.parametrize(
    ("arch", "recipe", "solved"),
    [
        ("sm_103", "sm_103", True),  # B300: no curated recipe; the sm_100 one is not its own
        ("gfx1150", "gfx1150", True),  # Strix Point: no curated recipe, a solvable stack
        ("gfx1034", "gfx1031", False),  # the gfx1031 recipe sets the 10.3.0 override it needs
        ("sm_89", "sm_89", False),  # its own curated recipe (not sm_90's, as before)
    ],
)
def test_show_auto_uses_the_covering_recipe_or_the_solved_stack(
    arch: str,
    recipe: str,
    solved: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _gpu(monkeypatch, arch)
    assert main(["show", "auto", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["name"] == recipe
    lines = _auto_lines(captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"envforge: auto -> {recipe}: ")
    assert ("uncertain until certified" in lines[0]) is solved
    assert ("no curated recipe covers " + arch in lines[0]) is solved
    if solved:
        assert data["gpu"]["arch"] == arch
        # The image is named after the arch itself, never another arch's recipe.
        assert certified_ref(recipe, data["stack_tag"]).startswith(f"envforge/{arch}:")


def test_render_auto_prints_the_solved_stacks_dockerfile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu(monkeypatch, "sm_103")
    assert main(["render", "auto"]) == 0
    captured = capsys.readouterr()
    assert "FROM " in captured.out
    assert "cu1" in captured.out  # a CUDA wheel variant, from the solved stack
    assert len(_auto_lines(captured.err)) == 1


def test_render_auto_names_the_curated_recipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu(monkeypatch, "sm_89")
    assert main(["render", "auto"]) == 0
    rendered = capsys.readouterr().out
    assert main(["render", "sm_89"]) == 0
    assert capsys.readouterr().out == rendered


def test_validate_auto_accepts_the_solved_recipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu(monkeypatch, "gfx1150")
    assert main(["validate", "auto"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ok    gfx1150")
    assert len(_auto_lines(captured.err)) == 1


def test_lock_auto_resolves_then_asks_where_to_write_a_solved_lock(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before issue 10 §2: "lock needs a recipe name, not auto". Now auto resolves; a solved
    # recipe has no file to put the lock next to, so -o is asked for (before uv runs).
    _gpu(monkeypatch, "sm_103")
    assert main(["lock", "auto"]) == 2
    err = capsys.readouterr().err
    assert "not auto" not in err
    assert "envforge: auto -> sm_103: " in err
    assert "recipe sm_103 has no file to put the lock next to" in err


def test_build_auto_resolves_before_checking_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu(monkeypatch, "gfx1150")
    assert main(["build", "auto", "--backend", "venv", "--tag", "x:y"]) == 2
    err = capsys.readouterr().err
    assert len(_auto_lines(err)) == 1
    assert "envforge: auto -> gfx1150: " in err
    assert "--tag: only for --backend docker" in err


def test_shell_auto_resolves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu(monkeypatch, "sm_103")
    assert main(["shell", "auto", "--backend", "venv", "--image", "x", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "envforge: auto -> sm_103: " in err
    assert "--image: only for --backend docker" in err


def test_auto_without_any_stack_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _gpu(monkeypatch, "sm_35")
    assert main(["show", "auto"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "no published torch wheel" in err


def test_doctor_auto_judges_the_chosen_recipe_without_the_other_arch_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1034")
    code = main(["doctor", "--json", "--backend", "venv", "--root", str(SYSFS / "rx6700xt")])
    data = json.loads(capsys.readouterr().out)
    assert data["recipe"] == "gfx1031"
    gpu = next(f for f in data["findings"] if f["check"] == "gpu")
    assert gpu["severity"] == "ok", gpu
    assert "auto chose gfx1031 for gfx1034" in gpu["message"]
    assert not any("this host has" in f["message"] for f in data["findings"])
    assert code in (0, 4)  # the fixture host's other findings decide; the gpu one is ok
    # Named explicitly, the same recipe still gets the warning (it is not auto's choice).
    main(["doctor", "gfx1031", "--json", "--backend", "venv", "--root", str(SYSFS / "rx6700xt")])
    named = json.loads(capsys.readouterr().out)
    gpu = next(f for f in named["findings"] if f["check"] == "gpu")
    assert gpu["severity"] == "warn"
    assert "recipe gfx1031 is for gfx1031; this host has gfx1034" in gpu["message"]


def test_doctor_auto_with_a_solved_stack(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "sm_103")
    main(["doctor", "--json", "--backend", "venv", "--root", str(SYSFS / "h100")])
    data = json.loads(capsys.readouterr().out)
    assert data["recipe"] == "sm_103"
    assert data["auto"]["solved"] is True
    gpu = next(f for f in data["findings"] if f["check"] == "gpu")
    assert gpu["severity"] == "ok"
    assert "auto chose sm_103 for sm_103" in gpu["message"]


def test_auto_solves_the_verified_default_not_the_latest(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20 §3: auto (no curated recipe for gfx1150) takes solve's default, the newest
    stack whose every choice is verified, never 2.15.0+rocm10.0 (no evidence found)."""
    _gpu(monkeypatch, "gfx1150")
    assert main(["show", "auto", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"]["version"] == "2.14.1"
    assert data["torch"]["index"].endswith("/rocm7.2")
    assert data["python"] == "3.12"
