"""doctor says how GPUs reach containers (CDI names, raw nodes, GPU request) and why.

Fixture trees stand in for the GPU hosts: ``tests/fixtures/sysfs/<host>`` (dev, proc) laid
over ``tests/fixtures/cdi/<host>`` (etc/cdi, var/run/cdi); recorded engine responses stand
in for the engines (``tests/fixtures/engines``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from envforge.backends.docker.doctor import check_device_path
from envforge.container.identity import EngineIdentity, identify
from envforge.doctor import diagnose
from envforge.host.detect import detect, no_tools
from envforge.host.doctor import DoctorReport, Finding, Identity
from tests.helpers import paths
from tests.helpers.recipes import make_recipe

FIXTURES = paths.TESTS / "fixtures"

AMD = make_recipe(
    name="gfx942",
    vendor="amd",
    arch="gfx942",
    base_image="ubuntu:22.04",
    python="3.10",
    torch="2.5.1",
    numpy="<2",
    rocm="6.2",
)
NVIDIA = make_recipe(AMD, name="sm_90", vendor="nvidia", arch="sm_90", rocm=None, cuda="12.4")


def _engine(version: str, info: str) -> EngineIdentity:
    def load(name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((FIXTURES / "engines" / name).read_text())
        return data

    return identify(load(version), load(info))


DOCKER_OLD = _engine("docker-20.10-version.json", "docker-20.10-info.json")
DOCKER_CDI = _engine("docker-27.5-version.json", "docker-27.5-cdi-info.json")
PODMAN4 = _engine("podman-4.3.1-version.json", "podman-4.3.1-rootful-info.json")
PODMAN5 = _engine("podman-5.2.2-version.json", "podman-4.3.1-rootful-info.json")


def host_root(tmp_path: Path, sysfs: str, cdi: str) -> Path:
    root = tmp_path / f"{sysfs}-{cdi}"
    shutil.copytree(FIXTURES / "sysfs" / sysfs, root)
    shutil.copytree(FIXTURES / "cdi" / cdi, root, dirs_exist_ok=True)
    return root


def path_findings(findings: list[Finding]) -> Finding:
    (found,) = [f for f in findings if f.check == "device-path"]
    return found


@pytest.mark.parametrize(
    ("engine", "cdi", "severity", "words"),
    [
        (DOCKER_CDI, "h100", "ok", ["Docker 27.5.1:", "CDI: nvidia.com/gpu=all", "nvidia.yaml"]),
        (DOCKER_OLD, "h100", "ok", ["Docker GPU request", "predates CDI"]),
        (DOCKER_CDI, "none", "ok", ["Docker GPU request", "no CDI spec names nvidia GPUs"]),
        (PODMAN5, "h100", "ok", ["Podman 5.2.2", "CDI: nvidia.com/gpu=all"]),
        (PODMAN4, "h100", "block", ["#22645", "does not resolve CDI", "use Podman 5"]),
        (PODMAN5, "none", "block", ["containers/podman#22645", "nvidia-ctk cdi generate"]),
    ],
)
def test_nvidia_device_path(
    tmp_path: Path, engine: EngineIdentity, cdi: str, severity: str, words: list[str]
) -> None:
    root = host_root(tmp_path, "h100", cdi)
    found = path_findings(check_device_path(NVIDIA, root, engine, True))
    assert found.severity == severity
    for word in words:
        assert word in found.message, (word, found.message)
    if severity == "ok":
        assert found.message.endswith("host IPC")


@pytest.mark.parametrize(
    ("engine", "words"),
    [
        (PODMAN5, ["CDI: amd.com/gpu=all", "amd.json"]),
        (DOCKER_CDI, ["CDI: amd.com/gpu=all"]),
        (DOCKER_OLD, ["raw device nodes", "/dev/kfd", "predates CDI"]),
        (PODMAN4, ["raw device nodes", "does not resolve CDI"]),
    ],
)
def test_amd_device_path(tmp_path: Path, engine: EngineIdentity, words: list[str]) -> None:
    root = host_root(tmp_path, "mi300x", "mi300x")
    found = path_findings(check_device_path(AMD, root, engine, True))
    assert found.severity == "ok"
    for word in words:
        assert word in found.message, (word, found.message)


def test_broken_specs_are_reported_and_raw_nodes_kept(tmp_path: Path) -> None:
    root = host_root(tmp_path, "mi300x", "broken")
    findings = check_device_path(AMD, root, DOCKER_CDI, True)
    notes = [f for f in findings if f.check == "cdi"]
    assert len(notes) == 2
    assert all(f.severity == "warn" for f in notes)
    assert "raw device nodes" in path_findings(findings).message


def test_no_engine_answering_still_names_the_path(tmp_path: Path) -> None:
    root = host_root(tmp_path, "h100", "h100")
    found = path_findings(check_device_path(NVIDIA, root, None, True))
    assert found.message.startswith("no engine answered;")
    assert "Docker GPU request" in found.message


def test_cpu_recipes_and_the_venv_backend_have_no_device_path(tmp_path: Path) -> None:
    root = host_root(tmp_path, "h100", "h100")
    cpu = make_recipe(AMD, name="cpu", vendor="none", arch=None, rocm=None)
    assert check_device_path(cpu, root, DOCKER_CDI, True) == []
    host = detect(root, tools=no_tools)
    who = Identity(uid=1000, user="alice", gids=frozenset([1000]))
    report = diagnose(
        NVIDIA,
        host,
        root=root,
        identity=who,
        space_dir=tmp_path,
        backend="venv",
        stand_ins={"ping": lambda: None, "engine": lambda: PODMAN4},
    )
    assert [f for f in report.findings if f.check in ("device-path", "docker")] == []


def test_diagnose_reports_the_device_path(tmp_path: Path) -> None:
    root = host_root(tmp_path, "h100", "h100")
    host = detect(root, tools=no_tools)
    who = Identity(uid=1000, user="alice", gids=frozenset([1000]))
    report: DoctorReport = diagnose(
        NVIDIA,
        host,
        root=root,
        identity=who,
        stand_ins={"ping": lambda: None, "engine": lambda: PODMAN4},
        space_dir=tmp_path,
        backend="docker",
    )
    found = [f for f in report.findings if f.check == "device-path"]
    assert len(found) == 1
    assert found[0].severity == "block"
    assert not report.ok
