"""The site's settings (issue 33 §8): its name and whether node names leave it, from the
environment or the user's file; a bad value is one line naming where it was set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.core.settings import resolve
from envforge.core.sharing import Sharing, sharing
from envforge.errors import ConfigError
from envforge.probe.report import host_info


def _user_file(tmp_path: Path, text: str) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(text, encoding="utf-8")
    return {"ENVFORGE_CONFIG": str(config)}


def test_off_and_unnamed_by_default(tmp_path: Path) -> None:
    assert sharing({"XDG_CONFIG_HOME": str(tmp_path)}) == Sharing("", node_names=False)
    assert Sharing().shared_node("nid001") is None
    assert Sharing("lumi", node_names=True).shared_node("nid001") == "nid001"


@pytest.mark.parametrize(
    ("value", "on"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("no", False)]
)
def test_the_switch_from_the_environment(tmp_path: Path, value: str, on: bool) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path), "ENVFORGE_SHARE_NODE_NAMES": value}
    assert sharing(env).node_names is on


def test_the_user_file_sets_both_and_the_environment_wins(tmp_path: Path) -> None:
    env = _user_file(tmp_path, 'site = "csc.mahti"\nshare_node_names = true\n')
    assert sharing(env) == Sharing("csc.mahti", node_names=True)
    env |= {"ENVFORGE_SITE": "lumi", "ENVFORGE_SHARE_NODE_NAMES": "0"}
    assert sharing(env) == Sharing("lumi", node_names=False)
    settings = resolve(environ=env, keys=("site",))
    assert settings.get("site").origin == "$ENVFORGE_SITE"


def test_bad_values_are_one_line_naming_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$ENVFORGE_SHARE_NODE_NAMES: is 'maybe', not a switch"):
        sharing({"XDG_CONFIG_HOME": str(tmp_path), "ENVFORGE_SHARE_NODE_NAMES": "maybe"})
    with pytest.raises(ConfigError, match="share_node_names: must be true or false, not str"):
        sharing(_user_file(tmp_path, 'share_node_names = "yes"\n'))
    with pytest.raises(ConfigError, match=r"site: '<b>lumi</b>' is not a site name"):
        sharing({"XDG_CONFIG_HOME": str(tmp_path), "ENVFORGE_SITE": "<b>lumi</b>"})


def test_a_probe_report_records_the_site(tmp_path: Path) -> None:
    host = host_info(tmp_path, environ={"ENVFORGE_SITE": "lumi", "XDG_CONFIG_HOME": str(tmp_path)})
    assert host.site == "lumi"
    assert host.to_dict()["site"] == "lumi"
    assert "site" not in host_info(tmp_path, environ={"XDG_CONFIG_HOME": str(tmp_path)}).to_dict()


def test_config_shows_the_switch_as_toml_writes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_SHARE_NODE_NAMES", "yes")
    monkeypatch.setenv("ENVFORGE_SITE", "lumi")
    assert main(["config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.search(
        r"^share_node_names +true +\[environment: \$ENVFORGE_SHARE_NODE_NAMES\]$",
        "\n".join(lines),
        re.M,
    )
    assert any(re.fullmatch(r"site +lumi +\[environment: \$ENVFORGE_SITE\]", ln) for ln in lines)
