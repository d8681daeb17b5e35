"""detect / doctor under hostile host trees and variables (issue 11, class 5): every
number bounded, non-ASCII digits are not numbers, FIFOs where sysfs has files never
block. tests/fixtures/sysfs-hostile holds the tree; FIFOs are made at test time (git
cannot store them). A SIGALRM guard turns a hang into a failure."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from envforge.cli import main
from envforge.host.detect import detect, no_tools, parse_kfd_properties
from envforge.host.doctor import gpu_holders, parse_group_file
from envforge.host.hostfs import host_int, numeric_name, read_host_text
from tests.helpers import paths

HOSTILE = paths.TESTS / "fixtures" / "sysfs-hostile"
HANG_LIMIT_S = 60

#: Files of the hostile tree replaced by FIFOs (relative to the root).
FIFO_FILES = (
    "sys/class/kfd/kfd/topology/nodes/1/properties",
    "sys/module/amdgpu/version",
    "sys/class/drm/card0/device/vendor",
    "proc/driver/nvidia/version",
    "proc/driver/nvidia/gpus/0000:01:00.0/information",
    "proc/sys/kernel/osrelease",
    "etc/group",
)


def _hang(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError(f"no answer within {HANG_LIMIT_S} s (a hang)")


@pytest.fixture(autouse=True)
def _no_hang(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "ENVFORGE_GPU_ARCH",
        "ENVFORGE_GPU_VENDOR",
        "ENVFORGE_GPU_COUNT",
        "ENVFORGE_GPU_PRODUCT",
        "ENVFORGE_DRIVER_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(HANG_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def fifo_tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(HOSTILE, root)
    for rel in FIFO_FILES:
        (root / rel).unlink()
        os.mkfifo(root / rel)
    holder = root / "proc/4242"
    (holder / "fd").mkdir(parents=True)
    (holder / "fd/3").symlink_to("/dev/kfd")
    os.mkfifo(holder / "comm")
    return root


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_hostile_tree_is_read_with_every_number_bounded() -> None:
    host = detect(HOSTILE, environ={}, tools=no_tools)
    amd = [g for g in host.gpus if g.vendor == "amd"]
    # node "²" and node 2 (simd_count "١٢") are not GPUs; nodes 1 and 3 are.
    assert [g.arch for g in amd] == ["gfx1030", "gfx1031"]
    assert amd[0].product == "AMD GPU"  # device_id -1 is not a PCI id
    assert amd[0].device_nodes == ("/dev/kfd",)  # render minor 99999999999999 refused
    assert amd[1].product == "AMD Radeon RX 6700 XT"  # arch from the PCI id: 5000000000 is no gfx
    nvidia = [g for g in host.gpus if g.vendor == "nvidia"]
    assert nvidia[0].device_nodes[0] == "/dev/nvidia0"  # Device Minor "²" refused
    assert nvidia[0].pci_id is None  # a 5000-digit device id refused


def test_detect_and_doctor_cli_on_the_hostile_tree(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "detect", "--json", "--root", str(HOSTILE))
    assert code == 0
    assert json.loads(out)["count"] == 3
    code, out, _ = _run(capsys, "doctor", "--backend", "venv", "--root", str(HOSTILE))
    assert code in (0, 4)


def test_fifos_where_sysfs_has_files_do_not_block(
    fifo_tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = detect(fifo_tree, environ={}, tools=no_tools)
    assert host.kernel == ""  # osrelease is a FIFO: unknown, not a hang
    assert [g.arch for g in host.gpus if g.vendor == "amd"] == ["gfx1031"]
    assert gpu_holders(fifo_tree, ["/dev/kfd"]) == [(4242, "?", "/dev/kfd")]
    code, _, _ = _run(capsys, "detect", "--root", str(fifo_tree))
    assert code == 0
    code, _, _ = _run(capsys, "doctor", "--backend", "venv", "--root", str(fifo_tree))
    assert code in (0, 4)


@pytest.mark.parametrize(
    "count", ["50000000", "\u00b2", "\u0661\u0662", "-1", "0", "0x10", "1" * 5000, "257"]
)
def test_gpu_count_is_bounded(
    count: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1030")
    monkeypatch.setenv("ENVFORGE_GPU_COUNT", count)
    code, _, err = _run(capsys, "detect", "--root", str(HOSTILE))
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "ENVFORGE_GPU_COUNT" in err


def test_gpu_count_limit_itself_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    host = detect(
        HOSTILE, environ={"ENVFORGE_GPU_ARCH": "sm_90", "ENVFORGE_GPU_COUNT": "256"}, tools=no_tools
    )
    assert host.count == 256


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENVFORGE_GPU_PRODUCT", "a\udcffb"),
        ("ENVFORGE_GPU_PRODUCT", "\x1b[31mred"),
        ("ENVFORGE_DRIVER_VERSION", "550\n.1"),
    ],
)
def test_override_text_is_plain(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1030")
    monkeypatch.setenv(name, value)
    code, _, err = _run(capsys, "detect", "--root", str(HOSTILE))
    assert code == 2
    assert name in err


def test_host_numbers() -> None:
    assert host_int("0x73df", base=16, maximum=0xFFFF) == 0x73DF
    assert host_int("73DF\n", base=16, maximum=0xFFFF) == 0x73DF
    assert host_int("0x10000", base=16, maximum=0xFFFF) is None
    assert host_int("\u00b2", maximum=10) is None
    assert host_int("\u0661", maximum=10) is None
    assert host_int("9" * 5000, maximum=10**30) is None
    assert host_int("-3", minimum=-5, maximum=5) == -3
    assert host_int("", maximum=5) is None
    assert numeric_name("\u00b2") is None
    assert numeric_name("12") == 12
    assert parse_kfd_properties("a \u00b2\nb 0x10\nc 12\nd " + "9" * 5000) == {"b": 16, "c": 12}
    assert parse_group_file("video:x:\u00b2:me\nrender:x:109:me\n") == {"render": (109, ("me",))}


def test_read_host_text_limits(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_host_text(fifo) is None
    assert read_host_text(Path("/dev/zero")) is None
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    assert read_host_text(big, max_bytes=10) is None
    assert read_host_text(big, max_bytes=11) == "x" * 11
    assert read_host_text(tmp_path / "missing") is None
    assert read_host_text(Path("/proc/self/status")) is not None  # size 0, still read
