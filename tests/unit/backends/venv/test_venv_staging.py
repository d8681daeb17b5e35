"""A project's rebuild from its certified venv (envforge.backends.venv.staging): which
distributions are the stack's, what the clone links and copies, and when certification
may re-run only what the change can affect (issue 19 §3)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.backends.venv.interpreter import Interpreter
from envforge.backends.venv.layout import VenvBuildResult
from envforge.backends.venv.staging import (
    Base,
    Incremental,
    clone,
    incremental_record,
    plan_incremental,
    stack_closure,
)
from envforge.backends.venvfs import content_digests
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP, ProbeSpec
from envforge.project.model import Project

SP = "lib/python3.11/site-packages"
STEPS = (
    "env-snapshot",
    "matmul",
    "import:torch",
    "import:six",
    "import:pyparsing",
    "check:import demo",
    "check:tests/smoke.py",
)


def _hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def add_dist(
    venv: Path, name: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = ()
) -> None:
    """A distribution as an installer leaves it: its files, METADATA and RECORD."""
    sp = venv / SP
    info = sp / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
        + "\nA description.\nRequires-Dist: nope\n"
    )
    (info / "METADATA").write_text(meta, encoding="utf-8")
    rows = [f"{info.name}/METADATA,sha256={_hash(meta.encode())},{len(meta)}"]
    for rel, data in files.items():
        path = Path(os.path.normpath(sp / rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},sha256={_hash(data)},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.fixture
def certified(tmp_path: Path) -> Base:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    (venv / "bin" / "envforge-env.sh").write_text("export A=1\n", encoding="utf-8")
    add_dist(
        venv,
        "torch",
        "2.13.0+cpu",
        {
            "torch/__init__.py": b"T = 1\n",
            "torch/lib/libtorch.so": b"\0" * 64,
            "../../../bin/torchrun": b"#!/bin/sh\n",
        },
        requires=(
            "filelock",
            'opt-einsum>=3.3; extra == "opt-einsum"',
            'old-backport; python_version < "3.8"',
        ),
    )
    add_dist(venv, "filelock", "3.0", {"filelock/__init__.py": b"F = 1\n"})
    add_dist(venv, "six", "1.17.0", {"six.py": b"S = 1\n"})
    (venv / ".envforge").mkdir()
    (venv / ".envforge" / "certified.json").write_text("{}", encoding="utf-8")
    cert = {
        "content": content_digests(venv),
        "level": "full",
        "fingerprint": "sha256:f",
        "project": "demo-1234abcd:old",
        "report": {"steps": ["the full report"]},
    }
    return Base(venv, cert, "sha256:c", "3.11.7", stack_closure(venv, ["torch"], "3.11.7"))


def test_the_stack_is_what_torch_requires_without_extras_or_other_pythons(
    certified: Base,
) -> None:
    assert dict(certified.closure) == {
        "torch": "torch-2.13.0+cpu.dist-info",
        "filelock": "filelock-3.0.dist-info",
    }


def test_the_clone_links_the_stack_and_copies_the_rest(certified: Base, tmp_path: Path) -> None:
    dest = tmp_path / "aside"
    dest.mkdir()
    assert clone(certified, dest) > 0
    src, sp = certified.path, Path(SP)
    for rel in (
        sp / "torch/lib/libtorch.so",
        sp / "filelock/__init__.py",
        Path("bin/torchrun"),
        sp / "torch-2.13.0+cpu.dist-info/RECORD",
    ):
        assert os.stat(dest / rel).st_ino == os.stat(src / rel).st_ino, rel
    for rel in (sp / "six.py", Path("pyvenv.cfg"), Path("bin/envforge-env.sh")):
        assert os.stat(dest / rel).st_ino != os.stat(src / rel).st_ino, rel
        assert (dest / rel).read_bytes() == (src / rel).read_bytes()
    assert os.readlink(dest / "bin/python") == "/usr/bin/python3"
    assert not (dest / ".envforge").exists()  # the certificate is not the clone's


def _cloned(base: Base, tmp_path: Path) -> Path:
    dest = tmp_path / "aside"
    dest.mkdir()
    clone(base, dest)
    return dest


def _project(tmp_path: Path) -> Project:
    return Project(root=tmp_path, source=tmp_path / "pyproject.toml", name="demo")


def test_an_added_dependency_reruns_its_import_and_the_projects_checks(
    certified: Base, tmp_path: Path
) -> None:
    aside = _cloned(certified, tmp_path)
    add_dist(aside, "pyparsing", "3.3.3", {"pyparsing/__init__.py": b"P = 1\n"})
    plan = plan_incremental(
        certified,
        aside,
        content_digests(aside),
        level="full",
        project=_project(tmp_path),
        steps=STEPS,
    )
    assert isinstance(plan, Incremental), plan
    assert plan.steps == ("import:pyparsing", "check:import demo", "check:tests/smoke.py")
    assert plan.changed == ("pyparsing 3.3.3",)
    assert plan.unchanged == ("filelock 3.0", "torch 2.13.0+cpu")
    record = incremental_record(certified, plan)
    assert record["extends"]["certificate_sha256"] == "sha256:c"
    assert record["base_report"] == {"steps": ["the full report"]}


def test_a_changed_project_dependency_is_imported_again(certified: Base, tmp_path: Path) -> None:
    aside = _cloned(certified, tmp_path)
    shutil.rmtree(aside / SP / "six-1.17.0.dist-info")  # an upgrade: uninstalled, then
    (aside / SP / "six.py").unlink()  # the new version installed
    add_dist(aside, "six", "1.18.0", {"six.py": b"S = 2\n"})
    plan = plan_incremental(
        certified, aside, content_digests(aside), level="full", project=None, steps=STEPS
    )
    assert isinstance(plan, Incremental), plan
    assert "import:six" in plan.steps
    assert "import:torch" not in plan.steps


def test_the_gpu_steps_run_again_whatever_changed(certified: Base, tmp_path: Path) -> None:
    """Health and the collective are about the GPUs now, not about the change."""
    aside = _cloned(certified, tmp_path)
    add_dist(aside, "pyparsing", "3.3.3", {"pyparsing/__init__.py": b"P = 1\n"})
    steps = (*STEPS, COLLECTIVE_STEP, HEALTH_STEP)
    plan = plan_incremental(
        certified, aside, content_digests(aside), level="full", project=None, steps=steps
    )
    assert isinstance(plan, Incremental), plan
    assert plan.steps == (
        "import:pyparsing",
        "check:import demo",
        "check:tests/smoke.py",
        COLLECTIVE_STEP,
        HEALTH_STEP,
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda v: (
                (v / SP / "torch/__init__.py").unlink(),
                (v / SP / "torch/__init__.py").write_bytes(b"T = 2\n"),
            ),
            "torch 2.13.0+cpu's files differ",
        ),
        (
            lambda v: (v / SP / "filelock-3.0.dist-info" / "RECORD").unlink(),
            "filelock 3.0's files differ",
        ),
        (lambda v: (v / SP / "evil.pth").write_text("import os\n"), "start-up"),
        (
            lambda v: (
                (v / "bin/envforge-env.sh").unlink(),
                (v / "bin/envforge-env.sh").write_text("export A=2\n"),
            ),
            "start-up",
        ),
    ],
    ids=["torch-file-replaced", "stack-dist-record-gone", "new-pth", "recipe-variables"],
)
def test_anything_of_the_stack_changed_means_the_full_probe(
    certified: Base, tmp_path: Path, change: Callable[[Path], object], why: str
) -> None:
    aside = _cloned(certified, tmp_path)
    change(aside)
    plan = plan_incremental(
        certified, aside, content_digests(aside), level="full", project=None, steps=STEPS
    )
    assert isinstance(plan, str)
    assert why in plan


def test_a_removed_stack_dependency_means_the_full_probe(certified: Base, tmp_path: Path) -> None:
    aside = _cloned(certified, tmp_path)
    for p in (aside / SP).glob("filelock*"):
        shutil.rmtree(p)
    plan = plan_incremental(
        certified, aside, content_digests(aside), level="full", project=None, steps=STEPS
    )
    assert plan == "filelock changed (filelock 3.0 -> absent)"


def test_a_quick_certificate_is_not_extended_to_a_full_one(certified: Base, tmp_path: Path) -> None:
    quick = Base(
        certified.path,
        {**certified.cert, "level": "quick"},
        "sha256:c",
        "3.11.7",
        certified.closure,
    )
    aside = _cloned(quick, tmp_path)
    plan = plan_incremental(
        quick, aside, content_digests(aside), level="full", project=None, steps=STEPS
    )
    assert isinstance(plan, str)
    assert "quick" in plan


def test_a_probe_spec_runs_only_the_steps_asked_for_in_order() -> None:
    spec = ProbeSpec(
        level="quick", vendor="none", distributions=("torch", "six"), only=("import:six", "matmul")
    )
    assert spec.steps == ("matmul", "import:six")
    assert spec.worker_dict()["steps"] == ["matmul", "import:six"]
    assert ProbeSpec(level="quick", only=None).steps[0] == "env-snapshot"


def test_an_extended_certificate_carries_the_last_full_report_on(
    certified: Base, tmp_path: Path
) -> None:
    chained = {
        **certified.cert,
        "report": {"steps": ["two incremental steps"]},
        "incremental": {"base_report": {"steps": ["the full report"]}},
    }
    base = Base(certified.path, chained, "sha256:d", "3.11.7", certified.closure)
    aside = _cloned(base, tmp_path)
    plan = plan_incremental(
        base, aside, content_digests(aside), level="full", project=None, steps=STEPS
    )
    assert isinstance(plan, Incremental), plan
    record = incremental_record(base, plan)
    assert record["base_report"] == {"steps": ["the full report"]}
    assert record["extends"]["certificate_sha256"] == "sha256:d"


def test_an_incremental_build_says_so_in_its_closing_line_and_json(tmp_path: Path) -> None:
    interp = Interpreter(path="/usr/bin/python3", executable="/usr/bin/python3", version="3.11.7")
    done = VenvBuildResult("cpu", tmp_path, "reinstalled", interp, None, 7.04, None, True)
    assert done.closing() == (
        "cpu: certified incrementally (reinstalled in 7.0s; torch's"
        " files and their certificate kept)"
    )
    assert done.to_dict()["incremental"] is True
    full = VenvBuildResult("cpu", tmp_path, "reinstalled", interp, None, 7.04)
    assert full.closing() == "cpu: certified (reinstalled in 7.0s)"
    assert full.to_dict()["incremental"] is False
