"""The device and its memory: which GPU torch sees, and how much of it is free.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

import os

from .common import NoDevice, describe, text_of


def step_device(ctx):
    torch = ctx.need_torch()
    vendor = ctx.vendor
    if vendor == "none":
        ctx.device = "cpu"
        return "cpu (recipe has no GPU)", {"device": "cpu", "count": 0}
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if (vendor == "amd" and not hip) or (vendor == "nvidia" and not cuda):
        ctx.device_error = "no GPU device"
        raise NoDevice(
            "this torch ({}) is not a {} build, so it cannot use the {} GPU".format(
                torch.__version__,
                "ROCm" if vendor == "amd" else "CUDA",
                "AMD" if vendor == "amd" else "NVIDIA",
            )
        )
    available = False
    try:
        available = bool(torch.cuda.is_available())
    except BaseException as exc:
        if vendor == "auto":
            ctx.device = "cpu"
            return f"cpu (torch.cuda.is_available() raised {describe(exc)})", {
                "device": "cpu",
                "count": 0,
            }
        raise
    count = torch.cuda.device_count() if available else 0
    if not available or count == 0:
        if vendor == "auto":
            ctx.device = "cpu"
            return "cpu (no GPU visible to torch)", {"device": "cpu", "count": 0}
        build = (
            "HIP"
            if getattr(torch.version, "hip", None)
            else ("CUDA" if getattr(torch.version, "cuda", None) else "CPU-only")
        )
        ctx.device_error = "no GPU device"
        raise NoDevice(
            f"torch.cuda.is_available() is False ({build} torch build, {vendor} GPU expected)"
        )
    names = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        name = props.name
        arch = getattr(props, "gcnArchName", None)
        if arch:
            name = f"{name} ({arch})"
        names.append(name)
    ctx.device = "cuda"
    return f"{count} x {', '.join(names)}", {"device": "cuda", "count": count, "names": names}


#: A device is busy (the memory step warns) when other processes hold more than this share.
BUSY_SHARE = 0.5
GIB = float(1 << 30)
VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def step_memory(ctx):
    """Free and total memory of each device: warn when other processes hold more than
    BUSY_SHARE of one, fail below spec["require_free"] GiB free. The host names the holders
    from data (it sees every process; a container does not)."""
    torch, dev = ctx.need_device()
    need = ctx.spec.get("require_free")
    if dev != "cuda":
        detail, data = cpu_memory()
        if need and data.get("free", need * GIB) < need * GIB:
            return f"{detail}, below --require-free {number(need)} GiB", data, "fail"
        return detail, data
    status, parts = "pass", []
    devices = [gpu_memory(torch, i) for i in range(torch.cuda.device_count())]
    for d in devices:
        text = f"device {d['index']}: {d['free'] / GIB:.2f} GiB free of {d['total'] / GIB:.2f} GiB"
        if d["busy"]:
            share = int(100 * d["others"] // max(d["total"], 1))
            text += f", {d['others'] / GIB:.2f} GiB ({share}%) held by other processes"
            status = "warn" if status == "pass" else status
        if need and d["free"] < need * GIB:
            text, status = text + f", below --require-free {number(need)} GiB", "fail"
            d["short"] = True  # the host names who holds it (if anyone else does)
        parts.append(text)
    data = {
        "devices": devices,
        "pid": os.getpid(),
        "vendor": "amd" if getattr(torch.version, "hip", None) else "nvidia",
        "visible": {k: os.environ[k] for k in VISIBLE_VARS if k in os.environ},
    }
    return "; ".join(parts), data, status


def number(value):
    """8, 8.5, 1048576: a number as people write it (not 1.04858e+06)."""
    return (f"{value:.2f}").rstrip("0").rstrip(".")


def gpu_memory(torch, i):
    """Device i's free, total and other processes' bytes (ours: the caching allocator's)."""
    cuda = torch.cuda
    own = cuda.memory_reserved(i) if hasattr(cuda, "memory_reserved") else 0
    props = cuda.get_device_properties(i)
    if hasattr(cuda, "mem_get_info"):
        free, total = cuda.mem_get_info(i)
    else:  # torch < 1.10: only our own use is known
        total = props.total_memory
        free = total - own
    others = max(total - free - own, 0)
    uuid = getattr(props, "uuid", None)
    return {
        "index": i,
        "free": free,
        "total": total,
        "own": own,
        "others": others,
        "uuid": text_of(uuid) if uuid else None,
        "busy": others > BUSY_SHARE * total,
    }


def cpu_memory():
    gib = GIB
    total = avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key == "MemTotal":
                    total = int(rest.split()[0]) * 1024
                elif key == "MemAvailable":
                    avail = int(rest.split()[0]) * 1024
    except OSError:
        pass
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = None
    if total is None:
        return "cpu memory: unknown", {}
    if avail is None:
        return f"cpu memory: {total / gib:.2f} GiB total", {"total": total}
    return f"cpu: {avail / gib:.2f} GiB available of {total / gib:.2f} GiB", {
        "free": avail,
        "total": total,
    }
