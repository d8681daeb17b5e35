"""The floor of the probe on a GPU: a bare script doing the probe's device work.

    python bench/gpu_floor.py [min|same] [--ckpt real|reentrant|none] [--companions]

``min``: ``import torch`` and one Conv2d forward and backward on the GPU (issue 32's
reference). ``same``: the device work of the full probe's steps, in one process, with no
checks against CPU references: a small tensor, a 128x128 matmul, a round trip, the three
Conv2d cases forward and backward, autocast conv+matmul, a checkpointed block (``--ckpt``:
torch's ``checkpoint(use_reentrant=False)``, which imports torch._dynamo on first use; or
``reentrant``, the undecorated reentrant path; or none), and with ``--companions``
torchvision's NMS and a small ResNet forward and torchaudio's MelSpectrogram. Prints the
seconds it took. Used by bench/gpu_probe_bench.py; not a test.
"""

from __future__ import annotations

import argparse
import time


def device_work(torch: object, ckpt: str) -> None:
    t = torch  # type: ignore[assignment]
    nn = t.nn  # type: ignore[attr-defined]
    dev = "cuda"
    float((t.ones(10, 10, device=dev) * 2.0).sum().item())  # type: ignore[attr-defined]
    a = t.randn(128, 128)  # type: ignore[attr-defined]
    (a.to(dev) @ a.to(dev)).cpu()
    t.arange(4096, dtype=t.float32).to(dev).mul(3.0).to("cpu")  # type: ignore[attr-defined]
    for batch, cin, hw, cout in ((1, 3, 16, 8), (2, 8, 44, 16), (1, 16, 64, 16)):
        conv = nn.Conv2d(cin, cout, 3, padding=1).to(dev)
        x = t.randn(batch, cin, hw, hw, device=dev, requires_grad=True)  # type: ignore[attr-defined]
        conv(x).sum().backward()
    conv = nn.Conv2d(8, 8, 3, padding=1).to(dev)
    with t.autocast(device_type=dev, dtype=t.float16):  # type: ignore[attr-defined]
        y = conv(t.randn(4, 8, 32, 32, device=dev))  # type: ignore[attr-defined]
        m = t.randn(64, 64, device=dev) @ t.randn(64, 64, device=dev)  # type: ignore[attr-defined]
    y.float().sum().backward()
    m.float().sum().item()
    if ckpt != "none":
        import torch.utils.checkpoint as cp

        block = nn.Sequential(
            nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1)
        ).to(dev)
        x = t.randn(2, 4, 24, 24, device=dev, requires_grad=True)  # type: ignore[attr-defined]
        block(x).square().sum().backward()
        if ckpt == "real":
            out = cp.checkpoint(block, x, use_reentrant=False)
        else:
            out = cp.checkpoint.__wrapped__(block, x, use_reentrant=True)  # type: ignore[attr-defined]
        out.square().sum().backward()
    t.cuda.synchronize()  # type: ignore[attr-defined]


def companion_work(torch: object) -> None:
    import torchaudio
    import torchvision

    t = torch  # type: ignore[assignment]
    dev = "cuda"
    boxes = t.rand(160, 2) * 200.0  # type: ignore[attr-defined]
    boxes = t.cat([boxes, boxes + 20.0], dim=1)  # type: ignore[attr-defined]
    torchvision.ops.nms(boxes.to(dev), t.rand(160).to(dev), 0.5).cpu()  # type: ignore[attr-defined]
    resnet = torchvision.models.resnet
    model = resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=10).eval().to(dev)
    with t.no_grad():  # type: ignore[attr-defined]
        model(t.randn(2, 3, 32, 32, device=dev)).cpu()  # type: ignore[attr-defined]
        mel = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=40)
        mel.to(dev)(t.randn(1, 16000, device=dev)).cpu()  # type: ignore[attr-defined]
    t.cuda.synchronize()  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["min", "same"])
    parser.add_argument("--ckpt", default="real", choices=["real", "reentrant", "none"])
    parser.add_argument("--companions", action="store_true")
    args = parser.parse_args()
    began = time.perf_counter()
    import torch

    if args.kind == "min":
        conv = torch.nn.Conv2d(8, 16, 3, padding=1).to("cuda")
        x = torch.randn(2, 8, 44, 44, device="cuda", requires_grad=True)
        conv(x).sum().backward()
        torch.cuda.synchronize()
    else:
        device_work(torch, args.ckpt)
        if args.companions:
            companion_work(torch)
    print(f"{time.perf_counter() - began:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
