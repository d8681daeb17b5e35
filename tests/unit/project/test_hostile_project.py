"""Hostile projects (issue 27, classes 5, 7 (projects) and 8): real files in real folders.

Class 5: a requirement that is not an archive with a real sha256 (a VCS URL with a fake
``#sha256=``, a local path, a short or non-hex digest, plain http) is refused in one line
naming the file, the requirement and the fix, in every place a project, a recipe or a
lock names one. Class 7: PEP 735 ``include-group`` chains of any length or shape (5,000
groups, loops, a fan-out that doubles at each level) are one line, exit 2, at once.
Class 8: ``envforge init`` never leaves a pyproject.toml that does not parse; ``-r``/``-c``
includes stay inside the project and no error echoes a file's content; fleet output
shows task.json's terminal escapes escaped; contradictory pins are refused.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from envforge.cli import main
from envforge.errors import InvalidInput, ProjectError, RecipeError
from envforge.lock import check_lock
from envforge.project.init import init_project
from envforge.project.read import load_project
from envforge.recipe.load import load_recipe_file
from tests.helpers import paths

HEX = "ab" * 32
ZEROS = "0" * 64
GOLDEN = paths.TESTS / "fixtures" / "recipes" / "golden-cpu.yaml"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refused(folder: Path, *, key: str = "") -> str:
    with pytest.raises(ProjectError) as caught:
        load_project(folder)
    line = caught.value.one_line()
    assert "\n" not in line
    assert key in line
    assert caught.value.hint
    return line


# --------------------------------------------------------------------------- class 5

FAKE_PINS = [
    f"x @ git+https://example.com/x.git#sha256={ZEROS}",
    f"x @ git+https://example.com/x.git@v1#sha256={HEX}",
    f"x @ git+ssh://git@example.com/x.git#sha256={HEX}",
    f"x @ hg+https://example.com/x#sha256={HEX}",
    f"x @ svn+https://example.com/x#sha256={HEX}",
    f"x @ bzr+https://example.com/x#sha256={HEX}",
    f"x @ file:///tmp/x-1.0.tar.gz#sha256={HEX}",
    f"x @ file:../x-1.0.tar.gz#sha256={HEX}",
    "x @ https://example.com/x-1.0.tar.gz#sha256=0000",
    f"x @ https://example.com/x-1.0.tar.gz#sha256={'z' * 64}",
    f"x @ https://example.com/x-1.0.tar.gz#sha256={HEX}0",
    f"x @ https://example.com/x-1.0.tar.gz#md5={HEX[:32]}",
    f"x @ https://example.com/x-1.0.tar.gz#egg=x&sha256={HEX}",
    f"x @ https://example.com/x#sha256={HEX}",
    f"x @ https://example.com/setup.py#sha256={HEX}",
    f"x @ http://example.com/x-1.0.tar.gz#sha256={HEX}",
    f"x @ https://user:pw@example.com/x-1.0.tar.gz#sha256={HEX}",
    f"x @ https://example.com/x-1.0.tar.gz?a=b#sha256={HEX}",
]
GOOD_PINS = [
    f"x @ https://example.com/x-1.0.tar.gz#sha256={HEX}",
    f"x @ https://example.com/x-1.0-py3-none-any.whl#sha256={HEX}",
    f"x @ https://example.com/x-1.0.zip#sha256={HEX}",
    f"x @ http://127.0.0.1:8000/x-1.0.tar.gz#sha256={HEX}",
]


@pytest.mark.parametrize("line", FAKE_PINS)
@pytest.mark.parametrize("where", ["dependencies", "group", "extra", "requirements.txt"])
def test_a_requirement_that_is_not_a_hashed_archive_is_refused(
    tmp_path: Path, line: str, where: str
) -> None:
    if where == "requirements.txt":
        write(tmp_path, "requirements.txt", f"numpy\n{line}\n")
        key = "line 2"
    elif where == "dependencies":
        write(
            tmp_path,
            "pyproject.toml",
            f'[project]\nname = "p"\ndependencies = [{json.dumps(line)}]\n',
        )
        key = "project.dependencies[0]"
    elif where == "extra":
        write(
            tmp_path,
            "pyproject.toml",
            '[project]\nname = "p"\n'
            f"[project.optional-dependencies]\ne = [{json.dumps(line)}]\n"
            '[tool.envforge]\nextras = ["e"]\n',
        )
        key = "project.optional-dependencies.e[0]"
    else:
        write(
            tmp_path,
            "pyproject.toml",
            f'[dependency-groups]\ng = [{json.dumps(line)}]\n[tool.envforge]\ngroups = ["g"]\n',
        )
        key = "dependency-groups.g[0]"
    text = refused(tmp_path, key=key)
    assert "'x'" in text or " x " in text  # the requirement is named
    assert "fix:" in text


@pytest.mark.parametrize("line", GOOD_PINS)
def test_an_archive_with_a_real_sha256_is_accepted(tmp_path: Path, line: str) -> None:
    write(tmp_path, "requirements.txt", f"{line}\n")
    assert load_project(tmp_path).requirements == (line,)


@pytest.mark.parametrize(
    "line",
    [
        "./localpkg",
        "/abs/pkg",
        "../x-1.0.tar.gz",
        "-e .",
        "git+https://example.com/x.git#egg=x",
        "file:x.tar.gz",
    ],
)
def test_a_bare_path_or_vcs_line_in_requirements_txt_is_refused(tmp_path: Path, line: str) -> None:
    write(tmp_path, "requirements.txt", f"{line}\n")
    refused(tmp_path, key="line 1")


@pytest.mark.parametrize("line", FAKE_PINS[:8])
def test_a_recipe_package_with_a_fake_pin_is_refused(tmp_path: Path, line: str) -> None:
    data = yaml.safe_load(GOLDEN.read_text())
    data["packages"] = [line]
    path = write(tmp_path, "r.yaml", yaml.safe_dump(data))
    with pytest.raises(RecipeError, match=r"packages\[0\]"):
        load_recipe_file(path)


@pytest.mark.parametrize("line", FAKE_PINS[:8])
def test_a_lock_never_carries_a_vcs_or_path_reference(tmp_path: Path, line: str) -> None:
    lock = write(tmp_path, "x.lock.txt", f"{line}\n")
    name, _, url = line.partition(" @ ")
    with pytest.raises(InvalidInput, match="not a pinned requirement"):
        check_lock(lock, "cpu", frozenset({(name, url)}))  # even when the stack names it


# --------------------------------------------------------------------------- class 7


def _chain(n: int) -> str:
    lines = ["[dependency-groups]"]
    lines += [f'g{i} = ["p{i}", {{include-group = "g{i + 1}"}}]' for i in range(n - 1)]
    lines += [f'g{n - 1} = ["last"]', "[tool.envforge]", 'groups = ["g0"]']
    return "\n".join(lines) + "\n"


def test_a_5000_group_chain_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", _chain(5000))
    refused(tmp_path, key="dependency-groups")


def test_a_chain_within_the_bound_is_read_in_order(tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", _chain(50))
    assert load_project(tmp_path).requirements == (*[f"p{i}" for i in range(49)], "last")


@pytest.mark.parametrize(
    "groups",
    [
        'a = [{include-group = "b"}]\nb = [{include-group = "a"}]\n',
        'a = ["x", {include-group = "a"}]\n',
        'a = [{include-group = "b"}]\nb = [{include-group = "c"}]\nc = [{include-group = "b"}]\n',
        "a = [{include-group = 3}]\n",
        'a = [{include-group = "nope"}]\n',
    ],
)
def test_group_loops_and_bad_includes_are_one_line(tmp_path: Path, groups: str) -> None:
    write(
        tmp_path,
        "pyproject.toml",
        f'[dependency-groups]\n{groups}[tool.envforge]\ngroups = ["a"]\n',
    )
    refused(tmp_path, key="dependency-groups")


def test_a_doubling_fan_out_is_read_at_once(tmp_path: Path) -> None:
    lines = ["[dependency-groups]"]
    lines += [
        f'g{i} = [{{include-group = "g{i + 1}"}}, {{include-group = "g{i + 1}"}}]'
        for i in range(40)
    ]
    lines += ['g40 = ["leaf"]', "[tool.envforge]", 'groups = ["g0"]']
    write(tmp_path, "pyproject.toml", "\n".join(lines) + "\n")
    start = time.monotonic()  # 2**40 entries if each include were read again
    assert load_project(tmp_path).requirements == ("leaf",)
    assert time.monotonic() - start < 5


def test_a_diamond_is_read_once_per_include(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pyproject.toml",
        "[dependency-groups]\n"
        'a = [{include-group = "b"}, {include-group = "c"}]\nb = ["x", {include-group = "d"}]\n'
        'c = ["y", {include-group = "d"}]\nd = ["z"]\n[tool.envforge]\ngroups = ["a"]\n',
    )
    assert load_project(tmp_path).requirements == ("x", "z", "y")


# --------------------------------------------------------------------------- class 8: init

BROKEN_BY_APPEND = [
    '[project]\nname = "p"\ntool = {black = {line-length = 88}}\n',
    'tool = {}\n[project]\nname = "p"\n',
    '[project]\nname = "p"\n[ tool . envforge ]\n',
    '[project]\nname = "p"\n["tool".envforge]\n',
    '[project]\nname = "p"\n[tool]\nenvforge = {}\n',
    '[project]\nname = "p"\n[tool.envforge]\n',
]


@pytest.mark.parametrize("text", BROKEN_BY_APPEND)
def test_init_never_leaves_a_pyproject_that_does_not_parse(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import tomllib

    path = write(tmp_path, "pyproject.toml", text)
    code = main(["init", str(tmp_path)])
    after = path.read_text()
    tomllib.loads(after)  # whatever happened, the file parses
    if code == 0:
        assert tomllib.loads(after)["tool"]["envforge"]["recipe"] == "auto"
    else:
        assert code == 2
        assert after == text  # refused: the file as it was
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "pyproject.toml" in err
        assert "fix:" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]


def test_init_after_dotted_tool_keys_appends_a_section_that_parses(tmp_path: Path) -> None:
    import tomllib

    write(tmp_path, "pyproject.toml", '[project]\nname = "p"\n[tool]\nblack.line-length = 88')
    path = init_project(tmp_path)
    data = tomllib.loads(path.read_text())
    assert data["tool"]["black"] == {"line-length": 88}
    assert data["tool"]["envforge"]["recipe"] == "auto"


# --------------------------------------------------------------------------- class 8: includes

SECRET = "TOKEN=hunter2-secret-value"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = write(tmp_path, "outside/secret.txt", f"{SECRET}\n")
    (tmp_path / "proj").mkdir()
    return path


@pytest.mark.parametrize("option", ["-r", "-c", "--requirement", "--constraint="])
@pytest.mark.parametrize(
    "target",
    [
        "/etc/passwd",
        "/proc/self/environ",
        "ABS",
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "LINK",
        "DIRLINK/secret.txt",
    ],
)
def test_includes_stay_inside_the_project(
    tmp_path: Path, outside: Path, option: str, target: str
) -> None:
    proj = tmp_path / "proj"
    (proj / "link.txt").symlink_to(outside)
    (proj / "dirlink").symlink_to(outside.parent)
    target = {
        "ABS": str(outside),
        "LINK": "link.txt",
        "DIRLINK/secret.txt": "dirlink/secret.txt",
    }.get(target, target)
    sep = "" if option.endswith("=") else " "
    write(proj, "requirements.txt", f"numpy\n{option}{sep}{target}\n")
    text = refused(proj, key="line 2")
    assert "outside the project" in text
    assert SECRET not in text
    assert "root:" not in text


def test_a_requirements_txt_that_links_outside_is_refused(tmp_path: Path, outside: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "requirements.txt").symlink_to(outside)
    text = refused(proj)
    assert SECRET not in text


def test_an_include_inside_the_project_through_a_link_is_followed(tmp_path: Path) -> None:
    write(tmp_path, "reqs/base.txt", "numpy\n")
    (tmp_path / "base-link.txt").symlink_to(tmp_path / "reqs" / "base.txt")
    write(tmp_path, "requirements.txt", "-r base-link.txt\n-c reqs/base.txt\n")
    project = load_project(tmp_path)
    assert project.requirements == ("numpy",)
    assert project.constraints == ("numpy",)


@pytest.mark.parametrize(
    "line",
    [
        SECRET,
        f"{SECRET} --hash=x",
        f"pkg; {SECRET}",
        f"x @ git+https://{SECRET}@h/x.git",
        f"--{SECRET}",
    ],
)
def test_errors_never_echo_a_line_of_the_file(tmp_path: Path, line: str) -> None:
    write(tmp_path, "requirements.txt", f"{line}\n")
    text = refused(tmp_path, key="line 1")
    assert "hunter2" not in text


# --------------------------------------------------------------------------- class 8: pins

CONTRADICTIONS = [
    ("requirements.txt", "torchvision==0.28.0\ntorchvision==0.29.0\n"),
    ("requirements.txt", "torchvision==0.28.0\nTorchVision==0.29.0\n"),
    ("requirements.txt", "numpy==1.26.4\nnumpy==2.0.0\n"),
    ("requirements.txt", "torchvision==0.28.0\n-c c.txt\n"),
    (
        "pyproject.toml",
        '[project]\nname = "p"\ndependencies = ["torchvision==0.28.0"]\n'
        '[dependency-groups]\ng = ["torchvision==0.29.0"]\n[tool.envforge]\ngroups = ["g"]\n',
    ),
    (
        "pyproject.toml",
        '[project]\nname = "p"\ndependencies = ["torchvision==0.28.0", "torchvision==0.29.0"]\n',
    ),
    (
        "pyproject.toml",
        '[project]\nname = "p"\ndependencies = ["torchaudio==2.13.0", "torchaudio>2.13.0"]\n',
    ),
]


@pytest.mark.parametrize(("name", "text"), CONTRADICTIONS)
def test_contradictory_pins_in_a_project_are_refused(tmp_path: Path, name: str, text: str) -> None:
    write(tmp_path, name, text)
    write(tmp_path, "c.txt", "torchvision==0.29.0\n")
    text = refused(tmp_path)
    assert "contradict" in text


def test_pins_under_exclusive_markers_are_not_a_contradiction(tmp_path: Path) -> None:
    write(
        tmp_path,
        "requirements.txt",
        'numpy==1.26.4; python_version < "3.12"\n'
        'numpy==2.1.0; python_version >= "3.12"\ntorchvision==0.28.0\ntorchvision\n',
    )
    assert len(load_project(tmp_path).requirements) == 4


@pytest.mark.parametrize(
    "packages",
    [
        ["torchvision==0.28.0", "torchvision==0.29.0"],
        ["torchvision", "torchvision==0.29.0"],
        ["pandas==2.2.3", "Pandas==2.2.2"],
        ["pandas==2.2.3", "pandas==2.2.3"],
    ],
)
def test_a_recipe_pinning_a_package_twice_is_refused(tmp_path: Path, packages: list[str]) -> None:
    data = yaml.safe_load(GOLDEN.read_text())
    data["packages"] = packages
    path = write(tmp_path, "r.yaml", yaml.safe_dump(data))
    with pytest.raises(RecipeError, match=r"packages\[1\].*twice"):
        load_recipe_file(path)


# --------------------------------------------------------------------------- class 8: fleet

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m"


@pytest.mark.parametrize("field", ["node", "exit", "granted"])
def test_fleet_status_and_collect_show_task_json_escaped(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    field: str,
) -> None:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    out = tmp_path / "plan"
    assert main(["fleet", "plan", "--engine", "github", "--recipe", "cpu", "-o", str(out)]) == 0
    task = {"exit": 3, "node": "n1", "granted": {"gpus": "1"}}
    task[field] = {"gpus": ESCAPES} if field == "granted" else ESCAPES
    report = out / "reports" / "000"
    report.mkdir(parents=True, exist_ok=True)
    (report / "task.json").write_text(json.dumps(task))
    capsys.readouterr()
    for command, *json_flag in (
        ("status",),
        ("collect",),
        ("status", "--json"),
        ("collect", "--json"),
    ):
        assert main(["fleet", command, str(out), *json_flag]) == 1
        printed = capsys.readouterr()
        assert "\x1b" not in printed.out + printed.err
        assert "\x9b" not in printed.out + printed.err
        assert "\x07" not in printed.out + printed.err
