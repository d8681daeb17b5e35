"""Recipe loading: one validation at load, errors that name file, key path and fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.errors import RecipeError
from envforge.recipe.load import apply_overrides, load_recipe_file, parse_recipe
from envforge.recipe.model import Recipe

GOOD = """\
name: mine
description: a test recipe
gpu:
  vendor: amd
  arch: gfx1030
  products: ["Radeon RX 6800"]
base_image: ubuntu:22.04
python: "3.10"
rocm: "6.2"
torch:
  version: "2.5.1"
  index: https://download.pytorch.org/whl/rocm6.2
numpy: ">=1.26,<3"
env:
  HSA_OVERRIDE_GFX_VERSION:
    value: "10.3.0"
    why: test
    evidence: ["https://example.org/1"]
    confidence: community
certify:
  step_timeout: 30
  level: quick
"""


@pytest.fixture(autouse=True)
def _no_user_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)


def write(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> str:
    path = write(tmp_path, text)
    with pytest.raises(RecipeError) as info:
        load_recipe_file(path, overrides)
    line = info.value.one_line()
    assert "\n" not in line
    return line


def test_good_recipe_loads(tmp_path: Path) -> None:
    r = load_recipe_file(write(tmp_path, GOOD))
    assert r.name == "mine"
    assert r.python == "3.10"
    assert r.accelerator == "rocm6.2"
    assert r.stack_tag == "torch2.5.1-rocm6.2-py3.10"
    assert r.env_map == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    assert r.env[0].evidence == ("https://example.org/1",)
    assert r.certify.step_timeout == 30.0
    assert r.certify.level == "quick"
    assert r.origin == str(tmp_path / "mine.yaml")


# --------------------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    ("old", "new", "path", "near"),
    [
        ('python: "3.10"', 'pyton: "3.10"', "pyton", "python"),
        ("  index: https", "  idx: https", "torch.idx", "index"),
        ("  level: quick", "  levl: quick", "certify.levl", "level"),
        ("  vendor: amd", "  vendor: amd\n  archs: [gfx1030]", "gpu.archs", "arch"),
        ("    why: test", "    wy: test\n    why: test", "env.HSA_OVERRIDE_GFX_VERSION.wy", "why"),
    ],
)
def test_unknown_key_names_file_path_and_nearest(
    tmp_path: Path, old: str, new: str, path: str, near: str
) -> None:
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    line = load_error(tmp_path, text)
    assert str(tmp_path / "mine.yaml") in line
    assert f": {path}: unknown key" in line
    assert f"did you mean {near!r}?" in line


def test_misplaced_key_suggests_its_full_path(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD + "step_timeout: 5\n")
    assert "step_timeout: unknown key" in line
    assert "did you mean 'certify.step_timeout'?" in line


def test_unknown_key_without_near_match_lists_valid_keys(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD.replace("  level: quick", "  zzzzzz: 1"))
    assert "certify.zzzzzz" in line
    assert "valid keys: step_timeout, level, extra_checks" in line


# --------------------------------------------------------------------------- types


@pytest.mark.parametrize(
    ("old", "new", "path", "expect"),
    [
        ('  products: ["Radeon RX 6800"]', "  products: 5", "gpu.products", "list of strings"),
        ("  step_timeout: 30", "  step_timeout: fast", "certify.step_timeout", "number"),
        ("  step_timeout: 30", "  step_timeout: 0", "certify.step_timeout", "greater than zero"),
        ("  step_timeout: 30", "  step_timeout: true", "certify.step_timeout", "boolean"),
        (
            'torch:\n  version: "2.5.1"\n  index: https://download.pytorch.org/whl/rocm6.2',
            "torch: 2.5.1",
            "torch",
            "expected a mapping",
        ),
        ("  vendor: amd", "  vendor: amdd", "gpu.vendor", "did you mean 'amd'"),
        ("  arch: gfx1030", "  arch: sm_90", "gpu.arch", "not a amd arch"),
        ("    confidence: community", "    confidence: sure", "confidence", "one of: verified"),
        ('rocm: "6.2"', "rocm: six", "rocm", "is not a version"),
        ('python: "3.10"', 'python: "3.10.4"', "python", 'like "3.10"'),
        ("name: mine", "name: Mine Recipe", "name", "not a valid recipe name"),
        ("base_image: ubuntu:22.04", "base_image: 'ubuntu 22.04'", "base_image", "image reference"),
        (
            "  index: https://download.pytorch.org/whl/rocm6.2",
            "  index: ftp://x",
            "torch.index",
            "http(s) URL",
        ),
        ("description: a test recipe", "description: [a, b]", "description", "expected a string"),
    ],
)
def test_wrong_types_are_refused(
    tmp_path: Path, old: str, new: str, path: str, expect: str
) -> None:
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    line = load_error(tmp_path, text)
    assert path in line
    assert expect in line


def test_missing_required_key(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD.replace('numpy: ">=1.26,<3"\n', ""))
    assert "numpy: missing required key" in line


@pytest.mark.parametrize("spec", ["lt 2", "<<2", "2", ">=1.26;<3"])
def test_bad_numpy_specifier(tmp_path: Path, spec: str) -> None:
    line = load_error(tmp_path, GOOD.replace('numpy: ">=1.26,<3"', f'numpy: "{spec}"'))
    assert "numpy:" in line
    assert "not a PEP 440 specifier" in line


@pytest.mark.parametrize("pkg", ["pillow", "pillow>=10", "not a requirement !"])
def test_packages_must_be_pinned_requirements(tmp_path: Path, pkg: str) -> None:
    line = load_error(tmp_path, GOOD + f"packages: [{pkg!r}]\n")
    assert "packages[0]" in line


def test_rocm_and_cuda_together(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD + 'cuda: "12.6"\n')
    assert "rocm or cuda, not both" in line


# --------------------------------------------------------------------------- versions


def test_unquoted_versions_keep_their_text(tmp_path: Path) -> None:
    text = GOOD.replace('python: "3.10"', "python: 3.10").replace('rocm: "6.2"', "rocm: 6.20")
    text = text.replace('  version: "2.5.1"', "  version: 2.10")
    r = parse_or_load(tmp_path, text)
    assert r.python == "3.10"
    assert r.rocm == "6.20"
    assert r.torch.version == "2.10"


def test_set_python_unquoted_stays_3_10(tmp_path: Path) -> None:
    r = load_recipe_file(
        write(tmp_path, GOOD.replace('python: "3.10"', 'python: "3.9"')), ["python=3.10"]
    )
    assert r.python == "3.10"


def test_cuda_patch_version_names_the_minor_variant(tmp_path: Path) -> None:
    text = GOOD.replace('rocm: "6.2"', 'cuda: "12.6.3"').replace("vendor: amd", "vendor: nvidia")
    text = text.replace("arch: gfx1030", "arch: sm_90")
    r = load_recipe_file(write(tmp_path, text))
    assert r.accelerator == "cu126"


def parse_or_load(tmp_path: Path, text: str) -> Recipe:
    return load_recipe_file(write(tmp_path, text))


# --------------------------------------------------------------------------- --set


def test_set_parses_values_as_yaml(tmp_path: Path) -> None:
    r = load_recipe_file(
        write(tmp_path, GOOD),
        [
            "gpu.products=[RX 6800, RX 6900 XT]",
            "certify.step_timeout=12.5",
            "numpy=>=1.24,<2",  # not YAML: taken as written
            "description='with: colon'",
        ],
    )
    assert r.gpu.products == ("RX 6800", "RX 6900 XT")
    assert r.certify.step_timeout == 12.5
    assert r.numpy == ">=1.24,<2"
    assert r.description == "with: colon"
    assert "(with --set " in r.origin


def test_set_env_shorthand(tmp_path: Path) -> None:
    r = load_recipe_file(
        write(tmp_path, GOOD),
        ["env.HSA_OVERRIDE_GFX_VERSION=10.3.1", "env.NEW_VAR=on", "env.EMPTY=", "env.V=1.10"],
    )
    by_name = {e.name: e for e in r.env}
    hsa = by_name["HSA_OVERRIDE_GFX_VERSION"]
    assert hsa.value == "10.3.1"
    assert hsa.why == "test"  # the rest of the entry is kept
    assert hsa.confidence == "community"
    new = by_name["NEW_VAR"]
    assert new.value == "on"
    assert new.confidence == "uncertain"
    assert new.why == "set on the command line"
    assert by_name["EMPTY"].value == ""
    assert by_name["V"].value == "1.10"


def test_set_env_null_removes(tmp_path: Path) -> None:
    r = load_recipe_file(write(tmp_path, GOOD), ["env.HSA_OVERRIDE_GFX_VERSION=null"])
    assert r.env == ()


def test_set_full_env_entry(tmp_path: Path) -> None:
    r = load_recipe_file(
        write(tmp_path, GOOD),
        ["env.X={value: '1', why: because, confidence: verified, evidence: [a]}"],
    )
    x = next(e for e in r.env if e.name == "X")
    assert (x.value, x.why, x.confidence, x.evidence) == ("1", "because", "verified", ("a",))


@pytest.mark.parametrize(
    ("item", "expect"),
    [
        ("novalue", "expected KEY.PATH=VALUE"),
        ("=x", "expected KEY.PATH=VALUE"),
        ("torch..version=1", "expected KEY.PATH=VALUE"),
        ("python.major=3", "is not a mapping"),
        ("gpu.products=[unclosed", "not valid YAML"),
    ],
)
def test_bad_set_items(tmp_path: Path, item: str, expect: str) -> None:
    line = load_error(tmp_path, GOOD, (item,))
    assert "--set" in line
    assert expect in line


def test_set_unknown_key_is_refused_like_in_a_file(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD, ("torch.versoin=2.2.2",))
    assert "torch.versoin: unknown key" in line
    assert "did you mean 'version'?" in line


def test_apply_overrides_creates_nested_mappings() -> None:
    data: dict[str, object] = {}
    apply_overrides(data, ["certify.level=quick"])
    assert data == {"certify": {"level": "quick"}}


# --------------------------------------------------------------------------- YAML level


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD + 'python: "3.11"\n')
    assert "python" in line
    assert "appears twice" in line
    assert "second at line 23" in line


def test_duplicate_nested_keys_are_refused(tmp_path: Path) -> None:
    text = GOOD.replace("  level: quick", "  level: quick\n  level: full")
    line = load_error(tmp_path, text)
    assert "'level' appears twice" in line


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("description: a test recipe", 'description: "two\\nlines"', "description"),
        (
            '    value: "10.3.0"',
            '    value: "10.3.0\\nRUN evil"',
            "env.HSA_OVERRIDE_GFX_VERSION.value",
        ),
        ('  products: ["Radeon RX 6800"]', '  products: ["a\\rb"]', "gpu.products[0]"),
        ("    why: test", '    why: "nul\\0here"', "env.HSA_OVERRIDE_GFX_VERSION.why"),
    ],
)
def test_unquotable_characters_are_refused(tmp_path: Path, old: str, new: str, path: str) -> None:
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    line = load_error(tmp_path, text)
    assert f"{path}: contains" in line
    assert "cannot be quoted safely" in line


def test_newline_through_set_is_refused(tmp_path: Path) -> None:
    line = load_error(tmp_path, GOOD, ('env.X="a\\nb"',))
    assert "env.X.value" in line


def test_invalid_env_name(tmp_path: Path) -> None:
    text = GOOD.replace("  HSA_OVERRIDE_GFX_VERSION:", "  HSA-OVERRIDE:")
    line = load_error(tmp_path, text)
    assert "env.HSA-OVERRIDE" in line
    assert "env-name" in line


def test_not_yaml(tmp_path: Path) -> None:
    line = load_error(tmp_path, "name: [unclosed\n")
    assert "not valid YAML" in line
    assert "line" in line


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    line = load_error(tmp_path, "- a\n- b\n")
    assert "expected a mapping" in line


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe_file(tmp_path / "nope.yaml")
    assert info.value.one_line() == f"{tmp_path / 'nope.yaml'}: no such file"


def test_extra_checks_resolve_relative_to_recipe(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "c.py").write_text("print('x')\n", encoding="utf-8")
    text = GOOD.replace("  level: quick", "  level: quick\n  extra_checks: [checks/c.py]")
    r = load_recipe_file(write(tmp_path, text))
    assert r.certify.extra_checks == ((tmp_path / "checks" / "c.py").resolve(),)
    line = load_error(tmp_path, GOOD.replace("  level: quick", "  extra_checks: [nope.py]"))
    assert "certify.extra_checks[0]" in line
    assert "does not exist" in line


def test_parse_recipe_directly() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe({"name": "x"}, "<test>")
    assert info.value.one_line().startswith("<test>: description: missing required key")


# --------------------------------------------------------------------------- through main()


@pytest.mark.parametrize("command", ["show", "validate", "render"])
def test_bad_recipe_exits_2_without_traceback(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace('python: "3.10"', 'pyton: "3.10"'))
    code = main([command, str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in err + out
    last = err.strip().splitlines()[-1]
    assert last.startswith("envforge: error: ")
    assert "pyton: unknown key" in last
    assert "did you mean 'python'?" in last


def test_missing_file_through_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["show", str(tmp_path / "missing.yaml")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == f"envforge: error: {tmp_path / 'missing.yaml'}: no such file"


def test_bad_set_through_main(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["show", "cpu", "--set", "nonsense"])
    _, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "expected KEY.PATH=VALUE" in err
    assert "Traceback" not in err


def test_debug_shows_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD.replace('python: "3.10"', 'pyton: "3.10"'))
    code = main(["--debug", "show", str(path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" in err


@pytest.mark.parametrize("brk", ["\u2028", "\x85", "\x0b", "\r"])
def test_every_line_break_is_refused_at_load(brk: str, capsys: pytest.CaptureFixture[str]) -> None:
    escaped = brk.encode("unicode_escape").decode()  # YAML double quotes decode it again
    code = main(["validate", "cpu", "--set", f'description="a{escaped}b"'])
    err = capsys.readouterr().err
    assert code == 2
    assert "description: contains" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("debug", [True, False])
def test_unmapped_os_error_is_one_line_with_and_without_debug(
    debug: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    import envforge.cli as cli_module

    def explode(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error", "/somewhere/file")

    monkeypatch.setattr(cli_module.cli, "main", explode)
    code = main(["--debug", "list"] if debug else ["list"])
    err = capsys.readouterr().err
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("envforge: error: ")
    assert "/somewhere/file" in last
    assert ("Traceback" in err) is debug
    assert "UnboundLocalError" not in err
