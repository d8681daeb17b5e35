"""The ``collective`` step: a timed torch.distributed all-reduce across the visible devices.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
Run only when the spec asks (``--collective``). One process per device, each a fresh
interpreter (``python -c RANK``: CUDA cannot be used in a forked child once this worker
touched it), joined over TCP on 127.0.0.1: ``nccl`` on GPUs (ROCm's torch calls RCCL
by that name), ``gloo`` on the CPU. Every rank adds its own rank + 1 into a buffer of
:data:`GPU_MIB` MiB, several times; rank 0 checks the sum and says how long one
all-reduce took and the bus bandwidth it reached (as nccl-tests counts it:
bytes / time x 2(n-1)/n). Below two devices the step passes, saying it was skipped (a
one-GPU node is no failure: a ``skip`` status would fail the report); on the CPU,
``collective_world`` in the spec sets the number of processes (default 1: skipped).
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from .common import StepFailed, short

#: MiB reduced on GPUs and on the CPU (gloo is slow; the step shows the path works).
GPU_MIB = 64
CPU_MIB = 4
ITERATIONS = 5
#: Bytes of rank 0's output read for its result line.
OUTPUT_MAX = 65536
#: Seconds kept back from the step's deadline to stop the ranks and say why.
MARGIN = 5.0

#: One rank: argv[1] is JSON {rank, world, port, backend, mib, iterations, timeout}.
RANK = r"""
import datetime, json, sys, time
import torch
import torch.distributed as dist
a = json.loads(sys.argv[1])
rank, world = a["rank"], a["world"]
if a["backend"] == "nccl":
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
else:
    device = torch.device("cpu")
dist.init_process_group(
    a["backend"], init_method="tcp://127.0.0.1:%d" % a["port"], rank=rank,
    world_size=world, timeout=datetime.timedelta(seconds=a["timeout"]))
count = a["mib"] * (1 << 20) // 4
def sync():
    if device.type == "cuda":
        torch.cuda.synchronize(device)
buf = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
dist.all_reduce(buf)
sync()
want = world * (world + 1) / 2.0
ok = bool((buf == want).all().item())
times = []
for _ in range(a["iterations"]):
    buf.fill_(float(rank + 1))
    sync()
    dist.barrier()
    start = time.perf_counter()
    dist.all_reduce(buf)
    sync()
    times.append(time.perf_counter() - start)
    ok = ok and bool((buf == want).all().item())
if rank == 0:
    print(json.dumps({"ok": ok, "times": times, "bytes": count * 4}), flush=True)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def plan(ctx, torch):
    """(backend, world, MiB, what the devices are called)."""
    if ctx.device == "cuda":
        return "nccl", torch.cuda.device_count(), GPU_MIB, "GPUs"
    world = ctx.spec.get("collective_world") or 1
    return "gloo", int(world), CPU_MIB, "CPU processes"


def step_collective(ctx):
    torch, _ = ctx.need_device()
    backend, world, mib, what = plan(ctx, torch)
    if world < 2:
        # Not a failure of the environment: a one-GPU node passes, saying it did not run.
        return (
            f"skipped: {world} device visible, an all-reduce needs at least 2",
            {"skipped": True, "world": world},
        )
    try:
        import torch.distributed as dist  # noqa: PLC0415 - the library under test
    except BaseException as exc:
        raise StepFailed("torch.distributed is not importable: " + short(exc, 200)) from None
    if not dist.is_available():
        raise StepFailed("this torch was built without torch.distributed")
    deadline = float((ctx.spec.get("deadlines") or {}).get("collective") or 60.0)
    timeout = max(deadline - MARGIN, 1.0)
    port = free_port()
    # Output to files, not pipes: a chatty rank (NCCL_DEBUG=INFO) must never block on a
    # full pipe while the others wait for it in the all-reduce.
    with contextlib.ExitStack() as files:
        ranks = []
        for rank in range(world):
            args = {
                "rank": rank,
                "world": world,
                "port": port,
                "backend": backend,
                "mib": mib,
                "iterations": ITERATIONS,
                "timeout": int(timeout),
            }
            out = files.enter_context(tempfile.TemporaryFile())
            err = files.enter_context(tempfile.TemporaryFile())
            child = subprocess.Popen(
                [sys.executable, "-c", RANK, json.dumps(args)],
                stdout=out,
                stderr=err,
                env=dict(os.environ),
            )
            ranks.append((child, out, err))
        return judge(ranks, timeout, backend, world, what)


def wait_all(ranks, timeout):
    """[(code, stdout, stderr)] of every rank, None for one still running: all of them
    ended, or one failed (the others would wait for it), or the timeout came."""
    end = time.monotonic() + timeout
    children = [child for child, _, _ in ranks]
    while time.monotonic() < end:
        codes = [child.poll() for child in children]
        if None not in codes or any(code not in (None, 0) for code in codes):
            break
        time.sleep(0.05)
    found = []
    for child, out, err in ranks:
        if child.poll() is None:
            child.kill()
            child.wait()
            found.append(None)
            continue
        found.append((child.returncode, tail(out, OUTPUT_MAX), tail(err, 8192)))
    return found


def tail(handle, limit):
    """The last ``limit`` bytes of a rank's output file."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(size - limit, 0))
    return handle.read()


def judge(ranks, timeout, backend, world, what):
    results = wait_all(ranks, timeout)
    for rank, found in enumerate(results):
        code, _, stderr = found or (0, b"", b"")
        if code != 0:
            lines = [ln for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
            said = lines[-1] if lines else f"exit code {code}"
            raise StepFailed(f"{backend} all-reduce: rank {rank} failed: {short(said, 250)}")
    for rank, found in enumerate(results):
        if found is None:
            raise StepFailed(
                f"{backend} all-reduce: rank {rank} gave no result within {timeout:g}s"
            )
    try:
        data = json.loads(results[0][1].decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise StepFailed(f"{backend} all-reduce: rank 0 printed no result") from None
    if not data.get("ok"):
        raise StepFailed(f"{backend} all-reduce across {world} {what} gave a wrong sum")
    times = sorted(data["times"])
    best = times[0]
    size = data["bytes"]
    busbw = size / best * 2 * (world - 1) / world / 1e9 if best > 0 else 0.0
    detail = (
        f"{backend} all-reduce of {size >> 20} MiB across {world} {what}: "
        f"{best * 1000:.2f} ms (bus bandwidth {busbw:.1f} GB/s)"
    )
    return detail, {
        "backend": backend,
        "world": world,
        "bytes": size,
        "seconds": times,
        "busbw_gbps": round(busbw, 3),
    }
