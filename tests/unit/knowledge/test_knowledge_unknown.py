"""Unknown is not impossible: a stack the compatibility table has no row for (a new
release, a nightly, a variant newer than the table or missing from an unconfirmed list,
an index outside the table's root) is accepted with one warning line and the recipe's
effective confidence ``uncertain``; ``--strict`` / ``ENVFORGE_STRICT=1`` refuse it. And
ENVFORGE_INDEX_MIRROR: index URLs rewritten at render time, the recipe hash unchanged.

The impossible stacks stay refused: tests/unit/knowledge/test_knowledge.py (IMPOSSIBLE).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envforge.cli import main
from envforge.core.mirror import parse_mirrors, rewrite
from envforge.core.resources import data_file
from envforge.errors import ConstraintViolation, InvalidInput
from envforge.knowledge import check, effective_confidence, enforce, split, unknowns
from envforge.lock import source_args
from envforge.recipe.catalogue import Catalogue
from envforge.render import RenderOptions, plan_venv, render_dockerfile

#: The shipped table's PyTorch wheel root (read from the table, not written here).
WHL = str(yaml.safe_load(data_file("compat.yaml").read_text(encoding="utf-8"))["index_root"])
LOCAL = "http://127.0.0.1:9/simple"

#: (id, recipe, --set overrides, rule id, what the warning must name)
UNKNOWN: list[tuple[str, str, list[str], str, str]] = [
    ("new-release-2.16.0", "cpu", ["torch.version=2.16.0"], "torch-release", "torch 2.16.0"),
    (
        "nightly-2.16.0.dev20261120",
        "cpu",
        ["torch.version=2.16.0.dev20261120", f"torch.index={WHL}/nightly/cpu"],
        "torch-release",
        "torch 2.16.0.dev20261120",
    ),
    ("patch-of-newest-2.15.1", "cpu", ["torch.version=2.15.1"], "torch-release", "2.15.1"),
    (
        "variant-rocm7.3",
        "gfx1100",
        ["torch.version=2.15.0", "rocm=7.3", f"torch.index={WHL}/rocm7.3"],
        "variant-published",
        "rocm7.3",
    ),
    (
        "variant-cu140-newer-than-the-table",
        "sm_90",
        ["torch.version=2.15.0", "cuda=14.0", f"torch.index={WHL}/cu140"],
        "variant-published",
        "cu140",
    ),
    ("unknown-index-url", "sm_90", [f"torch.index={LOCAL}/cu130"], "index-url", LOCAL),
    (
        "amd-per-arch-index",
        "gfx1100",
        [f"torch.index={LOCAL}/rocm/gfx110X"],
        "index-url",
        f"{LOCAL}/rocm/gfx110X",
    ),
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "ENVFORGE_RECIPE_PATH",
        "ENVFORGE_STRICT",
        "ENVFORGE_KNOWLEDGE_PATH",
        "ENVFORGE_INDEX_MIRROR",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))


def _set_args(overrides: list[str]) -> list[str]:
    out: list[str] = []
    for o in overrides:
        out += ["--set", o]
    return out


CASES = [pytest.param(r, o, rule, what, id=i) for i, r, o, rule, what in UNKNOWN]


@pytest.mark.parametrize(("recipe", "overrides", "rule", "what"), CASES)
def test_unknown_passes_with_one_warning(
    recipe: str,
    overrides: list[str],
    rule: str,
    what: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loaded = Catalogue.default().load(recipe, overrides)
    found = check(loaded)
    assert [v.rule for v in found] == [rule]
    assert found[0].kind == "unknown"
    assert effective_confidence(loaded) == "uncertain"

    code = main(["show", recipe, *_set_args(overrides)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("envforge: warning: ")
    assert f"[{rule}]" in lines[0]
    assert what in lines[0]
    assert "confidence uncertain" in captured.out

    code = main(["validate", recipe, *_set_args(overrides)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "(uncertain)" in captured.out
    assert what in captured.err


@pytest.mark.parametrize(("recipe", "overrides", "rule", "what"), CASES)
def test_unknown_fails_with_strict(  # noqa: PLR0917 - parametrize + fixtures
    recipe: str,
    overrides: list[str],
    rule: str,
    what: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for argv in (
        ["show", recipe, "--strict", *_set_args(overrides)],
        ["--strict", "validate", recipe, *_set_args(overrides)],
        ["render", recipe, "--strict", *_set_args(overrides)],
    ):
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 2, argv
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert lines[-1].startswith("envforge: error: "), argv
        assert f"[{rule}]" in lines[-1]
        assert what in lines[-1]
        assert "Traceback" not in captured.err
    monkeypatch.setenv("ENVFORGE_STRICT", "1")
    assert main(["show", recipe, *_set_args(overrides)]) == 2
    assert f"[{rule}]" in capsys.readouterr().err
    loaded = Catalogue.default().load(recipe, overrides)
    with pytest.raises(ConstraintViolation):
        enforce(loaded)
    assert enforce(loaded, strict=False, warn=lambda _line: None)


def test_known_recipes_are_not_uncertain() -> None:
    for name, path in Catalogue.default().files().items():
        recipe = Catalogue.default().load(str(path))
        assert unknowns(recipe) == [], name
        assert effective_confidence(recipe) == "known", name


def test_split_and_strict_keep_impossible_first() -> None:
    recipe = Catalogue.default().load("cpu", ["torch.version=2.16.0", "python=3.10"])
    found = check(recipe)
    assert [v.kind for v in found] == ["unknown", "impossible"]
    refused, warned = split(found)
    assert [v.rule for v in refused] == ["base-python"]
    assert [v.rule for v in warned] == ["torch-release"]
    refused, warned = split(found, strict=True)
    assert len(refused) == 2
    assert warned == []


def test_uncertain_stack_is_labelled_in_the_dockerfile() -> None:
    known = render_dockerfile(Catalogue.default().load("cpu"))
    assert "io.envforge.confidence" not in known
    unknown = render_dockerfile(Catalogue.default().load("cpu", ["torch.version=2.16.0"]))
    assert 'io.envforge.confidence="uncertain"' in unknown


# --------------------------------------------------------------------------- mirrors


def test_parse_and_rewrite_mirrors() -> None:
    mirrors = parse_mirrors(f"{WHL}=http://127.0.0.1:8/whl  {WHL}/cu130/=http://127.0.0.1:7/c")
    assert mirrors[0] == (f"{WHL}/cu130", "http://127.0.0.1:7/c")  # longest first
    assert rewrite(f"{WHL}/cu130", mirrors) == "http://127.0.0.1:7/c"
    assert rewrite(f"{WHL}/rocm7.2", mirrors) == "http://127.0.0.1:8/whl/rocm7.2"
    assert rewrite(f"{WHL}x/cpu", mirrors) == f"{WHL}x/cpu"
    assert rewrite("http://127.0.0.1:9/simple", mirrors) == "http://127.0.0.1:9/simple"
    assert parse_mirrors("  ") == ()


@pytest.mark.parametrize(
    "bad", ["nonsense", f"{WHL}=", f"{WHL}=ftp://x", "a=b=c", f"{WHL}=http://a {WHL}=http://b"]
)
def test_bad_mirror_is_refused(bad: str) -> None:
    with pytest.raises(InvalidInput, match="ENVFORGE_INDEX_MIRROR"):
        parse_mirrors(bad)


def test_mirror_rewrites_render_and_lock_not_the_hash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = Catalogue.default().load("sm_90")
    assert recipe.torch.index is not None
    assert recipe.torch.index.startswith(WHL)
    plain = render_dockerfile(recipe)
    mirror = "http://127.0.0.1:8/pt"
    mirrored_index = recipe.torch.index.replace(WHL, mirror)
    monkeypatch.setenv("ENVFORGE_INDEX_MIRROR", f"{WHL}={mirror}")
    again = Catalogue.default().load("sm_90")
    assert again.hash == recipe.hash
    text = render_dockerfile(again)
    assert recipe.torch.index not in text
    assert mirrored_index in text
    recorded = f' \\\n      io.envforge.index-mirror="{WHL}={mirror}"'
    assert recorded in text  # the image records the mirror it was built through
    assert text.replace(recorded, "").replace(mirrored_index, recipe.torch.index) == plain
    setup = plan_venv(again).setup_script
    assert mirrored_index in setup
    assert recipe.torch.index not in setup
    assert source_args(again, None) == ["--extra-index-url", mirrored_index]
    explicit = render_dockerfile(again, RenderOptions(mirrors=()))
    assert explicit == plain
    assert main(["render", "sm_90"]) == 0
    assert mirrored_index in capsys.readouterr().out
    monkeypatch.setenv("ENVFORGE_INDEX_MIRROR", "oops")
    assert main(["render", "sm_90"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "ENVFORGE_INDEX_MIRROR" in err[0]
