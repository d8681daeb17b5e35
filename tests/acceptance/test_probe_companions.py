"""Certification covers what is installed: real torchvision wheels beside real torch builds.

Nothing is mocked: real wheels, real virtualenvs, the real worker in a child process.

* Negative: the package index's torchvision 0.28.0 is a CUDA build. Installed beside the
  ``+cpu`` torch 2.13.0 (the one running these tests) it cannot register its operators,
  and the cpu recipe asking for torchvision (pinned by envforge to 0.28.0+cpu; the wrong
  build is what got installed) must not certify: ``envforge probe`` exits 1 naming
  ``import:torchvision`` and the error's first line, in the text, JSON, JUnit and summary
  outputs.
* Positive: the index's default torch 2.14.1 (a CUDA 13.0 build, which runs on a CPU) with
  torchvision 0.29.1 in a fresh venv certifies: every import and the torchvision device
  steps (``ops.nms``, a small ResNet forward) pass on the CPU.

The wheels come from ``ENVFORGE_TEST_MORE_WHEELS`` (default ``/opt/pypi-more/files``);
torch 2.14.1's own dependencies (nvidia-* runtime wheels, triton) from the package index.
The positive venv is about 5.5 GB: it is built once, by this module, and removed after it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.probe.runner import LocalPythonTarget, run_probe
from envforge.probe.spec import Expectations, ProbeSpec

ROOT = Path(__file__).resolve().parents[2]
MORE = Path(os.environ.get("ENVFORGE_TEST_MORE_WHEELS", "/opt/pypi-more/files"))
TV_028 = MORE / "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"
TV_0291 = MORE / "torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_2141 = MORE / "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
NMS_ERROR = "RuntimeError: operator torchvision::nms does not exist"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the wheels are cp311"),
]


def _need(*wheels: Path) -> None:
    missing = [w.name for w in wheels if not w.is_file()]
    if missing:
        pytest.skip(f"not in {MORE} (ENVFORGE_TEST_MORE_WHEELS): {', '.join(missing)}")


@pytest.fixture(scope="module")
def beside_cpu_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv that sees this interpreter's packages (torch 2.13.0+cpu) through a .pth
    file, with the index's torchvision 0.28.0 wheel installed into it: seconds, not GB."""
    _need(TV_028)
    import torch

    if torch.__version__ != "2.13.0+cpu":
        pytest.skip(f"the running torch is {torch.__version__}, not 2.13.0+cpu")
    venv = tmp_path_factory.mktemp("tv028") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "envforge_test_base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(TV_028),
        ],
        check=True,
    )
    return venv / "bin" / "python"


def test_a_cuda_torchvision_beside_the_cpu_torch_does_not_certify(
    beside_cpu_torch: Path, tmp_path: Path
) -> None:
    report_dir, summary = tmp_path / "report", tmp_path / "summary.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envforge",
            "probe",
            "--recipe",
            "cpu",
            "--level",
            "quick",
            "--set",
            "packages=[torchvision]",
            "--python",
            str(beside_cpu_torch),
            "--json",
            "--report",
            str(report_dir),
            "--summary",
            str(summary),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    steps = {s["name"]: s for s in json.loads(done.stdout)["steps"]}
    failed = steps["import:torchvision"]
    assert failed["status"] == "fail"
    assert failed["detail"] == f"torchvision 0.28.0: import torchvision: {NMS_ERROR}"
    # torch itself is fine; torchvision's device steps say why they did not run
    assert steps["import:torch"]["status"] == "pass"
    assert steps["matmul"]["status"] == "pass"
    assert steps["torchvision-nms"]["status"] == "skip"
    assert NMS_ERROR in steps["torchvision-nms"]["detail"]
    # text (the one-line error), JUnit and the CI summary name the package and the error
    assert "probe failed at step import:torchvision: fail: torchvision 0.28.0" in done.stderr
    assert NMS_ERROR in done.stderr
    junit = (report_dir / "probe.junit.xml").read_text()
    assert 'name="import:torchvision"' in junit
    assert f'message="torchvision 0.28.0: import torchvision: {NMS_ERROR}"' in junit
    text = summary.read_text()
    assert "import:torchvision" in text
    assert "operator torchvision::nms does not exist" in text


@pytest.fixture(scope="module")
def cuda_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """torch 2.14.1 + torchvision 0.29.1 in a fresh venv (uv; ~5.5 GB), removed afterwards."""
    _need(TORCH_2141, TV_0291)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.fail("uv is a dev dependency of envforge and should be installed")
    folder = tmp_path_factory.mktemp("torch2141")
    venv = folder / "venv"
    started = time.monotonic()
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "--find-links",
            str(MORE),
            "torch==2.14.1",
            "torchvision==0.29.1",
        ],
        check=True,
        timeout=1500,
        env={**os.environ, "UV_CACHE_DIR": str(folder / "uv-cache")},
    )
    print(f"torch 2.14.1 venv built in {time.monotonic() - started:.0f}s")
    yield venv / "bin" / "python"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(1800)
def test_the_default_torch_with_its_torchvision_certifies_on_the_cpu(
    cuda_torch_venv: Path,
) -> None:
    spec = ProbeSpec(
        level="full",
        vendor="none",
        step_timeout=300.0,
        expect=Expectations(python="3.11", torch="2.14.1", cuda="13.0", numpy=">=1.26,<3"),
        distributions=("torch", "numpy", "torchvision"),
    )
    report = run_probe(spec, LocalPythonTarget(python=str(cuda_torch_venv)))
    steps = {s.name: s for s in report.steps}
    assert report.passed, [s.to_dict() for s in report.steps if s.status != "pass"]
    assert steps["import:torchvision"].detail == "torchvision 0.29.1: imported torchvision"
    assert "as the float64 reference" in steps["torchvision-nms"].detail
    assert "ResNet (BasicBlock x4) forward" in steps["torchvision-convnet"].detail
    assert report.snapshot["cuda"] == "13.0"
