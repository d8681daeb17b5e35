"""``system_packages``: Debian/Ubuntu packages a recipe needs, installed in the image after
the venv's layers, checked on the host for a venv (issue 19 §8)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from envforge.backends.venv import VenvOptions
from envforge.backends.venv.building import _check_system_packages
from envforge.errors import InvalidInput, Unavailable
from envforge.host.syspkg import missing_packages
from envforge.project.read import load_project
from envforge.recipe.catalogue import Catalogue
from envforge.render import RenderOptions, render_dockerfile
from tests.helpers import paths

ROOT = paths.ROOT
CPU = Catalogue.default({}).load("cpu")


def recipe_file(folder: Path, system: str) -> Path:
    text = (ROOT / "recipes" / "cpu.yaml").read_text(encoding="utf-8")
    path = folder / "cpu.yaml"
    path.write_text(text + f"system_packages: {system}\n", encoding="utf-8")
    return path


def test_names_are_read_and_part_of_the_hash_only_when_given(tmp_path: Path) -> None:
    cat = Catalogue.default({})
    with_them = cat.load(str(recipe_file(tmp_path, "[ffmpeg, libgl1]")))
    assert with_them.system_packages == ("ffmpeg", "libgl1")
    assert with_them.hash != CPU.hash
    assert "system_packages" not in CPU.to_dict()  # older hashes stay as they were


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("[FFmpeg]", "system_packages[0]"),
        ("['libgl1; rm -rf /']", "is not a Debian package name"),
        ("[ffmpeg, ffmpeg]", "listed twice"),
        ("ffmpeg libgl1", "is not a Debian package name"),
    ],
)
def test_bad_names_are_one_line_naming_the_key(tmp_path: Path, given: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Catalogue.default({}).load(str(recipe_file(tmp_path, given)))
    line = caught.value.one_line()
    assert words in line
    assert "system_packages" in line
    assert "\n" not in line


def test_the_image_installs_them_after_the_venv_layers() -> None:
    text = render_dockerfile(
        dataclasses.replace(CPU, system_packages=("ffmpeg", "libgl1")), RenderOptions()
    )
    final = text[text.rindex("\nFROM ") :]
    apt = final.index("apt-get install -y --no-install-recommends ffmpeg libgl1")
    assert final.index("COPY --from=build") < apt  # torch's and the rest's layers first
    assert "apt-get install -y --no-install-recommends ffmpeg" not in text[: text.rindex("\nFROM ")]
    assert "ffmpeg" not in render_dockerfile(CPU, RenderOptions())


def test_this_hosts_dpkg_answers_which_are_missing() -> None:
    missing = missing_packages(["bash", "envforge-no-such-package"])
    if missing is None:
        pytest.skip("not a Debian or Ubuntu host (no dpkg-query)")
    assert missing == ["envforge-no-such-package"]


def test_a_venv_build_names_what_is_missing_before_installing_anything() -> None:
    recipe = dataclasses.replace(CPU, system_packages=("bash", "envforge-no-such-package"))
    if missing_packages(["bash"]) is None:
        pytest.skip("not a Debian or Ubuntu host (no dpkg-query)")
    with pytest.raises(Unavailable) as caught:
        _check_system_packages(recipe, VenvOptions())
    assert caught.value.exit_code == 4
    assert "envforge-no-such-package" in caught.value.message
    assert "bash" not in caught.value.message.split(":", 1)[1]
    assert caught.value.hint == (
        "apt-get install envforge-no-such-package (as root), then build again"
    )


def test_a_projects_system_packages_are_checked_on_the_host_too(tmp_path: Path) -> None:
    if missing_packages(["bash"]) is None:
        pytest.skip("not a Debian or Ubuntu host (no dpkg-query)")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "needs-apt"\nversion = "1"\n'
        '[tool.envforge]\nsystem_packages = ["bash", "envforge-no-such-package"]\n',
        encoding="utf-8",
    )
    options = VenvOptions(project=load_project(tmp_path))
    with pytest.raises(Unavailable) as caught:
        _check_system_packages(CPU, options)
    assert caught.value.message == (
        "cpu with the project needs-apt needs system packages"
        " this host lacks: envforge-no-such-package"
    )
