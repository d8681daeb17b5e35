"""Issue 27 class 6: Docker mounts are structured objects, whatever a folder is called.

``envforge shell`` mounted its working folder with ``--mount type=bind,source=CWD,...``:
from a folder named ``q,consistency=cached`` the CLI read ``source=.../q`` and mounted the
sibling ``q`` read-write at /workspace. The mounts are now ``docker.types.Mount`` values;
the CLI's ``--mount`` value is written from one as a quoted CSV record, which is read
back here with a CSV reader as the docker CLI (Go's encoding/csv) reads it. The fake
engine and a recording ``docker`` on PATH run the real :func:`run_shell`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import pytest

from envforge.backends.docker import shell as docker_shell
from envforge.container.caches import cache_volumes
from envforge.container.devices import DeviceFlags
from envforge.errors import InvalidInput
from envforge.recipe.catalogue import Catalogue
from envforge.render.devcontainer import devcontainer_json
from tests.helpers.fake_engine import FakeEngine

HOSTILE = [
    "q,consistency=cached",
    "a=b",
    "line\nfeed",
    "co:lon",
    "two  spaces ",
    'quo"te',
    "src=/etc,target=/workspace",
    " lead",
    "readonly",
]


def go_csv_record(value: str) -> list[str]:
    """The first record of ``value`` as Go's ``encoding/csv`` Reader.Read returns it (the
    docker CLI's --mount parser): quoted fields with doubled quotes and line breaks; a
    quote in an unquoted field is an error; an unquoted line break ends the record."""
    fields: list[str] = []
    i, n = 0, len(value)
    while True:
        if value.startswith('"', i):
            parts, i = [], i + 1
            while True:
                j = value.find('"', i)
                if j < 0:
                    raise ValueError('extraneous or missing " in quoted-field')
                parts.append(value[i:j])
                i = j + 1
                if not value.startswith('"', i):
                    break
                parts.append('"')
                i += 1
            if i < n and value[i] != ",":
                raise ValueError('extraneous or missing " in quoted-field')
            fields.append("".join(parts))
        else:
            end = min(k for k in (value.find(",", i), value.find("\n", i), n) if k >= 0)
            if '"' in value[i:end]:
                raise ValueError('bare " in non-quoted-field')
            fields.append(value[i:end])
            if end < n and value[end] == "\n":
                return fields
            i = end
        if i >= n:
            return fields
        i += 1


def read_mount(value: str) -> dict[str, str]:
    """A ``--mount`` value read the way the docker CLI reads it: one CSV record, each
    field ``key=value`` split at the first '='."""
    fields = go_csv_record(value)
    found = {}
    for field in fields:
        key, _, val = field.partition("=")
        assert key not in found, f"{key} given twice in {value!r}"
        found[key] = val
    return found


@pytest.mark.parametrize("name", HOSTILE)
def test_the_structured_mount_holds_the_folder_exactly(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    mounts = docker_shell.shell_mounts(folder, cache_volumes("cpu", "s", 1000))
    assert mounts[0]["Source"] == str(folder)
    assert mounts[0]["Target"] == "/workspace"
    assert mounts[0]["Type"] == "bind"
    read = read_mount(docker_shell.mount_option(mounts[0]))
    assert read == {"type": "bind", "source": str(folder), "target": "/workspace"}
    assert go_csv_record('"a""b",c\nd') == ['a"b', "c"]  # the reader reads as Go's does


@pytest.mark.parametrize("name", HOSTILE)
def test_run_shell_passes_the_folder_as_one_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    record = tmp_path / "argv.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "docker"
    cli.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(docker_shell, "bound", lambda _name: contextlib.nullcontext())
    engine = FakeEngine()
    engine.volumes.names += [v.name for v in cache_volumes("cpu", "s", os.getuid())]
    code = docker_shell.run_shell(
        engine,
        image="img",
        command=["true"],
        recipe_name="cpu",
        stack_tag="s",
        env={},
        flags=DeviceFlags(),
        cwd=folder,
    )
    assert code == 0
    argv = json.loads(record.read_text())
    mounts = [read_mount(argv[i + 1]) for i, a in enumerate(argv) if a == "--mount"]
    binds = [m for m in mounts if m["type"] == "bind"]
    assert binds == [{"type": "bind", "source": str(folder), "target": "/workspace"}]
    assert all(m["type"] == "volume" for m in mounts if m not in binds)


def test_a_carriage_return_in_the_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "cr\rhere"
    folder.mkdir(parents=True)
    with pytest.raises(InvalidInput) as caught:
        docker_shell.mount_option(docker_shell.shell_mounts(folder, ())[0])
    assert "\r" not in caught.value.one_line()
    assert caught.value.hint


def test_the_cache_volumes_are_structured_too() -> None:
    vols = cache_volumes("cpu", "s", 1000)
    mounts = docker_shell.shell_mounts(Path("/w"), vols)[1:]
    assert [(m["Type"], m["Source"], m["Target"]) for m in mounts] == [
        ("volume", v.name, v.mount) for v in vols
    ]


@pytest.mark.parametrize("name", HOSTILE[:5])
def test_the_devcontainer_workspace_mount_keeps_the_folder_in_one_field(name: str) -> None:
    recipe = Catalogue.default({}).load("cpu")
    mount = devcontainer_json(recipe, DeviceFlags())["workspaceMount"]
    folder = f"/home/me/{name}"
    read = read_mount(mount.replace("${localWorkspaceFolder}", folder))
    assert read == {"type": "bind", "source": folder, "target": "/workspace"}
