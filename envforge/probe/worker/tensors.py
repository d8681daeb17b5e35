"""Numeric steps on the device, each against a CPU float64 reference.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

import copy

from .common import Skip, StepFailed


def step_small_tensor(ctx):
    """A 10x10 sum on every device the job sees (cuda:0, cuda:1, ...: each GPU probed)."""
    torch, dev = ctx.need_device()
    count = torch.cuda.device_count() if dev == "cuda" else 0
    devices = [f"cuda:{i}" for i in range(count)] if count > 1 else [dev]
    for where in devices:
        t = torch.ones(10, 10, device=where) * 2.0
        total = float(t.sum().item())
        ctx.sync()
        if total != 200.0:
            raise StepFailed(f"sum of a 10x10 tensor of 2s on {where} is {total!r}, expected 200")
    if len(devices) > 1:
        return f"10x10 tensor on each of {len(devices)} devices ({', '.join(devices)})"
    return f"10x10 tensor on {dev}"


def seeded(torch):
    g = torch.Generator()
    g.manual_seed(1234)
    return g


def check_close(torch, got, want, rtol, what):
    """Compare against a float64 reference; tolerance relative to the reference's scale."""
    got = got.detach().to("cpu").double()
    want = want.detach().to("cpu").double()
    if got.shape != want.shape:
        raise StepFailed(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if not bool(torch.isfinite(got).all()):
        raise StepFailed(f"{what}: result has NaN/Inf")
    scale = float(want.abs().max()) or 1.0
    err = float((got - want).abs().max()) / scale
    if err > rtol:
        raise StepFailed(f"{what}: max error {err:.3g} of scale exceeds {rtol:.3g}")
    return err


def step_matmul(ctx):
    torch, dev = ctx.need_device()
    g = seeded(torch)
    a = torch.randn(128, 128, generator=g)
    b = torch.randn(128, 128, generator=g)
    got = a.to(dev) @ b.to(dev)
    ctx.sync()
    err = check_close(torch, got, a.double() @ b.double(), 1e-3, "matmul 128x128")
    return f"128x128 on {dev} vs CPU float64: max rel error {err:.2g}"


def step_transfer_back(ctx):
    torch, dev = ctx.need_device()
    src = torch.arange(4096, dtype=torch.float32)
    back = src.to(dev).mul(3.0).to("cpu")
    if not bool(torch.equal(back, src * 3.0)):
        raise StepFailed(f"values changed on the round trip to {dev} and back")
    return f"4096 floats {dev} -> cpu intact"


#: (batch, in channels, height/width, out channels): includes the 44x44 case that hangs
#: MIOpen on RDNA1 without MIOPEN_DEBUG_CONV_IMPLICIT_GEMM.
CONV_CASES = ((1, 3, 16, 8), (2, 8, 44, 16), (1, 16, 64, 16))


def step_conv2d(ctx):
    torch, dev = ctx.need_device()
    nn = torch.nn
    g = seeded(torch)
    worst = 0.0
    for batch, cin, hw, cout in CONV_CASES:
        what = f"conv2d {batch}x{cin}x{hw}x{hw}"
        x = torch.randn(batch, cin, hw, hw, generator=g)
        conv = nn.Conv2d(cin, cout, 3, padding=1)
        with torch.no_grad():
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.2)
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=g) * 0.2)
        ref = _conv_fwd_bwd(torch, conv, x, "cpu", torch.float64)
        got = _conv_fwd_bwd(torch, conv, x, dev, torch.float32)
        ctx.sync()
        for name, g_val, r_val in zip(("forward", "grad input", "grad weight"), got, ref):
            worst = max(worst, check_close(torch, g_val, r_val, 2e-3, f"{what} {name}"))
    sizes = ", ".join(f"{c[2]}x{c[2]}" for c in CONV_CASES)
    return f"fwd+bwd {sizes} on {dev} vs CPU float64: max rel error {worst:.2g}"


def _conv_fwd_bwd(torch, conv, x, dev, dtype):
    layer = copy.deepcopy(conv).to(device=dev, dtype=dtype)
    inp = x.to(device=dev, dtype=dtype).requires_grad_(True)
    out = layer(inp)
    weights = torch.linspace(-1.0, 1.0, out.numel(), dtype=dtype).reshape(out.shape).to(dev)
    (out * weights).sum().backward()
    return out, inp.grad, layer.weight.grad


def step_autocast(ctx):
    torch, dev = ctx.need_device()
    g = seeded(torch)
    x = torch.randn(4, 8, 32, 32, generator=g)
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    lin_a = torch.randn(64, 64, generator=g)
    lin_b = torch.randn(64, 64, generator=g)
    dtype = torch.float16 if dev == "cuda" else torch.bfloat16
    conv_d = conv.to(dev)
    if hasattr(torch, "autocast"):
        autocast = torch.autocast(device_type=dev, dtype=dtype)
    elif dev == "cuda":  # torch < 1.10
        autocast = torch.cuda.amp.autocast()
    else:
        raise Skip("this torch has no CPU autocast (torch < 1.10)")
    with autocast:
        y = conv_d(x.to(dev))
        m = lin_a.to(dev) @ lin_b.to(dev)
    y.float().sum().backward()
    ctx.sync()
    if m.dtype != dtype:
        raise StepFailed(f"matmul under autocast gave {m.dtype}, expected {dtype}")
    ref_conv = conv.to("cpu").double()(x.double())
    check_close(torch, y, ref_conv, 3e-2, "autocast conv2d")
    check_close(torch, m, lin_a.double() @ lin_b.double(), 3e-2, "autocast matmul")
    if conv.weight.grad is None or not bool(torch.isfinite(conv.weight.grad).all()):
        raise StepFailed("autocast backward gave no finite gradient")
    return "{} autocast conv2d+matmul fwd/bwd on {}".format(str(dtype).replace("torch.", ""), dev)


def step_grad_checkpoint(ctx):
    torch, dev = ctx.need_device()
    import torch.utils.checkpoint as ckpt  # noqa: PLC0415 - torch is imported in steps

    nn = torch.nn
    g = seeded(torch)
    torch.manual_seed(1234)
    block = nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1)
    ).to(dev)
    x = torch.randn(2, 4, 24, 24, generator=g).to(dev)

    def run(use_ckpt):
        block.zero_grad()
        inp = x.detach().clone().requires_grad_(True)
        if use_ckpt:
            try:
                out = ckpt.checkpoint(block, inp, use_reentrant=False)
            except TypeError:  # torch < 1.11 has no use_reentrant
                out = ckpt.checkpoint(block, inp)
        else:
            out = block(inp)
        out.square().sum().backward()
        return inp.grad.detach().clone(), block[0].weight.grad.detach().clone()

    plain = run(False)
    checked = run(True)
    ctx.sync()
    check_close(torch, checked[0], plain[0], 1e-4, "checkpointed grad input")
    check_close(torch, checked[1], plain[1], 1e-4, "checkpointed grad weight")
    return f"checkpointed backward (use_reentrant=False) matches plain backward on {dev}"
