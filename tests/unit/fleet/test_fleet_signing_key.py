"""``fleet plan --signing-key REF``: each task gets the key by reference (a path on the
node, or ``env:NAME``), never a byte of it in the shared plan folder; the task hands
its build the key's path as ``ENVFORGE_SIGNING_KEY`` (a PEM key from a variable: a
private temporary file outside the plan folder, removed after)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from envforge.cli import main
from envforge.errors import InvalidInput
from envforge.fleet.planning import load_plan, make_plan
from envforge.fleet.task import run_task
from envforge.fleet.write import write_plan
from envforge.publish.signing import generate, load_signing_key
from envforge.recipe.catalogue import Catalogue


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """A real key outside any plan folder, and every form of its secret: the PEM file,
    each base64 line of its body, the 32 raw private bytes and their base64."""
    key_path, _pub = generate(tmp_path / "keys", "site")
    pem = key_path.read_bytes()
    private = load_signing_key(key_path)._key
    raw = private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    body = [ln for ln in pem.splitlines() if ln and not ln.startswith(b"-----")]
    return key_path, [pem, *body, raw, base64.b64encode(raw), raw.hex().encode()]


def _leaks(folder: Path, secrets: list[bytes]) -> list[str]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files  # the scan saw the plan's files
    return [str(p) for p in files for s in secrets if s in p.read_bytes()]


@pytest.mark.parametrize(
    "engine_args",
    [
        ["--engine", "slurm", "--backend", "venv"],
        ["--engine", "github", "--backend", "venv"],
        ["--engine", "k8s", "--registry", "127.0.0.1:5000/envforge"],
    ],
)
def test_no_key_bytes_reach_the_plan_folder(
    engine_args: list[str],
    key: tuple[Path, list[bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_path, secrets = key
    monkeypatch.setenv("ENVFORGE_SIGNING_KEY", str(key_path))  # the planner's own: not used
    monkeypatch.setenv("SITE_KEY", secrets[0].decode())
    for ref in (str(key_path), "env:SITE_KEY"):
        out = tmp_path / f"plan-{engine_args[1]}-{ref[:3]}"
        args = ["fleet", "plan", *engine_args, "--recipe", "cpu", "--signing-key", ref]
        assert main([*args, "-o", str(out)]) == 0
        assert _leaks(out, secrets) == []
        assert json.loads((out / "plan.json").read_text())["signing_key"] == ref
        assert load_plan(out).signing_key == ref


def test_a_plan_without_signing_key_names_none(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    assert main(["fleet", "plan", "--engine", "slurm", "--backend", "venv", "--recipe", "cpu",
                 "-o", str(out)]) == 0  # fmt: skip
    assert "signing_key" not in json.loads((out / "plan.json").read_text())


def test_key_material_or_a_key_in_the_plan_folder_is_refused_unquoted(
    key: tuple[Path, list[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _key_path, secrets = key
    out = tmp_path / "plan"
    base = ["fleet", "plan", "--engine", "slurm", "--backend", "venv", "--recipe", "cpu"]
    assert main([*base, "--signing-key", secrets[0].decode(), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "key material" in err
    assert not any(s.decode(errors="replace") in err for s in secrets[1:3])
    inside = out / "keys" / "envforge.key"
    assert main([*base, "--signing-key", str(inside), "-o", str(out)]) == 2
    assert "inside the plan's folder" in capsys.readouterr().err
    assert main([*base, "--signing-key", "env:1BAD", "-o", str(out)]) == 2


def test_a_hand_edited_plan_holding_key_material_is_refused(
    key: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    _key_path, secrets = key
    out = tmp_path / "plan"
    assert main(["fleet", "plan", "--engine", "slurm", "--backend", "venv", "--recipe", "cpu",
                 "-o", str(out)]) == 0  # fmt: skip
    data = json.loads((out / "plan.json").read_text())
    data["signing_key"] = secrets[0].decode()
    (out / "plan.json").write_text(json.dumps(data))
    with pytest.raises(InvalidInput, match="signing_key' holds key material") as info:
        load_plan(out)
    assert secrets[1].decode() not in info.value.one_line()


_CHILD = """
import json, os, stat, sys
path = os.environ.get("ENVFORGE_SIGNING_KEY", "")
seen = {"path": path}
if path and os.path.exists(path):
    seen["mode"] = stat.S_IMODE(os.stat(path).st_mode)
    seen["pem"] = open(path, "rb").read().decode()
json.dump(seen, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("by", ["path", "env-path", "env-pem"])
def test_the_task_hands_its_build_the_key_by_path(
    by: str, key: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    key_path, secrets = key
    seen = tmp_path / "seen.json"
    child = tmp_path / "child.py"
    child.write_text(_CHILD)
    ref = str(key_path) if by == "path" else "env:SITE_KEY"
    plan = make_plan(
        "slurm",
        [("cpu", Catalogue.default({}).load("cpu"))],
        backend="venv",
        images=False,
        envforge=(sys.executable, str(child), str(seen)),
        signing_key=ref,
    )
    folder = tmp_path / "plan"
    write_plan(plan, folder)
    environ = {"PATH": "/usr/bin:/bin", "ENVFORGE_SIGNING_KEY": "/elsewhere/other.key"}
    environ["SITE_KEY"] = secrets[0].decode() if by == "env-pem" else str(key_path)
    assert run_task(load_plan(folder), folder, 0, environ) == 0
    got = json.loads(seen.read_text())
    assert got["pem"] == secrets[0].decode()  # the plan's key, not the node's default
    assert got["mode"] & 0o077 == 0 or by != "env-pem"
    if by == "env-pem":  # a private temporary file, outside the plan, gone after
        assert not Path(got["path"]).exists()
        assert folder not in Path(got["path"]).parents
    else:
        assert got["path"] == str(key_path)
    assert _leaks(folder, secrets) == []


def test_a_task_whose_variable_is_unset_says_so(tmp_path: Path) -> None:
    plan = make_plan(
        "slurm",
        [("cpu", Catalogue.default({}).load("cpu"))],
        backend="venv",
        images=False,
        envforge=(sys.executable, "-c", "pass"),
        signing_key="env:SITE_KEY",
    )
    with pytest.raises(InvalidInput, match="SITE_KEY is not set on this node"):
        run_task(plan, tmp_path, 0, {"PATH": "/usr/bin:/bin"})
