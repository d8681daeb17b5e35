"""The checks of recipe values (envforge/recipe/checks.py), shared by loader and renderer:
control characters, reserved env names, pins, versions, names, step timeouts, and
``--set`` on a file that is not a recipe (issue 11, classes 2 and 9)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.errors import EnvforgeError, InvalidInput
from envforge.recipe import checks
from envforge.recipe.load import load_recipe_file
from envforge.render import render_dockerfile
from tests.unit.recipe.test_recipe_load import GOOD, load_error, write


@pytest.fixture(autouse=True)
def _no_user_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


@pytest.mark.parametrize("ch", ["\x1b", "\x07", "\x08", "\x7f", "\x80", "\x9b", "\x01", "\x1f"])
def test_control_characters_are_refused_not_changed(ch: str) -> None:
    problem = checks.text_problem(f"a{ch}b")
    assert problem is not None
    assert f"U+{ord(ch):04X}" in problem[0]


@pytest.mark.parametrize("text", ["a\tb", "é😀", "\u00a0", "$HOME", "a" * checks.MAX_VALUE_CHARS])
def test_text_that_reads_back_is_accepted(text: str) -> None:
    assert checks.text_problem(text) is None


def test_tab_is_kept_exactly(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("description: a test recipe", 'description: "a\\tb"'))
    recipe = load_recipe_file(path)
    assert recipe.description == "a\tb"
    assert 'org.opencontainers.image.description="a\tb"' in render_dockerfile(recipe)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("cpu", True),
        ("sm_61", True),
        ("golden-rocm", True),
        ("a__b", True),
        ("a.b", True),
        ("0..", False),
        ("a-", False),
        ("a..b", False),
        ("a___b", False),
        ("_a", False),
        ("x" * 63, True),
        ("x" * 64, False),
        ("A", False),
        ("a\n", False),
    ],
)
def test_recipe_names_follow_the_image_name_grammar(tmp_path: Path, name: str, ok: bool) -> None:
    text = GOOD.replace("name: mine", f"name: {name!r}".replace("'", '"').replace("\n", "\\n"))
    if ok:
        assert load_recipe_file(write(tmp_path, text)).name == name
    else:
        assert "name: " in load_error(tmp_path, text)


@pytest.mark.parametrize(
    ("pin", "expect"),
    [
        ("foo===", "empty pin"),
        ("foo==", "empty pin"),
        ("foo[x] ===", "empty pin"),
        ("foo==1.*", "pins a prefix"),
        ("foo==1.0,<0.5", "can never be satisfied"),
        ("foo==1.0,==2.0", "can never be satisfied"),
        ("foo>=1", "is not pinned"),
        ("foo @ https://example.org/foo.whl", "is not pinned (a URL without #sha256"),
        ("--index-url=http://x.invalid/ foo", "not a PEP 508 requirement"),
    ],
)
def test_malformed_pins_are_refused(pin: str, expect: str) -> None:
    problem = checks.pin_problem(pin)
    assert problem is not None
    assert expect in problem[0]
    assert "\n" not in problem[0]
    assert problem[1].startswith("write it") or problem[1].startswith("keep one pin")


@pytest.mark.parametrize(
    "pin", ["foo==1.0", "foo===1.0", "foo[x]==1; python_version > '3'", "foo==1.0,!=2", "a==1.0rc1"]
)
def test_pins_accepted_as_before(pin: str) -> None:
    assert checks.pin_problem(pin) is None


@pytest.mark.parametrize(
    ("version", "expect"),
    [
        ("latest", "is not a version"),
        ("2.١٣.0", "is not a version"),
        ("1!2.0.0", "epoch"),
        ("v2.5.1", 'write it as "2.5.1"'),
        ("2.5.1-rc1", 'write it as "2.5.1rc1"'),
    ],
)
def test_torch_versions(tmp_path: Path, version: str, expect: str) -> None:
    line = load_error(tmp_path, GOOD.replace('version: "2.5.1"', f'version: "{version}"'))
    assert "torch.version: " in line
    assert expect in line


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        (".inf", "finite"),
        ("-.inf", "finite"),
        (".nan", "finite"),
        ("0", "greater than zero"),
        ("-1", "greater than zero"),
        ("86401", "more than a day"),
        ("1.0e+308", "more than a day"),
    ],
)
def test_step_timeout_bounds(tmp_path: Path, value: str, expect: str) -> None:
    line = load_error(tmp_path, GOOD.replace("step_timeout: 30", f"step_timeout: {value}"))
    assert "certify.step_timeout: " in line
    assert expect in line


def test_step_timeout_of_a_day_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("step_timeout: 30", "step_timeout: 86400"))
    assert load_recipe_file(path).certify.step_timeout == 86400.0


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("- a\n- b\n", "a list"),
        ("just text\n", "the string"),
        ("", "nothing"),
        ("7\n", "the number 7"),
    ],
)
def test_set_refuses_a_file_that_is_not_a_mapping(
    tmp_path: Path, text: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notarecipe.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["validate", str(path), "--set", "name=x"])
    err = capsys.readouterr().err
    assert code == 2
    last = err.splitlines()[-1]
    assert f"{path}: (top level): expected a mapping, got {kind}" in last
    assert "Traceback" not in err


def test_set_env_refuses_a_broken_entry_instead_of_replacing_it(tmp_path: Path) -> None:
    text = GOOD.replace(
        '  HSA_OVERRIDE_GFX_VERSION:\n    value: "10.3.0"\n    why: test\n'
        '    evidence: ["https://example.org/1"]\n    confidence: community\n',
        "  HSA_OVERRIDE_GFX_VERSION: [10.3.0]\n",
    )
    assert text != GOOD
    line = load_error(tmp_path, text, ("env.HSA_OVERRIDE_GFX_VERSION=10.3.0",))
    assert "env.HSA_OVERRIDE_GFX_VERSION is a list, not a mapping" in line


def test_error_lines_show_control_characters_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "cpu", "--set", "descr\x1b[2Jiption=x"])
    err = capsys.readouterr().err
    assert code == 2
    assert "\x1b" not in err
    assert "descr\\x1b[2Jiption: unknown key" in err


def test_one_line_escapes_what_a_terminal_would_act_on() -> None:
    err = EnvforgeError("a\x1b[31mb\x07 \udc80 é\ttab", hint="x\ny")
    assert err.one_line() == "a\\x1b[31mb\\x07 \\udc80 é tab (fix: x y)"


def test_render_refuses_what_the_loader_refuses(tmp_path: Path) -> None:
    """A recipe made in code (not loaded) meets the loader's checks in the renderer."""
    recipe = load_recipe_file(write(tmp_path, GOOD))
    for bad in (
        dataclasses.replace(recipe, description="a\x1bb"),
        dataclasses.replace(recipe, name="0.."),
        dataclasses.replace(recipe, description="x" * 5000),
    ):
        with pytest.raises(InvalidInput):
            render_dockerfile(bad)
