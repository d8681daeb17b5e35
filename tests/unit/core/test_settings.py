"""Settings remembered (envforge.core.settings, ``envforge config``): where the user's
file is, the precedence flag > environment > project > user file > default, each
refusal as one line naming the file, the key and the fix (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envforge import backends
from envforge.cli import cli, main
from envforge.core.mirror import mirrors_from_env
from envforge.core.settings import KEYS, config_path, read_user, resolve
from envforge.errors import ConfigError, InvalidInput, ProjectError
from envforge.project.read import load_project
from tests.helpers.fake_backend import FakeBackend


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh2").mkdir()
    (tmp_path / "ca.pem").write_text("pem\n")
    (tmp_path / "key").write_text("key\n")
    return tmp_path


def _user(site: Path, text: str) -> dict[str, str]:
    path = site / "config.toml"
    path.write_text(text, encoding="utf-8")
    return {"ENVFORGE_CONFIG": str(path)}


# --------------------------------------------------------------------------- the file


def test_config_path_order(tmp_path: Path) -> None:
    assert config_path({"ENVFORGE_CONFIG": str(tmp_path / "c.toml")}) == tmp_path / "c.toml"
    xdg = config_path({"XDG_CONFIG_HOME": str(tmp_path)})
    assert xdg == tmp_path / "envforge" / "config.toml"
    assert config_path({}) == Path.home() / ".config" / "envforge" / "config.toml"


def test_no_file_is_no_settings(tmp_path: Path) -> None:
    assert read_user({"XDG_CONFIG_HOME": str(tmp_path)}) == {}
    values = resolve(environ={"XDG_CONFIG_HOME": str(tmp_path)}).values
    assert [v.key for v in values] == list(KEYS)
    assert {v.source for v in values} == {"default"}


def test_relative_paths_are_read_from_the_files_folder(site: Path) -> None:
    env = _user(site, 'wheelhouse = "wh"\ntrusted_keys = ["key"]\n')
    assert read_user(env) == {"wheelhouse": site / "wh", "trusted_keys": (site / "key",)}


# --------------------------------------------------------------------------- precedence


def test_flag_beats_environment_beats_project_beats_user_file(site: Path) -> None:
    env = _user(site, 'signing_key = "key"\nwheelhouse = "wh"\nregistry = "r.example"\n')
    project = {"signing_key": site / "ca.pem", "wheelhouse": site / "wh2"}
    keys = ("signing_key", "wheelhouse", "registry", "backend")

    def source(flags: dict[str, object], environ: dict[str, str]) -> dict[str, str]:
        settings = resolve(flags, environ=environ, project=project, keys=keys)  # type: ignore[arg-type]
        return {v.key: v.source for v in settings.values}

    everything = {**env, "ENVFORGE_SIGNING_KEY": "/from/env"}
    assert source({"signing_key": Path("/flag"), "wheelhouse": site}, everything) == {
        "signing_key": "flag",
        "wheelhouse": "flag",
        "registry": "user file",
        "backend": "default",
    }
    assert source({}, everything)["signing_key"] == "environment"
    assert source({}, env) == {
        "signing_key": "project",
        "wheelhouse": "project",
        "registry": "user file",
        "backend": "default",
    }
    settings = resolve({}, environ=env, keys=keys)
    assert settings.path("signing_key") == site / "key"
    assert settings.path("wheelhouse") == site / "wh"
    assert settings.text("registry") == "r.example"
    assert resolve({}, environ=everything, keys=keys).path("signing_key") == Path("/from/env")


def test_trusted_keys_from_the_environment_split_on_pathsep(tmp_path: Path) -> None:
    env = {"ENVFORGE_TRUSTED_KEYS": "/a.pub:/b.pub", "XDG_CONFIG_HOME": str(tmp_path)}
    assert resolve(environ=env).paths("trusted_keys") == (Path("/a.pub"), Path("/b.pub"))


def test_the_file_is_not_read_when_every_key_is_given(site: Path) -> None:
    env = _user(site, "this is = = not toml")
    settings = resolve({"wheelhouse": site / "wh"}, environ=env, keys=("wheelhouse",))
    assert settings.get("wheelhouse").source == "flag"
    with pytest.raises(ConfigError):
        resolve({}, environ=env, keys=("wheelhouse",))


def test_project_keys_are_read_and_checked(site: Path) -> None:
    (site / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0"\n[tool.envforge]\nwheelhouse = "wh"\n'
        'backend = "venv"\n'
    )
    project = load_project(site)
    assert dict(project.settings) == {"backend": "venv", "wheelhouse": site / "wh"}
    settings = resolve(
        environ=_user(site, 'backend = "docker"\n'),
        project=dict(project.settings),
        project_file=project.settings_file,
    )
    assert settings.get("backend").source == "project"
    assert str(site / "pyproject.toml") in settings.get("backend").origin


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("text", "key", "fix"),
    [
        ("wheelhose = 'wh'\n", "wheelhose", "did you mean 'wheelhouse'?"),
        ("wheelhouse = 3\n", "wheelhouse", 'wheelhouse = "~/wheels"'),
        ("trusted_keys = 'key'\n", "trusted_keys", "trusted_keys = ["),
        ("registry = ''\n", "registry", 'registry = "NAME"'),
        ("wheelhouse = 'nowhere'\n", "wheelhouse", "fix the path"),
        ("ca_bundle = 'wh'\n", "ca_bundle", "fix the path"),
        ("signing_key = 'ca.pem'\nsigning_key = 'x'\n", "", "TOML syntax"),
        ("wheelhouse =\n", "", "TOML syntax"),
    ],
)
def test_bad_user_file_is_one_line_naming_file_key_and_fix(
    site: Path, text: str, key: str, fix: str
) -> None:
    env = _user(site, text)
    with pytest.raises(ConfigError) as info:
        read_user(env)
    assert info.value.message.startswith(f"{site / 'config.toml'}: {key}")
    assert "\n" not in info.value.message
    assert fix in (info.value.hint or "")


def test_a_named_file_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        read_user({"ENVFORGE_CONFIG": str(tmp_path / "gone.toml")})
    assert "ENVFORGE_CONFIG" in (info.value.hint or "")


def test_project_takes_mirrors_and_refuses_unknown_keys(site: Path) -> None:
    base = '[project]\nname = "p"\nversion = "0"\n[tool.envforge]\n'
    (site / "pyproject.toml").write_text(
        base + 'index_mirror = "https://a=https://b"\nbase_image_mirror = "m.example:5000"\n'
    )
    settings = dict(load_project(site).settings)
    assert settings["index_mirror"] == "https://a=https://b"
    assert settings["base_image_mirror"] == "m.example:5000"
    (site / "pyproject.toml").write_text(base + 'wheelhous = "wh"\n')
    with pytest.raises(ProjectError) as info:
        load_project(site)
    assert "did you mean 'wheelhouse'" in (info.value.hint or "")
    (site / "pyproject.toml").write_text(base + 'ca_bundle = "missing.pem"\n')
    with pytest.raises(ConfigError, match=r"pyproject\.toml: tool\.envforge\.ca_bundle: "):
        load_project(site)


def test_index_mirror_from_the_user_file_and_its_refusal(site: Path) -> None:
    env = _user(site, 'index_mirror = "https://a.example/whl=http://127.0.0.1:9/whl"\n')
    assert mirrors_from_env(env) == (("https://a.example/whl", "http://127.0.0.1:9/whl"),)
    both = {**env, "ENVFORGE_INDEX_MIRROR": "https://b.example=http://127.0.0.1:8"}
    assert mirrors_from_env(both) == (("https://b.example", "http://127.0.0.1:8"),)
    env = _user(site, 'index_mirror = "foo"\n')
    with pytest.raises(InvalidInput, match=r"config\.toml: index_mirror: 'foo'"):
        mirrors_from_env(env)


# --------------------------------------------------------------------------- the command


def test_config_shows_values_and_sources(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _user(site, 'wheelhouse = "wh"\nbackend = "venv"\n').items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ENVFORGE_SIGNING_KEY", "/env/key")
    monkeypatch.delenv("ENVFORGE_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("ENVFORGE_INDEX_MIRROR", raising=False)
    runner = CliRunner()
    done = runner.invoke(cli, ["config", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    rows = {row["key"]: row for row in data["settings"]}
    assert data["file"] == str(site / "config.toml")
    assert rows["wheelhouse"] == {
        "key": "wheelhouse",
        "value": str(site / "wh"),
        "source": "user file",
        "origin": str(site / "config.toml"),
    }
    assert rows["signing_key"]["source"] == "environment"
    assert rows["registry"]["source"] == "default"
    text = runner.invoke(cli, ["config"]).output.splitlines()
    assert len(text) == len(KEYS)
    assert any(
        line.startswith("backend") and "venv" in line and "user file" in line for line in text
    )
    assert runner.invoke(cli, ["config", "path"]).output == f"{site / 'config.toml'}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('backend = "podman"\n', "backend: 'podman' is not a backend"),
        ('index_mirror = "foo"\n', "index_mirror: 'foo' is not ORIGINAL=MIRROR"),
        ("[x\n", "is not valid TOML"),
    ],
)
def test_config_refuses_in_one_line(
    site: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    for name, value in _user(site, text).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ENVFORGE_INDEX_MIRROR", raising=False)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert str(site / "config.toml") in err
    assert "Traceback" not in err


def test_publish_without_a_registry_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("ENVFORGE_CONFIG", raising=False)
    assert main(["publish", "cpu"]) == 2
    assert "no registry given" in capsys.readouterr().err


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    backend = FakeBackend()
    monkeypatch.setitem(backends.BACKENDS, "fake", backend)
    return backend


def test_build_takes_the_users_file_and_the_flag_wins(
    fake: FakeBackend,
    site: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = 'backend = "fake"\nwheelhouse = "wh"\nca_bundle = "ca.pem"\nbase_image = "x:1"\n'
    for name, value in _user(site, text).items():
        monkeypatch.setenv(name, value)
    assert main(["build", "cpu"]) == 0
    assert main(["build", "cpu", "--wheelhouse", str(site / "wh2")]) == 0
    (_, _, first), (_, _, second) = fake.calls
    assert (first.wheelhouse, first.ca_bundle) == (site / "wh", site / "ca.pem")
    assert (second.wheelhouse, second.ca_bundle) == (site / "wh2", site / "ca.pem")
    err = capsys.readouterr().err
    assert f"--wheelhouse {site / 'wh'} (from {site / 'config.toml'})" in err
    assert f"--wheelhouse {site / 'wh2'} (from" not in err
    # docker's --base-image: neither read nor passed for a backend that has no such flag
    assert (first.extra, second.extra) == ({}, {})
    assert "--base-image" not in err
