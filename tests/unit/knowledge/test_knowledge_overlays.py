"""Table overlays (ENVFORGE_KNOWLEDGE_PATH, $XDG_CONFIG_HOME/envforge/knowledge/): rows
merged over the shipped table by identity, provenance on every row, malformed overlays
refused with file, line and key, and no overlay content that crashes the loader."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envforge.cli import main
from envforge.core.resources import data_file
from envforge.errors import TableError
from envforge.knowledge import check, load_table, overlay_files
from envforge.knowledge.parse import parse_layers
from envforge.recipe.catalogue import Catalogue

NEW_RELEASE = """\
schema: 1
releases:
  - series: "2.16"
    versions: ["2.16.0"]
    checked: "2026-11-23"
    python: ["3.11", "3.15"]
    python_source: "test overlay"
    source: "test overlay"
    variants:
      - {name: cpu, confidence: uncertain, source: "test overlay"}
"""


def _env(tmp_path: Path, *paths: Path) -> dict[str, str]:
    """An environment with no user overlays and ENVFORGE_KNOWLEDGE_PATH = ``paths``."""
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"),
        "ENVFORGE_KNOWLEDGE_PATH": os.pathsep.join(str(p) for p in paths),
    }


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _no_user_overlays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.delenv("ENVFORGE_KNOWLEDGE_PATH", raising=False)
    monkeypatch.delenv("ENVFORGE_STRICT", raising=False)


def test_no_overlay_is_the_shipped_table(tmp_path: Path) -> None:
    table = load_table(_env(tmp_path))
    assert table.layers == ("compat.yaml",)
    assert {r.origin for r in table.releases} == {"compat.yaml"}
    assert table is load_table(_env(tmp_path))  # cached per overlay set


def test_overlay_adds_a_release_with_its_file(tmp_path: Path) -> None:
    overlay = _write(tmp_path / "new.yaml", NEW_RELEASE)
    table = load_table(_env(tmp_path, overlay))
    assert table.layers == ("compat.yaml", str(overlay))
    release = table.release("2.16.0")
    assert release is not None
    assert release.origin == str(overlay)
    assert release.variants[0].origin == str(overlay)
    assert table.series("2.15") is not None
    assert table.series("2.15").origin == "compat.yaml"  # type: ignore[union-attr]
    assert len(table.releases) == len(load_table(_env(tmp_path)).releases) + 1


def test_overlay_variant_replaces_the_shipped_row_and_refusals_name_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = load_table(_env(tmp_path))
    cpu = shipped.variant("2.13.0", "cpu")
    assert cpu is not None
    assert cpu.admits_python("3.12")
    overlay = _write(
        tmp_path / "narrow.yaml",
        'schema: 1\nreleases:\n  - series: "2.13"\n    variants:\n'
        '      - {name: cpu, python: ["3.10", "3.11"], python_source: "local test",'
        ' source: "local test"}\n',
    )
    table = load_table(_env(tmp_path, overlay))
    release = table.series("2.13")
    assert release is not None
    assert release.origin == "compat.yaml"  # only a variant was replaced
    assert release.versions == shipped.series("2.13").versions  # type: ignore[union-attr]
    replaced = release.variant("cpu")
    assert replaced is not None
    assert replaced.origin == str(overlay)
    assert not replaced.admits_python("3.12")
    others = [v for v in release.variants if v.name != "cpu"]
    assert others
    assert {v.origin for v in others} == {"compat.yaml"}
    shipped_names = [v.name for v in shipped.series("2.13").variants]  # type: ignore[union-attr]
    assert [v.name for v in release.variants] == shipped_names

    recipe = Catalogue.default().load("cpu", ["torch.version=2.13.0", "python=3.12"])
    found = check(recipe, table)
    assert found
    assert found[0].rule == "python-range"
    assert f"[{overlay}]" in found[0].evidence
    monkeypatch.setenv("ENVFORGE_KNOWLEDGE_PATH", str(overlay))
    code = main(["validate", "cpu", "--set", "torch.version=2.13.0", "--set", "python=3.12"])
    err = capsys.readouterr().err
    assert code == 2
    assert str(overlay) in err


def test_folder_order_and_precedence(tmp_path: Path) -> None:
    first = tmp_path / "first"
    second = tmp_path / "second"
    a = _write(first / "a.yaml", NEW_RELEASE)
    b = _write(second / "b.yaml", NEW_RELEASE.replace('"2.16.0"]', '"2.16.0", "2.16.1"]'))
    _write(first / "ignored.txt", "not yaml: [")
    # the first entry of ENVFORGE_KNOWLEDGE_PATH wins (it is applied last)
    assert overlay_files(_env(tmp_path, first, second)) == (b, a)
    table = load_table(_env(tmp_path, first, second))
    assert table.series("2.16").versions == ("2.16.0",)  # type: ignore[union-attr]
    table = load_table(_env(tmp_path, second, first))
    assert table.series("2.16").versions == ("2.16.0", "2.16.1")  # type: ignore[union-attr]


def test_user_config_folder_is_read_first(tmp_path: Path) -> None:
    user = _write(tmp_path / "cfg" / "envforge" / "knowledge" / "mine.yaml", NEW_RELEASE)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert overlay_files(env) == (user,)
    assert load_table(env).release("2.16.0") is not None
    path_overlay = _write(tmp_path / "p.yaml", NEW_RELEASE.replace("3.15", "3.14"))
    env["ENVFORGE_KNOWLEDGE_PATH"] = str(path_overlay)
    assert overlay_files(env) == (user, path_overlay)
    assert load_table(env).series("2.16").python_max == "3.14"  # type: ignore[union-attr]


def test_cache_follows_file_changes(tmp_path: Path) -> None:
    overlay = _write(tmp_path / "o.yaml", NEW_RELEASE)
    before = load_table(_env(tmp_path, overlay))
    _write(overlay, NEW_RELEASE.replace('"2.16.0"]', '"2.16.0", "2.16.1"]'))
    os.utime(overlay, ns=(1, 1))
    after = load_table(_env(tmp_path, overlay))
    assert after is not before
    assert after.release("2.16.1") is not None


def test_other_sections_merge_by_identity(tmp_path: Path) -> None:
    overlay = _write(
        tmp_path / "o.yaml",
        "schema: 1\n"
        "sources: {LOCAL: local notes}\n"
        "base_images:\n"
        '  - {distro: "Ubuntu 22.04", python: "3.11", match: ["ubuntu:22.04*"], source: LOCAL}\n'
        "nvidia_driver_floor:\n"
        '  - {cuda_major: 13, min: "999", confidence: verified, source: LOCAL}\n'
        "numpy_releases:\n"
        "  source: LOCAL\n"
        "  series:\n"
        '    - {series: "9.9", versions: ["9.9.0"], python: ["3.11", "3.15"]}\n'
        "amd_archs:\n"
        "  gfx1010: {family: RDNA1, products: [Test Card]}\n",
    )
    shipped = load_table(_env(tmp_path))
    table = load_table(_env(tmp_path, overlay))
    assert table.source_text("LOCAL") == "local notes"
    assert table.source_text("TI") == shipped.source_text("TI")
    image = table.base_image("ubuntu:22.04")
    assert image is not None
    assert image.python == "3.11"
    assert image.origin == str(overlay)
    assert len(table.base_images) == len(shipped.base_images)
    assert table.min_driver("13.0") == "999"
    assert len(table.driver_floors) == len(shipped.driver_floors)
    assert table.numpy_releases[-1].series == "9.9"
    assert table.numpy_releases[-1].origin == str(overlay)
    info = table.arch_info("gfx1010")
    assert info is not None
    assert info.products == ("Test Card",)
    assert len(table.amd_archs) == len(shipped.amd_archs)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            NEW_RELEASE.replace("confidence: uncertain", "confidnce: uncertain"),
            "releases[0].variants[0].confidnce (line 10)",
        ),
        (
            NEW_RELEASE.replace('python: ["3.11", "3.15"]', 'python: ["3.15", "3.11"]'),
            "releases[0].python (line 6)",
        ),
        (
            'schema: 1\nreleases:\n  - series: "2.17"\n    versions: ["2.17.0"]\n',
            "releases[0].python (line 3)",
        ),
        ("schema: 2\n", "schema (line 1)"),
        ("schema: 1\nreleases: [\n", "line 3"),
        ("schema: 1\nschema: 1\n", "line 2"),
    ],
)
def test_malformed_overlay_names_file_line_and_key(
    tmp_path: Path,
    text: str,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    overlay = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(TableError) as info:
        load_table(_env(tmp_path, overlay))
    assert str(overlay) in str(info.value)
    assert where in str(info.value)
    monkeypatch.setenv("ENVFORGE_KNOWLEDGE_PATH", str(overlay))
    assert main(["show", "cpu"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"envforge: error: {overlay}: ")
    assert where in lines[0]
    assert captured.out == ""


def test_missing_path_entry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="no such file or folder"):
        load_table(_env(tmp_path, tmp_path / "nope.yaml"))


def test_knowledge_show_prints_the_merged_table_with_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    overlay = _write(tmp_path / "new.yaml", NEW_RELEASE)
    monkeypatch.setenv("ENVFORGE_KNOWLEDGE_PATH", str(overlay))
    assert main(["knowledge", "show", "--json"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["layers"] == ["compat.yaml", str(overlay)]
    rows = {r["series"]: r for r in data["releases"]}
    assert rows["2.16"]["origin"] == str(overlay)
    assert rows["2.16"]["variants"][0]["origin"] == str(overlay)
    assert rows["2.15"]["origin"] == "compat.yaml"
    assert main(["knowledge", "show"]) == 0
    out = capsys.readouterr().out
    assert f"torch 2.16: 2.16.0  [{overlay}]" in out
    assert "torch 2.15:" in out


def test_rocm_arch_facts_name_the_file_of_their_rocm_archs_row(tmp_path: Path) -> None:
    variant_only = _write(
        tmp_path / "v.yaml",
        'schema: 1\nreleases:\n  - series: "2.15"\n    variants:\n'
        '      - {name: rocm7.3, confidence: uncertain, source: "local listing"}\n',
    )
    table = load_table(_env(tmp_path, variant_only))
    variant = table.variant("2.15.0", "rocm7.3")
    assert variant is not None
    assert variant.origin == str(variant_only)
    assert variant.arch_origin("gfx1100") == "compat.yaml"
    with_archs = _write(
        tmp_path / "a.yaml",
        "schema: 1\nrocm_archs:\n"
        '  - {archs: [gfx1152], rocm_min: "7.3", confidence: uncertain, source: "local"}\n',
    )
    table = load_table(_env(tmp_path, with_archs, variant_only))
    variant = table.variant("2.15.0", "rocm7.3")
    assert variant is not None
    assert "gfx1152" in variant.archs
    assert variant.arch_origin("gfx1152") == str(with_archs)
    assert variant.arch_origin("gfx1100") == "compat.yaml"
    recipe = Catalogue.default().load(
        "gfx1100",
        [
            "torch.version=2.15.0",
            "rocm=7.3",
            "gpu.arch=gfx1010",
            f"torch.index={table.index_root}/rocm7.3",
        ],
    )
    found = check(recipe, table)
    assert found[0].rule == "arch-in-wheel"
    assert f"[compat.yaml, {with_archs}]" in found[0].evidence


# --------------------------------------------------------------------------- fuzz

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True),
    st.sampled_from(
        [
            "2.16",
            "2.16.0",
            "3.11",
            "cpu",
            "rocm7.3",
            "cu132",
            "sm_90",
            "gfx1030",
            "uncertain",
            "index-url",
            "",
            "x" * 3,
        ]
    ),
    st.text(max_size=8),
)
_KEYS = st.sampled_from(
    [
        "schema",
        "releases",
        "series",
        "versions",
        "python",
        "python_source",
        "source",
        "variants",
        "name",
        "confidence",
        "sm",
        "sm_source",
        "index",
        "form",
        "pypi_default",
        "numpy_breaks",
        "numpy_source",
        "checked",
        "sources",
        "index_root",
        "base_images",
        "hsa_overrides",
        "archs",
        "value",
        "status",
        "rocm_archs",
        "rocm_min",
        "numpy_releases",
        "amd_archs",
        "nvidia_archs",
        "amd_pci_ids",
        "nvidia_model_names",
        "nvidia_driver_floor",
        "cuda_major",
        "min",
        "match",
        "distro",
        "family",
        "products",
        "other",
    ]
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=5)),
    max_leaves=25,
)
_OVERLAYS = st.one_of(
    st.dictionaries(_KEYS, _VALUES, max_size=6).map(lambda d: {"schema": 1, **d}),
    st.builds(
        lambda rel, var: {"schema": 1, "releases": [{**rel, "variants": [var]}]},
        st.dictionaries(_KEYS, _VALUES, max_size=6),
        st.dictionaries(_KEYS, _VALUES, max_size=6),
    ),
    _VALUES,
)


@functools.cache
def _shipped() -> object:
    """The shipped table's raw data (parse_layers does not change its input)."""
    return yaml.safe_load(data_file("compat.yaml").read_text(encoding="utf-8"))


@settings(max_examples=200, deadline=None)
@given(_OVERLAYS)
def test_no_overlay_data_crashes_the_merge(data: object) -> None:
    line = ""
    try:
        parse_layers([("compat.yaml", _shipped()), ("o.yaml", data)])
    except TableError as exc:
        line = exc.one_line()
    assert "\n" not in line
    assert not line or line.startswith("o.yaml")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.one_of(
        _OVERLAYS.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
        st.text(max_size=200),
        st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
    )
)
def test_no_overlay_file_crashes_the_cli(
    text: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        overlay = Path(folder) / "o.yaml"
        overlay.write_text(text, encoding="utf-8", errors="surrogatepass")
        monkeypatch.setenv("ENVFORGE_KNOWLEDGE_PATH", str(overlay))
        code = main(["validate", "cpu"])
        captured = capsys.readouterr()
    assert code in (0, 2), captured.err
    if code == 2:
        lines = captured.err.strip().splitlines()
        assert lines
        assert lines[-1].startswith("envforge: error: ")
        assert "Traceback" not in captured.err


def test_an_unreadable_default_config_folder_is_not_this_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HOME`` naming another user's home (sudo, setpriv): its folder is not read, and
    no command fails because of it; an ENVFORGE_KNOWLEDGE_PATH entry still must exist."""
    config = tmp_path / "config"
    (config / "envforge" / "knowledge").mkdir(parents=True)

    def refused(self: Path) -> bool:
        if str(self).startswith(str(config)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_dir(self)

    real_is_dir = Path.is_dir
    monkeypatch.setattr(Path, "is_dir", refused)
    assert overlay_files({"XDG_CONFIG_HOME": str(config)}) == ()
