"""The worker's package steps: import:NAME from the installed metadata, companion device steps.

Distributions here are real folders on a real ``sys.path`` entry (a temporary site folder
with ``*.dist-info`` metadata); the companion steps run real torch on the CPU against
stand-in ``torchvision`` / ``torchaudio`` modules, one right and one wrong each.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.test_probe_worker import _load_worker

W = _load_worker()


def _dist(site: Path, name: str, version: str, files: dict[str, str],
          top_level: str | None = None) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    record = [f"{path},sha256=x,1" for path in files] + [f"{info.name}/METADATA,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
    for path, text in files.items():
        target = site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _ctx(**spec: Any) -> Any:
    return W.Context({"vendor": "none", **spec})


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("pkg_a/__init__.py", "pkg_a"),
        ("single.py", "single"),
        ("_speedup.cpython-311-x86_64-linux-gnu.so", "_speedup"),
        ("pkg_a-1.0.dist-info/METADATA", None),
        ("pkg_a-1.0.data/scripts/run", None),
        ("../../bin/tool", None),
        ("extras.pth", None),
        ("__pycache__/x.pyc", None),
    ],
)
def test_record_paths_name_their_top_level_module(path: str, module: str | None) -> None:
    assert W.module_of(path) == module


def test_names_are_compared_in_their_canonical_form() -> None:
    assert W.canonical("Typing_Extensions") == "typing-extensions"
    assert W.canonical("zope.interface") == "zope-interface"
    assert W.canonical("a--b__c") == "a-b-c"


def test_the_import_step_imports_every_top_level_module_from_record(site: Path) -> None:
    _dist(site, "Two_Mods", "1.2", {"alpha/__init__.py": "X = 1\n", "beta.py": "Y = 2\n",
                                    "__editable___finder.py": "raise SystemExit(9)\n"})
    detail, data = W.make_import_step("two-mods")(_ctx())
    assert detail == "two-mods 1.2: imported alpha, beta"
    assert data["modules"] == ["alpha", "beta"]
    assert "alpha" in sys.modules
    assert "beta" in sys.modules


def test_top_level_txt_wins_over_record(site: Path) -> None:
    _dist(site, "lib", "3.0", {"lib/__init__.py": "", "lib_tests/__init__.py": "raise 1/0\n"},
          top_level="lib\n")
    assert W.make_import_step("lib")(_ctx())[1]["modules"] == ["lib"]


def test_a_module_that_fails_to_import_fails_the_step_with_the_errors_first_line(
    site: Path,
) -> None:
    _dist(site, "visionish", "0.28.0", {
        "visionish/__init__.py":
            "raise RuntimeError('operator visionish::nms does not exist\\nmore text')\n",
    })
    ctx = _ctx()
    with pytest.raises(W.StepFailed) as failed:
        W.make_import_step("visionish")(ctx)
    assert str(failed.value) == (
        "visionish 0.28.0: import visionish: RuntimeError: operator visionish::nms does not exist"
    )
    # its device steps skip and say why
    with pytest.raises(W.Skip, match="visionish is not importable: RuntimeError: operator"):
        ctx.need_module("visionish")


def test_a_distribution_that_is_not_installed_fails_the_step(site: Path) -> None:
    with pytest.raises(W.StepFailed, match="nothere is not installed"):
        W.make_import_step("nothere")(_ctx())


def test_the_worker_runs_import_steps_by_name() -> None:
    assert W.IMPORT_PREFIX == "import:"
    assert {"torchvision-nms", "torchvision-convnet", "torchaudio-melspectrogram"} <= set(W.STEPS)


# --------------------------------------------------------------------------- companions


def _nms_right(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> torch.Tensor:
    return torch.tensor(W.nms_reference(torch, boxes.double(), scores.double(), thr))


def _nms_wrong(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> torch.Tensor:
    return _nms_right(boxes, scores, thr + 0.2)  # keeps boxes it should have dropped


def _fake_module(name: str, monkeypatch: pytest.MonkeyPatch, **attrs: Any) -> None:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


def _device_ctx() -> Any:
    ctx = _ctx()
    ctx.torch, ctx.device = torch, "cpu"
    return ctx


def test_the_nms_case_keeps_every_decision_clear_of_the_threshold() -> None:
    boxes, scores, thr = W.nms_case(torch)
    ious = W.box_iou(torch, boxes.double(), boxes.double())
    assert float((ious - thr).abs().min()) >= 1e-5  # float32 IoUs are within 1e-6
    kept = W.nms_reference(torch, boxes.double(), scores.double(), thr)
    assert 20 < len(kept) < len(boxes)  # clusters: many boxes suppressed, many kept
    pairwise = ious[kept][:, kept] - torch.eye(len(kept), dtype=torch.float64)
    assert float(pairwise.max()) <= thr


def test_the_nms_step_passes_a_right_nms_and_fails_a_wrong_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_module("torchvision", monkeypatch, ops=types.SimpleNamespace(nms=_nms_right))
    assert "as the float64 reference" in W.step_torchvision_nms(_device_ctx())
    _fake_module("torchvision", monkeypatch, ops=types.SimpleNamespace(nms=_nms_wrong))
    with pytest.raises(W.StepFailed, match=r"torchvision\.ops\.nms on cpu kept"):
        W.step_torchvision_nms(_device_ctx())


class _Mel(torch.nn.Module):
    """A stand-in MelSpectrogram: power STFT through a fixed filter bank."""

    def __init__(self, *, sample_rate: int, n_fft: int, n_mels: int, skew: float = 0.0) -> None:
        super().__init__()
        del sample_rate
        self.n_fft = n_fft
        self.skew = skew
        self.window = torch.nn.Buffer(torch.hann_window(n_fft))
        self.fb = torch.nn.Buffer(torch.rand(n_fft // 2 + 1, n_mels,
                                             generator=torch.Generator().manual_seed(1)))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(wave, self.n_fft, window=self.window, return_complex=True).abs() ** 2
        out = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)
        return out * (1.0 + self.skew) if out.dtype == torch.float32 else out


def test_the_melspectrogram_step_compares_the_device_against_float64(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_module("torchaudio", monkeypatch, transforms=types.SimpleNamespace(MelSpectrogram=_Mel))
    assert "MelSpectrogram" in W.step_torchaudio_melspectrogram(_device_ctx())

    def skewed(**kw: Any) -> _Mel:
        return _Mel(skew=0.01, **kw)

    _fake_module("torchaudio", monkeypatch,
                 transforms=types.SimpleNamespace(MelSpectrogram=skewed))
    with pytest.raises(W.StepFailed, match="MelSpectrogram: max error"):
        W.step_torchaudio_melspectrogram(_device_ctx())


def test_companion_steps_skip_when_the_companion_did_not_import() -> None:
    ctx = _device_ctx()
    ctx.module_errors["torchvision"] = "RuntimeError: operator torchvision::nms does not exist"
    with pytest.raises(W.Skip, match="torchvision is not importable: RuntimeError"):
        W.step_torchvision_convnet(ctx)
