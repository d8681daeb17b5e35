"""``envforge detect`` and ``envforge doctor`` through main(), on fixture trees and the
shipped catalogue (auto must pick the shipped recipe for each fixture host)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.host.detect import OVERRIDE_VARS
from tests.helpers import paths

SYSFS = paths.TESTS / "fixtures" / "sysfs"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in OVERRIDE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ENVFORGE_RECIPE_PATH", raising=False)
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize(
    ("case", "arch", "recipe"),
    [
        ("rx5700xt", "gfx1010", "gfx1010"),
        ("rx6700xt", "gfx1031", "gfx1031"),
        ("mi300x", "gfx942", "gfx942"),
        ("h100", "sm_90", "sm_90"),
        ("none", None, "cpu"),
    ],
)
def test_detect_json_on_fixture_hosts(
    case: str, arch: str | None, recipe: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["detect", "--json", "--root", str(SYSFS / case)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["archs"] == ([arch] if arch else [])
    assert data["auto"]["recipe"] == recipe
    assert data["auto_error"] is None


def test_detect_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--root", str(SYSFS / "mi300x")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("8 GPU(s):")
    assert "AMD Instinct MI300X" in out
    assert "auto -> gfx942" in out


def test_detect_no_gpu_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--root", str(SYSFS / "none")]) == 0
    out = capsys.readouterr().out
    assert "no GPU detected" in out
    assert "auto -> cpu" in out


def test_detect_override_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # gfx1034 has no recipe of its own: the override peer gfx1031's serves it (gfx1032,
    # the arch this test used before, has its own recipe since issue 10).
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1034")
    assert main(["detect", "--json", "--root", str(SYSFS / "none")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["archs"] == ["gfx1034"]
    assert data["auto"]["recipe"] == "gfx1031"
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "gfx1032")
    assert main(["detect", "--json", "--root", str(SYSFS / "none")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["archs"] == ["gfx1032"]
    assert data["auto"]["recipe"] == "gfx1032"


def test_detect_arch_without_recipe_still_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # gfx1103 (the arch this test used before) gets its solved stack since issue 10 §2;
    # no published wheel runs sm_35, so auto has nothing for it.
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "sm_35")
    assert main(["detect", "--root", str(SYSFS / "none")]) == 0
    assert "auto -> no recipe: no published torch wheel" in capsys.readouterr().out


def test_bad_override_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "navi10")
    assert main(["detect", "--root", str(SYSFS / "none")]) == 2
    assert "ENVFORGE_GPU_ARCH='navi10'" in capsys.readouterr().err


def test_doctor_blocks_gpu_recipe_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "gfx1031", "--backend", "venv", "--root", str(SYSFS / "none")])
    captured = capsys.readouterr()
    assert code == 4
    assert "BLOCK gpu" in captured.out
    assert "needs an AMD GPU (gfx1031); none detected" in captured.err


def test_doctor_auto_on_fixture_host_is_fine(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--json", "--backend", "venv", "--root", str(SYSFS / "rx5700xt")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    assert data["recipe"] == "gfx1010"
    assert data["auto"]["recipe"] == "gfx1010"
    checks = {f["check"] for f in data["findings"]}
    assert {"gpu", "device-nodes", "driver", "disk"} <= checks
    assert "docker" not in checks


def test_doctor_missing_device_node_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    root = tmp_path / "root"
    shutil.copytree(SYSFS / "h100", root)
    (root / "dev/nvidia-uvm").unlink()
    code = main(["doctor", "sm_90", "--backend", "venv", "--root", str(root)])
    captured = capsys.readouterr()
    assert code == 4
    assert "/dev/nvidia-uvm is missing" in captured.err


def test_doctor_auto_without_a_recipe_still_checks_the_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # gfx1103 (used before) gets its solved stack since issue 10 §2; sm_35 has no wheel.
    monkeypatch.setenv("ENVFORGE_GPU_ARCH", "sm_35")
    code = main(["doctor", "--json", "--backend", "venv", "--root", str(SYSFS / "h100")])
    data = json.loads(capsys.readouterr().out)
    assert code == 4
    assert data["recipe"] is None
    assert data["findings"][0]["check"] == "recipe"
    assert data["findings"][0]["message"].startswith("no published torch wheel")
    assert "CUDA build" in next(f["message"] for f in data["findings"] if f["check"] == "disk")
