"""Doctor checks against fixture roots, a fake identity and a fake Docker ping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envforge.backends import docker, venv
from envforge.backends.docker.doctor import check_docker
from envforge.doctor import diagnose
from envforge.host import doctor
from envforge.host.detect import detect, no_tools
from envforge.host.doctor import (
    DoctorReport,
    Finding,
    Identity,
    check_disk,
    check_driver,
    gpu_holders,
    min_driver_for,
    parse_group_file,
)
from envforge.recipe.model import Recipe
from tests.helpers import paths
from tests.helpers.recipes import make_recipe

SYSFS = paths.TESTS / "fixtures" / "sysfs"


#: The recipe most checks run against: ROCm 6.2 on a gfx1031.
GFX1031 = make_recipe(
    name="gfx1031",
    vendor="amd",
    arch="gfx1031",
    base_image="ubuntu:22.04",
    python="3.10",
    torch="2.5.1",
    numpy="<2",
    rocm="6.2",
)
CPU = make_recipe(GFX1031, name="cpu", vendor="none", arch=None, rocm=None)


def nvidia(cuda: str | None) -> Recipe:
    return make_recipe(GFX1031, name="sm_90", vendor="nvidia", arch="sm_90", rocm=None, cuda=cuda)


def pong() -> str | None:
    return None


def no_engine() -> str | None:
    return "Error while fetching server API version: connection refused"


#: Stand-ins for the Docker backend's engine ping (doctor never asks this machine's).
ENGINE_UP = {"ping": pong}
ENGINE_DOWN = {"ping": no_engine}


def amd_root(tmp_path: Path, mode: int = 0o660) -> Path:
    """A host with an RX 6700 XT: sysfs from the fixture, dev/ and etc/group made here."""
    root = tmp_path / "root"
    for rel in ("dev/kfd", "dev/dri/renderD128"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        path.chmod(mode)
    (root / "etc").mkdir()
    gid = os.stat(root / "dev/kfd").st_gid
    (root / "etc/group").write_text(
        f"root:x:0:\nvideo:x:44:alice\nrender:x:{gid if gid != 0 else 109}:\nalice:x:1000:\n"
    )
    return root


def find(report: DoctorReport, check: str) -> list[Finding]:
    return [f for f in report.findings if f.check == check]


def test_group_file_parse() -> None:
    groups = parse_group_file("video:x:44:alice,bob\nrender:x:109:\nbroken\n")
    assert groups == {"video": (44, ("alice", "bob")), "render": (109, ())}


def test_healthy_amd_host(tmp_path: Path) -> None:
    root = amd_root(tmp_path, mode=0o666)
    host = detect(root=SYSFS / "rx6700xt", environ={}, tools=no_tools)
    who = Identity(uid=1000, user="alice", gids=frozenset({1000, 44, 109}))
    report = diagnose(
        GFX1031, host, root=root, identity=who, stand_ins=ENGINE_UP, space_dir=tmp_path
    )
    assert report.ok, report.findings
    assert {f.check for f in report.findings} >= {
        "gpu",
        "device-nodes",
        "groups",
        "driver",
        "docker",
    }
    assert [f.severity for f in find(report, "device-nodes")] == ["ok", "ok"]


def test_inaccessible_nodes_block_with_usermod_fix(tmp_path: Path) -> None:
    root = amd_root(tmp_path, mode=0o660)
    gid = os.stat(root / "dev/kfd").st_gid
    host = detect(root=SYSFS / "rx6700xt", environ={}, tools=no_tools)
    who = Identity(uid=1000, user="alice", gids=frozenset({1000}), group_names={gid: "render"})
    report = diagnose(
        GFX1031, host, root=root, identity=who, stand_ins=ENGINE_UP, space_dir=tmp_path
    )
    assert not report.ok
    nodes = find(report, "device-nodes")
    assert [f.severity for f in nodes] == ["block", "block"]
    assert "/dev/kfd is not accessible to alice" in nodes[0].message
    assert nodes[0].fix is not None
    assert "usermod -aG render alice" in nodes[0].fix


def test_group_membership_findings(tmp_path: Path) -> None:
    root = amd_root(tmp_path, mode=0o666)
    host = detect(root=SYSFS / "rx6700xt", environ={}, tools=no_tools)
    # Listed in video (but the session predates it), not in render at all.
    who = Identity(uid=1000, user="alice", gids=frozenset({1000}))
    report = diagnose(
        GFX1031, host, root=root, identity=who, stand_ins=ENGINE_UP, space_dir=tmp_path
    )
    groups = {f.message: f for f in find(report, "groups")}
    video = groups["alice was added to group video but this session does not have it yet"]
    assert video.fix is not None
    assert "newgrp video" in video.fix
    render = groups["alice is not in group render"]
    assert render.severity == "warn"


def test_missing_kfd_blocks(tmp_path: Path) -> None:
    root = amd_root(tmp_path)
    (root / "dev/kfd").unlink()
    host = detect(root=SYSFS / "rx5700xt", environ={}, tools=no_tools)
    who = Identity(uid=0, user="root", gids=frozenset({0}))
    report = diagnose(
        make_recipe(GFX1031, name="gfx1010", arch="gfx1010"),
        host,
        root=root,
        identity=who,
        stand_ins=ENGINE_UP,
        space_dir=tmp_path,
    )
    blocks = report.blocking
    assert [f.message for f in blocks] == ["/dev/kfd is missing"]
    assert blocks[0].fix is not None
    assert "--device=/dev/kfd" in blocks[0].fix


def test_gpu_recipe_on_host_without_gpu_blocks(tmp_path: Path) -> None:
    host = detect(root=SYSFS / "none", environ={}, tools=no_tools)
    who = Identity(uid=0, user="root", gids=frozenset({0}))
    report = diagnose(
        GFX1031, host, root=tmp_path, identity=who, stand_ins=ENGINE_UP, space_dir=tmp_path
    )
    gpu = find(report, "gpu")
    assert gpu[0].severity == "block"
    assert gpu[0].fix is not None
    assert "--fallback cpu" in gpu[0].fix


def test_cpu_recipe_on_host_without_gpu_is_fine(tmp_path: Path) -> None:
    host = detect(root=SYSFS / "none", environ={}, tools=no_tools)
    who = Identity(uid=0, user="root", gids=frozenset({0}))
    cpu = CPU
    report = diagnose(
        cpu,
        host,
        root=tmp_path,
        identity=who,
        stand_ins=ENGINE_DOWN,
        space_dir=tmp_path,
        backend="venv",
    )
    assert report.ok
    assert find(report, "docker") == []  # the venv backend does not need an engine
    report = diagnose(
        cpu, host, root=tmp_path, identity=who, stand_ins=ENGINE_DOWN, space_dir=tmp_path
    )
    assert report.ok
    assert find(report, "docker")[0].severity == "warn"


def test_arch_mismatch_warns(tmp_path: Path) -> None:
    root = amd_root(tmp_path, mode=0o666)
    host = detect(root=SYSFS / "rx6700xt", environ={}, tools=no_tools)
    who = Identity(uid=0, user="root", gids=frozenset({0}))
    report = diagnose(
        make_recipe(GFX1031, name="gfx942", arch="gfx942"),
        host,
        root=root,
        identity=who,
        stand_ins=ENGINE_UP,
        space_dir=tmp_path,
    )
    assert find(report, "gpu")[0].severity == "warn"


@pytest.mark.parametrize(
    ("cuda", "driver", "severity"),
    [
        ("13.0", "550.127.05", "block"),
        ("13.0", "580.65.06", "ok"),
        ("12.6", "550.127.05", "ok"),
        ("12.6", "470.256.02", "block"),
    ],
)
def test_nvidia_driver_floor(cuda: str, driver: str, severity: str) -> None:
    host = detect(root=SYSFS / "h100", environ={"ENVFORGE_DRIVER_VERSION": driver}, tools=no_tools)
    recipe = nvidia(cuda)
    findings = check_driver(recipe, host)
    assert [f.severity for f in findings] == [severity]
    if severity == "block":
        assert f"CUDA {cuda}" in findings[0].message
    if (cuda, severity) == ("13.0", "block"):
        # torch 2.5.1's newest CUDA variant a 550 driver runs is cu124 (floor 525).
        assert findings[0].fix is not None
        assert (
            "--set cuda=12.4 --set torch.index=https://download.pytorch.org/whl/cu124"
            in findings[0].fix
        )


def test_min_driver_table() -> None:
    assert min_driver_for(nvidia("13.0")) == "580"
    assert min_driver_for(GFX1031) is None


def test_amd_driver_not_loaded_blocks(tmp_path: Path) -> None:
    host = detect(root=tmp_path, environ={"ENVFORGE_GPU_ARCH": "gfx1031"}, tools=no_tools)
    findings = check_driver(GFX1031, host)
    assert findings[0].severity == "block"
    assert "amdgpu" in findings[0].message


def test_gpu_holders_from_proc_fd_links(tmp_path: Path) -> None:
    root = tmp_path
    for pid, comm, target in [
        (4242, "python3", "/dev/kfd"),
        (4243, "bash", "/dev/pts/0"),
        (77, "Xorg", "/dev/dri/renderD128"),
    ]:
        fd = root / "proc" / str(pid) / "fd"
        fd.mkdir(parents=True)
        (fd / "3").symlink_to(target)
        (root / "proc" / str(pid) / "comm").write_text(comm + "\n")
    (root / "proc/self").mkdir()
    holders = gpu_holders(root, {"/dev/kfd", "/dev/dri/renderD128"})
    assert holders == [(77, "Xorg", "/dev/dri/renderD128"), (4242, "python3", "/dev/kfd")]
    assert gpu_holders(root, {"/dev/kfd"}, exclude=[4242]) == []


def test_busy_gpu_is_a_warning_in_the_report(tmp_path: Path) -> None:
    root = amd_root(tmp_path, mode=0o666)
    fd = root / "proc/999/fd"
    fd.mkdir(parents=True)
    (fd / "5").symlink_to("/dev/kfd")
    (root / "proc/999/comm").write_text("train.py\n")
    host = detect(root=SYSFS / "rx6700xt", environ={}, tools=no_tools)
    who = Identity(uid=0, user="root", gids=frozenset({0}))
    report = diagnose(
        GFX1031, host, root=root, identity=who, stand_ins=ENGINE_UP, space_dir=tmp_path
    )
    busy = find(report, "gpu-busy")
    assert busy[0].severity == "warn"
    assert "999 train.py" in busy[0].message
    assert report.ok


def test_docker_unreachable_blocks_only_for_docker_backend() -> None:
    assert check_docker(no_engine, True)[0].severity == "block"
    assert check_docker(no_engine, False)[0].severity == "warn"
    assert check_docker(pong, True)[0].severity == "ok"


def test_disk_space_against_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "free_bytes", doctor.shutil_free)
    cpu = CPU
    ok = check_disk(cpu, tmp_path / "not" / "yet", venv.disk_need("none"))
    assert ok[0].severity in ("ok", "block")
    assert "GiB free" in ok[0].message
    huge = check_disk(GFX1031, tmp_path, docker.disk_need("amd"))
    free = __import__("shutil").disk_usage(tmp_path).free
    assert huge[0].severity == ("block" if free < 30 * 1024**3 else "ok")


def test_report_to_dict(tmp_path: Path) -> None:
    host = detect(root=SYSFS / "none", environ={}, tools=no_tools)
    who = Identity(uid=0, user="root", gids=frozenset({0}))
    report = diagnose(
        None, host, root=tmp_path, identity=who, stand_ins=ENGINE_UP, space_dir=tmp_path
    )
    data = report.to_dict()
    assert data["ok"] is True
    assert data["host"]["count"] == 0
    assert all(set(f) == {"check", "severity", "message", "fix"} for f in data["findings"])
