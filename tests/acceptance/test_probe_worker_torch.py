"""The worker's companion device steps on real torch (CPU) against stand-in ``torchvision``
/ ``torchaudio`` modules, one right and one wrong each.

Acceptance, not unit: they need torch installed (CI's .venv has the CPU build), and the
unit tier runs without it (``pip install -e '.[dev]'``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from tests.unit.probe.worker.test_probe_worker import _load_worker

W = _load_worker()


def _device_ctx() -> Any:
    ctx = W.Context({"vendor": "none"})
    ctx.torch, ctx.device = torch, "cpu"
    return ctx


def _nms_right(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> torch.Tensor:
    return torch.tensor(W.nms_reference(torch, boxes.double(), scores.double(), thr))


def _nms_wrong(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> torch.Tensor:
    return _nms_right(boxes, scores, thr + 0.2)  # keeps boxes it should have dropped


def _fake_module(name: str, monkeypatch: pytest.MonkeyPatch, **attrs: Any) -> None:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


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


class _Mel(torch.nn.Module):  # type: ignore[misc,unused-ignore]  # torch: Any without it
    """A stand-in MelSpectrogram: power STFT through a fixed filter bank."""

    def __init__(self, *, sample_rate: int, n_fft: int, n_mels: int, skew: float = 0.0) -> None:
        super().__init__()
        del sample_rate
        self.n_fft = n_fft
        self.skew = skew
        self.window = torch.nn.Buffer(torch.hann_window(n_fft))
        self.fb = torch.nn.Buffer(
            torch.rand(n_fft // 2 + 1, n_mels, generator=torch.Generator().manual_seed(1))
        )

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

    _fake_module("torchaudio", monkeypatch, transforms=types.SimpleNamespace(MelSpectrogram=skewed))
    with pytest.raises(W.StepFailed, match="MelSpectrogram: max error"):
        W.step_torchaudio_melspectrogram(_device_ctx())
