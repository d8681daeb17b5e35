"""``envforge audit`` against real wheels from the package index (issue 26 §2, §6).

* the index's torchvision 0.28.0 (its default build: CUDA 13) unpacked beside this
  environment's torch 2.13.0+cpu: the unpaired companion, the torch libraries it links
  that a CPU torch does not have, and the real SASS/PTX list of its ``_C.so``;
* nvidia-nccl-cu12 and nvidia-nccl-cu13 installed into one site-packages (both write
  ``nvidia/nccl/lib/libnccl.so.2``): the overwritten file and whose it is, and the SASS
  list of a real NCCL;
* the CUDA 12 and 13 runtime wheels side by side.

Wheels are downloaded once (``pip download``, into pytest's cache folder); without the
package index the tests skip (fail under ENVFORGE_REQUIRE_ENGINE=1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .helpers import unavailable

TORCHVISION = "torchvision==0.28.0"
NCCL12, NCCL13 = "nvidia-nccl-cu12==2.32.3", "nvidia-nccl-cu13==2.32.3"
CUDART12, CUDART13 = "nvidia-cuda-runtime-cu12==12.9.79", "nvidia-cuda-runtime==13.5.37"


def _site_of_this_python() -> Path:
    import torch

    if not torch.__version__.endswith("+cpu"):
        pytest.skip(f"needs a +cpu torch here, found {torch.__version__}")
    return Path(torch.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheels(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = Path(cache.mkdir("audit-wheels")) if cache else tmp_path_factory.mktemp("wheels")
    found: dict[str, Path] = {}
    for req in (TORCHVISION, NCCL12, NCCL13, CUDART12, CUDART13):
        name, version = req.split("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        have = sorted(folder.glob(f"{stem}*.whl"))
        if not have:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "-d",
                    str(folder),
                    req,
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            have = sorted(folder.glob(f"{stem}*.whl"))
            if done.returncode != 0 or not have:
                unavailable(f"pip download {req} failed: {done.stderr.strip()[-300:]}")
        found[name] = have[0]
    return found


def _venv(root: Path, *, beside_torch: bool = False) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    if beside_torch:
        (site / "this-torch.pth").write_text(f"{_site_of_this_python()}\n")
    return site


def _unpack(wheel: Path, site: Path, *, only: tuple[str, ...] = ()) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if not only or n.startswith(only)]
        zf.extractall(site, names)


def _audit(*args: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "envforge", "audit", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def _messages(data: dict[str, object], check: str) -> list[str]:
    return [
        str(f["message"])
        for f in data["findings"]  # type: ignore[attr-defined]
        if f["check"] == check
    ]


def test_cuda_torchvision_beside_a_cpu_torch(wheels: dict[str, Path], tmp_path: Path) -> None:
    site = _venv(tmp_path / "venv", beside_torch=True)
    _unpack(wheels["torchvision"], site)
    code, data = _audit(str(tmp_path / "venv"), "--arch", "sm_61")
    assert code == 1
    assert data["torch"] == "2.13.0+cpu"
    companions = _messages(data, "companions")
    assert any(
        m.startswith("torchvision 0.28.0 is a cuda build")
        and "install torchvision==0.28.0+cpu" in m
        for m in companions
    ), companions
    links = _messages(data, "torch-extensions")
    assert any(
        "links libc10_cuda.so, libtorch_cuda.so, which torch 2.13.0+cpu does not have" in m
        for m in links
    ), links
    gpu = _messages(data, "gpu-code")
    # the real fatbin of torchvision's _C.so (CUDA 13 build): SASS from Turing on, PTX 12.0
    assert any(
        m.startswith(
            "torchvision/_C.so (torchvision 0.28.0): no code for sm_61: "
            "SASS sm_75, sm_80, sm_86, sm_90, sm_100, sm_120; PTX sm_120"
        )
        for m in gpu
    ), gpu
    code, data = _audit(str(tmp_path / "venv"), "--arch", "sm_90")
    # torchvision has sm_90 SASS; the +cpu torch itself has no GPU code: named
    assert [m.split(":", 1)[0] for m in _messages(data, "gpu-code")] == ["torch 2.13.0+cpu"]


def test_both_nccl_wheels_in_one_site_packages(wheels: dict[str, Path], tmp_path: Path) -> None:
    site = _venv(tmp_path / "venv")
    # the dist-info folders of both, then cu13's library over cu12's (what pip does)
    _unpack(wheels["nvidia-nccl-cu12"], site, only=("nvidia_nccl_cu12-",))
    _unpack(wheels["nvidia-nccl-cu13"], site)
    _unpack(wheels["nvidia-cuda-runtime-cu12"], site)
    _unpack(wheels["nvidia-cuda-runtime"], site)
    code, data = _audit(str(tmp_path / "venv"), "--arch", "sm_90")
    assert code == 1
    dups = _messages(data, "duplicate-libraries")
    assert any(
        m.startswith(
            "nvidia/nccl/lib/libnccl.so.2 is in both nvidia-nccl-cu12 "
            "2.32.3's and nvidia-nccl-cu13 2.32.3's RECORD"
        )
        and "is nvidia-nccl-cu13 2.32.3's" in m
        for m in dups
    ), dups
    assert any(
        m.startswith(
            "libcudart in 2 majors side by side: libcudart.so.12 "
            "(nvidia-cuda-runtime-cu12 12.9.79), libcudart.so.13"
        )
        for m in dups
    )
    # a real NCCL's SASS list: no code for Maxwell
    code, data = _audit(str(tmp_path / "venv"), "--arch", "sm_52")
    nccl = [m for m in _messages(data, "gpu-code") if "libnccl.so.2" in m]
    assert len(nccl) == 1, nccl
    assert "SASS sm_75, sm_80" in nccl[0]
