"""Companion libraries' device steps: torchvision's NMS and a ResNet, torchaudio's mels.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

from .common import StepFailed
from .tensors import check_close, seeded


def nms_case(torch):
    """Overlapping boxes in clusters, distinct scores, and the IoU threshold in the widest
    gap between the pairs' IoUs near 0.5 (float32 and float64 agree on every decision)."""
    g = seeded(torch)
    n = 160
    centres = torch.rand(10, 2, generator=g) * 200.0
    xy = centres[torch.randint(0, 10, (n,), generator=g)] + torch.randn(n, 2, generator=g) * 6.0
    boxes = torch.cat([xy, xy + 12.0 + torch.rand(n, 2, generator=g) * 20.0], dim=1)
    scores = (torch.randperm(n, generator=g).float() + 1.0) / n
    ious = box_iou(torch, boxes.double(), boxes.double()).flatten().tolist()
    near = sorted(set([0.3, 0.7] + [v for v in ious if 0.3 < v < 0.7]))
    low, high = max(zip(near, near[1:]), key=lambda pair: pair[1] - pair[0])
    return boxes, scores, (low + high) / 2.0


def box_iou(torch, a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    low = torch.max(a[:, None, :2], b[None, :, :2])
    high = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (high - low).clamp(min=0).prod(dim=2)
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def nms_reference(torch, boxes, scores, threshold):
    """Greedy NMS in float64 on the CPU, written out: the indices kept, best first."""
    order = scores.argsort(descending=True).tolist()
    ious = box_iou(torch, boxes, boxes).tolist()
    kept, removed = [], set()
    for i in order:
        if i in removed:
            continue
        kept.append(i)
        removed.update(j for j, iou in enumerate(ious[i]) if iou > threshold)
    return kept


def step_torchvision_nms(ctx):
    torch, dev = ctx.need_device()
    tv = ctx.need_module("torchvision")
    boxes, scores, threshold = nms_case(torch)
    got = tv.ops.nms(boxes.to(dev), scores.to(dev), threshold)
    ctx.sync()
    got = got.to("cpu").tolist()
    want = nms_reference(torch, boxes.double(), scores.double(), threshold)
    if got != want:
        raise StepFailed(
            f"torchvision.ops.nms on {dev} kept {len(got)} boxes, the float64 reference "
            f"{len(want)} (first difference at rank {first_difference(got, want)})"
        )
    return (
        f"torchvision.ops.nms on {dev}: {len(got)} of {len(boxes)} boxes kept, "
        "as the float64 reference"
    )


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def step_torchvision_convnet(ctx):
    torch, dev = ctx.need_device()
    tv = ctx.need_module("torchvision")
    resnet = tv.models.resnet
    torch.manual_seed(1234)
    # ResNet-18's layers (conv, batch norm, residual blocks, pooling) with one block per
    # stage: a small conv net, built from torchvision's own model code
    model = resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32, generator=seeded(torch))
    with torch.no_grad():
        got = model.to(dev)(x.to(dev)).to("cpu")
        ctx.sync()
        want = model.to("cpu").double()(x.double())
    err = check_close(torch, got, want, 2e-2, "ResNet forward")  # TF32 convolutions on GPUs
    return (
        f"ResNet (BasicBlock x4) forward, 2x3x32x32, on {dev} vs CPU float64: "
        f"max rel error {err:.2g}"
    )


def step_torchaudio_melspectrogram(ctx):
    torch, dev = ctx.need_device()
    ta = ctx.need_module("torchaudio")
    t = torch.arange(16000, dtype=torch.float64) / 16000.0
    wave = (
        torch.sin(2 * 3.141592653589793 * 440.0 * t)
        + 0.5 * torch.sin(2 * 3.141592653589793 * 1500.0 * t)
        + 0.1 * torch.randn(16000, generator=seeded(torch), dtype=torch.float64)
    )[None, :]
    mel = ta.transforms.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=40)
    with torch.no_grad():
        got = mel.to(dev)(wave.float().to(dev)).to("cpu")
        ctx.sync()
        want = mel.to("cpu").double()(wave)
    err = check_close(torch, got, want, 1e-3, "MelSpectrogram")
    return (
        f"MelSpectrogram (1 s at 16 kHz, 40 mels) on {dev} vs CPU float64: max rel error {err:.2g}"
    )
