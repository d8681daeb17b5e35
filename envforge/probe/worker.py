# envforge probe worker: one self-contained, stdlib-only file.
#
# envforge runs this file *inside* the environment under test (the current interpreter,
# a virtualenv, a container) where envforge itself is not installed. It must therefore
# import nothing but the standard library at top level, and keep to Python 3.7 syntax
# (tests parse it with ast.parse(feature_version=(3, 7))). torch and numpy are imported
# only inside steps.
#
# Usage:  python worker.py SPEC      SPEC is a JSON text, a path to a JSON file, or "-"
#                                    (read the JSON from stdin).
#         python -c SOURCE SPEC      works the same (nothing relies on __file__).
#
# Protocol: one JSON object per line on stdout, flushed at once; nothing else ever goes
# to stdout (fd 1 is pointed at stderr; events use a private duplicate of it):
#   {"event": "hello", "pid": N, "python": "3.11.7", "protocol": 1}
#   {"event": "start", "step": NAME, "deadline": SECONDS}
#   {"event": "end", "step": NAME, "status": S, "seconds": F, "detail": TEXT, "data": {...}}
#   {"event": "done"}
# S is one of pass, fail, oom, no-device, skip. The host runner adds hang and crash: it
# owns the deadlines and kills this process (its whole group, or its container) when a
# step overruns. This file never waits on a deadline itself, except for a backstop alarm
# that ends an orphaned worker long after the runner would have.
#
# Processes: on POSIX this file runs as two processes. The first (the *launcher*) runs no
# user code: it becomes a child sub-reaper (Linux prctl; as PID 1 it is one anyway), forks
# the worker, waits for it, then kills every process still below it (found by walking
# /proc: a check's setsid'd or double-forked daemons are re-parented to it, never to
# init) and exits with the worker's status (the same signal, or 128+N as PID 1). It does
# the same on SIGTERM and when envforge goes away. The worker is a sub-reaper too: after
# each check step it stops whatever the check left running; the step keeps its own
# status and its detail names what was stopped.

import json
import os
import platform
import signal
import sys
import threading
import time
import traceback

PROTOCOL = 1
ENV_PREFIXES = (
    "HSA_",
    "HIP_",
    "MIOPEN_",
    "ROCR_",
    "ROCM_",
    "CUDA_",
    "PYTORCH_",
    "NCCL_",
    "TORCH_",
    "HCC_",
    "AMD_",
    "GPU_",
)
DETAIL_MAX = 400
#: Seconds past a step's deadline after which an orphaned worker ends itself (SIGALRM).
BACKSTOP = 30
#: Longest alarm the backstop sets (the host refuses deadlines beyond a day anyway).
ALARM_MAX = 7 * 24 * 3600

_out = None  # the private event stream


def emit(obj):
    line = json.dumps(obj, sort_keys=True, default=str)
    _out.write(line + "\n")
    _out.flush()


def printable(text):
    """Control characters and lone surrogates as escapes (\\x1b, \\udc80); idempotent."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if (
            ch.isprintable()
            or ch == " "
            or (code > 0x9F and not 0xD800 <= code <= 0xDFFF and code not in (0xFFFE, 0xFFFF))
        ):
            out.append(ch)
        elif code < 0x100:
            out.append("\\x%02x" % code)
        else:
            out.append("\\u%04x" % code)
    return "".join(out)


def text_of(obj):
    """str(obj), or a stand-in when its __str__ raises (a hostile exception)."""
    try:
        return str(obj)
    except BaseException:
        try:
            return "<unprintable %s>" % type(obj).__name__
        except BaseException:
            return "<unprintable>"


def short(text, limit=DETAIL_MAX):
    text = text_of(text)
    if len(text) > 64 * limit:
        text = text[: 64 * limit]
    text = printable(" ".join(text.split()))
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


class StepFailed(Exception):
    """A step's check did not hold (wrong number, wrong version): status fail."""


class NoDevice(Exception):
    """The recipe needs a GPU that torch cannot see: status no-device."""


class Skip(Exception):
    """The step cannot run because an earlier one broke what it needs."""


def is_oom(exc):
    name = type(exc).__name__
    if name in ("OutOfMemoryError", "MemoryError"):
        return True
    text = str(exc).lower()
    return (
        "out of memory" in text
        or "outofmemory" in text
        or "hiperroroutofmemory" in text
        or "cuda_error_out_of_memory" in text
    )


def describe(exc, prefer_file=None, where=True):
    """'TypeName: message (at file:line)' for a Python error."""
    msg = "%s: %s" % (type(exc).__name__, text_of(exc))
    if not where:
        return short(msg)
    where = None
    tb = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(tb):
        if prefer_file is None or frame.filename == prefer_file:
            where = "%s:%s" % (os.path.basename(frame.filename), frame.lineno)
            break
    if where:
        msg = "%s (at %s)" % (msg, where)
    cause = root_cause(exc)
    said = head_line(cause) if cause is not None else ""
    if said and said.partition(": ")[2] not in msg:
        said = " (cause: %s)" % short(said, DETAIL_MAX // 2)
        return short(msg, DETAIL_MAX - len(said)) + said
    return short(msg)


# --------------------------------------------------------------------------- context


class Context(object):
    def __init__(self, spec):
        self.spec = spec
        self.vendor = spec.get("vendor", "auto")
        self.expect = spec.get("expect") or {}
        self.torch = None
        self.torch_error = None
        self.device = None  # "cuda" or "cpu" once the device step ran
        self.device_error = None
        self.module_errors = {}  # distribution -> why its import step failed

    def need_torch(self):
        if self.torch is not None:
            return self.torch
        if self.torch_error is not None:
            raise Skip("torch is not importable: " + self.torch_error)
        try:
            import torch  # noqa: F401
        except BaseException as exc:  # ImportError, OSError from a broken .so, ...
            self.torch_error = describe(exc, where=False)
            raise
        self.torch = torch
        return torch

    def need_device(self):
        torch = self.need_torch()
        if self.device is None:
            raise Skip(self.device_error or "no usable device")
        return torch, self.device

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def need_module(self, name):
        """A companion module (torchvision) for its device steps; Skip when it did not import."""
        if name in self.module_errors:
            raise Skip("%s is not importable: %s" % (name, self.module_errors[name]))
        import importlib

        try:
            return importlib.import_module(name)
        except BaseException as exc:
            self.module_errors[name] = first_line(exc)
            raise Skip("%s is not importable: %s" % (name, self.module_errors[name]))


# --------------------------------------------------------------------------- steps


def step_env_snapshot(ctx):
    data = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "env": dict(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES))),
    }
    try:
        import numpy

        data["numpy"] = numpy.__version__
    except BaseException as exc:
        data["numpy"] = None
        data["numpy_error"] = describe(exc, where=False)
    try:
        torch = ctx.need_torch()
    except BaseException:
        data["torch"] = None
        data["torch_error"] = ctx.torch_error
        return "torch not importable: " + str(ctx.torch_error), data, "fail"
    data["torch"] = torch.__version__
    version = getattr(torch, "version", None)
    data["hip"] = getattr(version, "hip", None)
    data["cuda"] = getattr(version, "cuda", None)
    data["git"] = getattr(version, "git_version", None)
    data["arch_flags"] = compiled_archs(torch)
    try:
        data["cudnn"] = torch.backends.cudnn.version()
    except BaseException:
        data["cudnn"] = None
    build = "cpu build"
    if data["hip"]:
        build = "HIP " + str(data["hip"])
    elif data["cuda"]:
        build = "CUDA " + str(data["cuda"])
    detail = "Python %s, torch %s (%s), numpy %s" % (
        data["python"],
        data["torch"],
        build,
        data["numpy"] or "missing",
    )
    if data["arch_flags"]:
        detail += ", archs " + " ".join(data["arch_flags"])
    return detail, data


def compiled_archs(torch):
    """Arch list compiled into torch; works without a device (get_arch_list() does not)."""
    flags = None
    getter = getattr(torch._C, "_cuda_getArchFlags", None)
    if getter is not None:
        try:
            flags = getter()
        except BaseException:
            flags = None
    if not flags:
        return []
    return sorted(set(flags.replace(";", " ").split()))


def release(text):
    """'1.26.4' -> (1, 26, 4); '2.0.0rc1' -> (2, 0, 0); '2.13.0+cpu' -> (2, 13, 0)."""
    text = text.split("+", 1)[0].strip()
    if text.startswith("v"):
        text = text[1:]
    out = []
    for part in text.split("."):
        digits = ""
        for ch in part:
            if ch.isdigit():
                digits += ch
            else:
                break
        if digits == "":
            break
        out.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(out)


def _pad(a, n):
    return tuple(a) + (0,) * (n - len(a))


def _cmp(a, b):
    n = max(len(a), len(b))
    a, b = _pad(a, n), _pad(b, n)
    return (a > b) - (a < b)


def specifier_contains(spec, version):
    """PEP 440 specifier check: packaging when importable, else a small comparator."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except ImportError:
        pass
    except Exception:  # packaging present but the text is odd: fall through
        pass
    return fallback_contains(spec, version)


def fallback_contains(spec, version):
    """Release-number comparison for ==, !=, <, <=, >, >=, ~=, ===, and ==X.* clauses."""
    have = release(version)
    for clause in spec.split(","):
        clause = clause.strip()
        if not clause:
            continue
        op = ""
        for candidate in ("~=", "==", "!=", "<=", ">=", "<", ">", "==="):
            if clause.startswith(candidate) and len(candidate) > len(op):
                op = candidate
        want_text = clause[len(op) :].strip()
        if op in ("==", "!=") and want_text.endswith(".*"):
            prefix = release(want_text[:-2])
            same = _pad(have, len(prefix))[: len(prefix)] == prefix
            if same != (op == "=="):
                return False
            continue
        want = release(want_text)
        c = _cmp(have, want)
        if op in ("==", "===", ""):
            ok = c == 0
        elif op == "!=":
            ok = c != 0
        elif op == "<":
            ok = c < 0
        elif op == "<=":
            ok = c <= 0
        elif op == ">":
            ok = c > 0
        elif op == ">=":
            ok = c >= 0
        else:  # ~=
            ok = c >= 0 and have[: max(len(want) - 1, 1)] == want[: max(len(want) - 1, 1)]
        if not ok:
            return False
    return True


def major_minor(text):
    return ".".join(str(x) for x in release(str(text))[:2])


def step_expected_versions(ctx):
    exp = ctx.expect
    problems, seen = [], []
    python_problems(exp, problems, seen)
    numpy_problems(exp, problems, seen)
    try:
        torch = ctx.need_torch()
    except Skip:
        problems.append("torch is not importable (%s)" % ctx.torch_error)
        raise StepFailed("; ".join(problems))
    seen.append("torch " + torch.__version__)
    torch_version_problems(exp, torch.__version__, problems)
    build_problems(exp, torch, problems)
    arch_problems(exp, torch, problems, seen)
    if problems:
        raise StepFailed("; ".join(problems))
    return ", ".join(seen) if seen else "no pins; installed versions accepted"


def python_problems(exp, problems, seen):
    py = "%d.%d" % sys.version_info[:2]
    if exp.get("python"):
        seen.append("python " + py)
        if py != exp["python"]:
            problems.append("python %s, recipe pins %s" % (py, exp["python"]))


def numpy_problems(exp, problems, seen):
    if not exp.get("numpy"):
        return
    try:
        import numpy
    except ImportError as exc:
        problems.append(
            "numpy is not importable (%s), recipe wants %s" % (short(exc, 80), exp["numpy"])
        )
        return
    have = numpy.__version__
    seen.append("numpy %s %s" % (have, exp["numpy"]))
    if not specifier_contains(exp["numpy"], have):
        problems.append("numpy %s is outside %s" % (have, exp["numpy"]))


def torch_version_problems(exp, have_torch, problems):
    want_torch = exp.get("torch")
    if not want_torch:
        return
    if "+" in want_torch:
        if have_torch != want_torch:
            problems.append("torch %s, recipe pins %s" % (have_torch, want_torch))
        return
    public, _, local = have_torch.partition("+")
    if release(public) != release(want_torch) or public.split(".")[:3] != want_torch.split(".")[:3]:
        problems.append("torch %s, recipe pins %s" % (have_torch, want_torch))
    acc = exp.get("accelerator")
    if local and acc and local != acc:
        problems.append("torch %s is the %s build, recipe wants %s" % (have_torch, local, acc))


def build_problems(exp, torch, problems):
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if exp.get("hip"):
        if not hip:
            problems.append(
                "torch has no HIP (ROCm) support, recipe wants ROCm %s (wrong wheel: "
                "it would run on the CPU)" % exp["hip"]
            )
        elif major_minor(hip) != major_minor(exp["hip"]):
            problems.append("torch built for HIP %s, recipe wants ROCm %s" % (hip, exp["hip"]))
    if exp.get("cuda"):
        if not cuda:
            problems.append(
                "torch has no CUDA support, recipe wants CUDA %s (wrong wheel: "
                "it would run on the CPU)" % exp["cuda"]
            )
        elif major_minor(cuda) != major_minor(exp["cuda"]):
            problems.append("torch built for CUDA %s, recipe wants %s" % (cuda, exp["cuda"]))
    if exp.get("accelerator") == "cpu" and (hip or cuda):
        problems.append(
            "torch is a %s build, recipe wants the CPU build"
            % ("HIP " + str(hip) if hip else "CUDA " + str(cuda))
        )


def arch_problems(exp, torch, problems, seen):
    arch = exp.get("arch")
    archs = compiled_archs(torch) if arch else []
    if not archs:
        return
    if arch not in set(a.split(":", 1)[0] for a in archs):
        problems.append("torch is not compiled for %s (has %s)" % (arch, " ".join(archs)))
    else:
        seen.append("arch %s compiled in" % arch)


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
            "this torch (%s) is not a %s build, so it cannot use the %s GPU"
            % (
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
            return "cpu (torch.cuda.is_available() raised %s)" % describe(exc), {
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
            "torch.cuda.is_available() is False (%s torch build, %s GPU expected)" % (build, vendor)
        )
    names = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        name = props.name
        arch = getattr(props, "gcnArchName", None)
        if arch:
            name = "%s (%s)" % (name, arch)
        names.append(name)
    ctx.device = "cuda"
    return "%d x %s" % (count, ", ".join(names)), {"device": "cuda", "count": count, "names": names}


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
            return "%s, below --require-free %s GiB" % (detail, number(need)), data, "fail"
        return detail, data
    status, parts = "pass", []
    devices = [gpu_memory(torch, i) for i in range(torch.cuda.device_count())]
    for d in devices:
        text = "device %d: %.2f GiB free of %.2f GiB" % (
            d["index"],
            d["free"] / GIB,
            d["total"] / GIB,
        )
        if d["busy"]:
            text += ", %.2f GiB (%d%%) held by other processes" % (
                d["others"] / GIB,
                100 * d["others"] // max(d["total"], 1),
            )
            status = "warn" if status == "pass" else status
        if need and d["free"] < need * GIB:
            text, status = text + ", below --require-free %s GiB" % number(need), "fail"
            d["short"] = True  # the host names who holds it (if anyone else does)
        parts.append(text)
    data = {
        "devices": devices,
        "pid": os.getpid(),
        "vendor": "amd" if getattr(torch.version, "hip", None) else "nvidia",
        "visible": dict((k, os.environ[k]) for k in VISIBLE_VARS if k in os.environ),
    }
    return "; ".join(parts), data, status


def number(value):
    """8, 8.5, 1048576: a number as people write it (not 1.04858e+06)."""
    return ("%.2f" % value).rstrip("0").rstrip(".")


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
        return "cpu memory: %.2f GiB total" % (total / gib), {"total": total}
    return "cpu: %.2f GiB available of %.2f GiB" % (avail / gib, total / gib), {
        "free": avail,
        "total": total,
    }


def step_small_tensor(ctx):
    torch, dev = ctx.need_device()
    t = torch.ones(10, 10, device=dev) * 2.0
    total = float(t.sum().item())
    ctx.sync()
    if total != 200.0:
        raise StepFailed("sum of a 10x10 tensor of 2s is %r, expected 200" % total)
    return "10x10 tensor on %s" % dev


def _gen(torch):
    g = torch.Generator()
    g.manual_seed(1234)
    return g


def _close(torch, got, want, rtol, what):
    """Compare against a float64 reference; tolerance relative to the reference's scale."""
    got = got.detach().to("cpu").double()
    want = want.detach().to("cpu").double()
    if got.shape != want.shape:
        raise StepFailed("%s: shape %s, expected %s" % (what, tuple(got.shape), tuple(want.shape)))
    if not bool(torch.isfinite(got).all()):
        raise StepFailed("%s: result has NaN/Inf" % what)
    scale = float(want.abs().max()) or 1.0
    err = float((got - want).abs().max()) / scale
    if err > rtol:
        raise StepFailed("%s: max error %.3g of scale exceeds %.3g" % (what, err, rtol))
    return err


def step_matmul(ctx):
    torch, dev = ctx.need_device()
    g = _gen(torch)
    a = torch.randn(128, 128, generator=g)
    b = torch.randn(128, 128, generator=g)
    got = a.to(dev) @ b.to(dev)
    ctx.sync()
    err = _close(torch, got, a.double() @ b.double(), 1e-3, "matmul 128x128")
    return "128x128 on %s vs CPU float64: max rel error %.2g" % (dev, err)


def step_transfer_back(ctx):
    torch, dev = ctx.need_device()
    src = torch.arange(4096, dtype=torch.float32)
    back = src.to(dev).mul(3.0).to("cpu")
    if not bool(torch.equal(back, src * 3.0)):
        raise StepFailed("values changed on the round trip to %s and back" % dev)
    return "4096 floats %s -> cpu intact" % dev


#: (batch, in channels, height/width, out channels): includes the 44x44 case that hangs
#: MIOpen on RDNA1 without MIOPEN_DEBUG_CONV_IMPLICIT_GEMM.
CONV_CASES = ((1, 3, 16, 8), (2, 8, 44, 16), (1, 16, 64, 16))


def step_conv2d(ctx):
    torch, dev = ctx.need_device()
    nn = torch.nn
    g = _gen(torch)
    worst = 0.0
    for batch, cin, hw, cout in CONV_CASES:
        what = "conv2d %dx%dx%dx%d" % (batch, cin, hw, hw)
        x = torch.randn(batch, cin, hw, hw, generator=g)
        conv = nn.Conv2d(cin, cout, 3, padding=1)
        with torch.no_grad():
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.2)
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=g) * 0.2)
        ref = _conv_fwd_bwd(torch, conv, x, "cpu", torch.float64)
        got = _conv_fwd_bwd(torch, conv, x, dev, torch.float32)
        ctx.sync()
        for name, g_val, r_val in zip(("forward", "grad input", "grad weight"), got, ref):
            worst = max(worst, _close(torch, g_val, r_val, 2e-3, "%s %s" % (what, name)))
    sizes = ", ".join("%dx%d" % (c[2], c[2]) for c in CONV_CASES)
    return "fwd+bwd %s on %s vs CPU float64: max rel error %.2g" % (sizes, dev, worst)


def _conv_fwd_bwd(torch, conv, x, dev, dtype):
    import copy

    layer = copy.deepcopy(conv).to(device=dev, dtype=dtype)
    inp = x.to(device=dev, dtype=dtype).requires_grad_(True)
    out = layer(inp)
    weights = torch.linspace(-1.0, 1.0, out.numel(), dtype=dtype).reshape(out.shape).to(dev)
    (out * weights).sum().backward()
    return out, inp.grad, layer.weight.grad


def step_autocast(ctx):
    torch, dev = ctx.need_device()
    g = _gen(torch)
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
        raise StepFailed("matmul under autocast gave %s, expected %s" % (m.dtype, dtype))
    ref_conv = conv.to("cpu").double()(x.double())
    _close(torch, y, ref_conv, 3e-2, "autocast conv2d")
    _close(torch, m, lin_a.double() @ lin_b.double(), 3e-2, "autocast matmul")
    if conv.weight.grad is None or not bool(torch.isfinite(conv.weight.grad).all()):
        raise StepFailed("autocast backward gave no finite gradient")
    return "%s autocast conv2d+matmul fwd/bwd on %s" % (str(dtype).replace("torch.", ""), dev)


def step_grad_checkpoint(ctx):
    torch, dev = ctx.need_device()
    import torch.utils.checkpoint as ckpt

    nn = torch.nn
    g = _gen(torch)
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
    _close(torch, checked[0], plain[0], 1e-4, "checkpointed grad input")
    _close(torch, checked[1], plain[1], 1e-4, "checkpointed grad weight")
    return "checkpointed backward (use_reentrant=False) matches plain backward on %s" % dev


# --------------------------------------------------------------------------- packages
#
# "import:NAME" imports every top-level module of the installed distribution NAME, as its
# metadata lists them (top_level.txt, else RECORD): never a hand-written module map.


def canonical(name):
    """PEP 503 name: 'Pillow' -> 'pillow', 'typing_extensions' -> 'typing-extensions'."""
    out, dash = [], False
    for ch in name.lower():
        if ch in "-_.":
            dash = True
            continue
        if dash and out:
            out.append("-")
        dash = False
        out.append(ch)
    return "".join(out)


def find_distribution(name):
    """The metadata folder (NAME-VERSION.dist-info / .egg-info) first on sys.path, or None."""
    want = canonical(name)
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for folder in names:
            stem, dot, kind = folder.rpartition(".")
            if (
                dot
                and kind in ("dist-info", "egg-info")
                and canonical(stem.split("-", 1)[0]) == want
            ):
                path = os.path.join(entry or ".", folder)
                if os.path.isdir(path):
                    return path
    return None


def read_meta(folder, name):
    try:
        with open(os.path.join(folder, name), "r", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def dist_version(folder):
    text = read_meta(folder, "METADATA") or read_meta(folder, "PKG-INFO") or ""
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return os.path.basename(folder).rpartition(".")[0].partition("-")[2] or "?"


def module_of(path):
    """The top-level module a RECORD path installs, or None (metadata, scripts, .pth)."""
    head, sep, _ = path.replace("\\", "/").partition("/")
    if sep:
        if head.endswith((".dist-info", ".egg-info", ".data")) or head in ("..", "__pycache__"):
            return None
        return head
    if head.endswith(".py"):
        return head[:-3]
    if head.endswith((".so", ".pyd")):
        return head.split(".", 1)[0]
    return None


def top_level_modules(folder):
    """Importable top-level names of a distribution: top_level.txt, else RECORD's paths."""
    text = read_meta(folder, "top_level.txt")
    if text is not None:
        names = [line.strip().replace("\\", "/").split("/")[0] for line in text.splitlines()]
    else:
        import csv

        rows = csv.reader((read_meta(folder, "RECORD") or "").splitlines())
        names = [module_of(row[0]) for row in rows if row]
    return sorted(set(n for n in names if n and n.isidentifier() and not n.startswith("__")))


def head_line(exc):
    """'TypeName: the first line of its message'."""
    lines = text_of(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, lines[0].strip() if lines else "")


def root_cause(exc):
    """The innermost exception exc was raised from or while handling (torch's "Could not
    load this library: PATH" hides the loader's "libtorch_cuda.so: cannot open shared
    object file" in its __cause__), or None when there is none."""
    seen, cause = [exc], None
    current = exc
    while len(seen) < 16:
        nxt = current.__cause__
        if nxt is None and not current.__suppress_context__:
            nxt = current.__context__
        if nxt is None or nxt in seen:
            break
        seen.append(nxt)
        cause = current = nxt
    return cause


def clip(text, limit):
    """text on one line, at most limit characters: the middle cut, never the end (where
    a loader's message puts the cause)."""
    text = short(text, 64 * limit)
    if len(text) <= limit:
        return text
    tail = (limit - 5) * 2 // 3
    return text[: limit - 5 - tail] + " ... " + text[len(text) - tail :]


def first_line(exc, limit=300):
    """'TypeName: the first line of the message', and the first line of the underlying
    cause when the message does not already say it (one line, at most limit)."""
    text = head_line(exc)
    cause = root_cause(exc)
    if cause is not None:
        said = head_line(cause)
        if said.partition(": ")[2] not in text:
            text = "%s (cause: %s)" % (text, said)
    return clip(text, limit)


def make_import_step(name):
    def step_import(ctx):
        folder = find_distribution(name)
        if folder is None:
            ctx.module_errors[name] = "not installed"
            raise StepFailed("%s is not installed (no %s metadata on sys.path)" % (name, name))
        version = dist_version(folder)
        modules = top_level_modules(folder)
        asked = ctx.spec.get("skip_imports") or {}
        imported, skipped = [], []
        for module in modules:
            if module in asked:
                skipped.append((module, "skip_imports: %s" % asked[module]))
                continue
            why = import_or_fail(ctx, name, version, module, folder)
            if why is None:
                imported.append(module)
            else:
                skipped.append((module, why))
        detail = "%s %s: imported %s" % (name, version, ", ".join(imported) or "no modules")
        if skipped:
            detail += "; skipped " + "; ".join("%s (%s)" % pair for pair in skipped)
        data = {"distribution": name, "version": version, "modules": imported}
        if skipped:
            data["skipped"] = [{"module": m, "reason": r} for m, r in skipped]
        return detail, data

    return step_import


def import_or_fail(ctx, name, version, module, folder=None):
    """None when module imports; why it was skipped when it needs an extra that was not
    installed (:func:`missing_extra`); StepFailed otherwise."""
    import importlib

    try:
        importlib.import_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # ImportError, a broken .so's OSError, RuntimeError, ...
        why = missing_extra(ctx, name, folder, exc) if folder else None
        if why is not None:
            return why
        traceback.print_exc(file=sys.stderr)
        prefix = "%s %s: import %s: " % (name, version, module)
        ctx.module_errors[name] = first_line(exc)
        raise StepFailed(prefix + first_line(exc, max(120, DETAIL_MAX - len(prefix))))
    return None


#: A marker's ``extra == "d"`` (either way round).
EXTRA_MARKER = (r"""\bextra\s*==\s*["']([^"']+)["']""", r"""["']([^"']+)["']\s*==\s*extra\b""")


def requires_by_extra(folder):
    """(names required without an extra, {extra: names required only under it}) from
    the distribution's METADATA Requires-Dist lines (canonical names)."""
    import re

    text = read_meta(folder, "METADATA") or read_meta(folder, "PKG-INFO") or ""
    base, extras = set(), {}
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        if not line.lower().startswith("requires-dist:"):
            continue
        spec, _, marker = line.split(":", 1)[1].partition(";")
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        if not found:
            continue
        req = canonical(found.group(1))
        named = [m for pattern in EXTRA_MARKER for m in re.findall(pattern, marker)]
        if not named:
            base.add(req)
        for extra in named:
            extras.setdefault(canonical(extra), set()).add(req)
    return base, extras


def missing_modules(exc):
    """Top-level names an ImportError says are missing, through its whole chain: a
    module that catches the ModuleNotFoundError and raises its own ImportError "from
    None" (blackd: "aiohttp dependency is not installed: No module named 'aiohttp'")
    still says which."""
    import re

    names, seen, current = [], [], exc
    while isinstance(current, ImportError) and current not in seen and len(seen) < 16:
        seen.append(current)
        found = [getattr(current, "name", None) or ""]
        found += re.findall(r"No module named '([^']+)'", text_of(current))
        for name in found:
            top = name.split(".")[0]
            if top and top not in names:
                names.append(top)
        current = current.__cause__ or current.__context__
    return names


def missing_extra(ctx, name, folder, exc):
    """Why an import that failed is skipped, or None when it is a failure.

    Skipped only when exc is an ImportError whose chain names missing modules
    (:func:`missing_modules`), none of them installed, each a distribution that ``name``
    requires only under extras the stack did not ask for ("blackd" needs aiohttp, which
    only black[d] requires). A name required without an extra, or under an extra that was
    asked for, is a failure: the environment lacks what it was meant to have."""
    missing = missing_modules(exc)
    if not missing or any(find_distribution(m) is not None for m in missing):
        return None
    base, extras = requires_by_extra(folder)
    asked = set(canonical(e) for e in (ctx.spec.get("extras") or {}).get(name, ()))
    under = []
    for module in missing:
        wanted = canonical(module)
        these = sorted(extra for extra, names in extras.items() if wanted in names)
        if wanted in base or not these or asked.intersection(these):
            return None
        under += [extra for extra in these if extra not in under]
    return "needs %s, required only by %s, not installed" % (
        ", ".join(missing),
        " or ".join("%s[%s]" % (name, extra) for extra in under),
    )


# --------------------------------------------------------------------------- companions


def nms_case(torch):
    """Overlapping boxes in clusters, distinct scores, and the IoU threshold in the widest
    gap between the pairs' IoUs near 0.5 (float32 and float64 agree on every decision)."""
    g = _gen(torch)
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
            "torchvision.ops.nms on %s kept %d boxes, the float64 reference %d "
            "(first difference at rank %d)"
            % (dev, len(got), len(want), first_difference(got, want))
        )
    return "torchvision.ops.nms on %s: %d of %d boxes kept, as the float64 reference" % (
        dev,
        len(got),
        len(boxes),
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
    x = torch.randn(2, 3, 32, 32, generator=_gen(torch))
    with torch.no_grad():
        got = model.to(dev)(x.to(dev)).to("cpu")
        ctx.sync()
        want = model.to("cpu").double()(x.double())
    err = _close(torch, got, want, 2e-2, "ResNet forward")  # TF32 convolutions on GPUs
    return "ResNet (BasicBlock x4) forward, 2x3x32x32, on %s vs CPU float64: max rel error %.2g" % (
        dev,
        err,
    )


def step_torchaudio_melspectrogram(ctx):
    torch, dev = ctx.need_device()
    ta = ctx.need_module("torchaudio")
    t = torch.arange(16000, dtype=torch.float64) / 16000.0
    wave = (
        torch.sin(2 * 3.141592653589793 * 440.0 * t)
        + 0.5 * torch.sin(2 * 3.141592653589793 * 1500.0 * t)
        + 0.1 * torch.randn(16000, generator=_gen(torch), dtype=torch.float64)
    )[None, :]
    mel = ta.transforms.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=40)
    with torch.no_grad():
        got = mel.to(dev)(wave.float().to(dev)).to("cpu")
        ctx.sync()
        want = mel.to("cpu").double()(wave)
    err = _close(torch, got, want, 1e-3, "MelSpectrogram")
    return "MelSpectrogram (1 s at 16 kHz, 40 mels) on %s vs CPU float64: max rel error %.2g" % (
        dev,
        err,
    )


def make_check_step(check):
    def step_check(ctx):
        import runpy

        path = materialize(check)
        if ctx.vendor != "none" and ctx.device is None and ctx.device_error:
            raise Skip(ctx.device_error)
        runpy.run_path(path, run_name="__main__")
        return "finished without raising"

    step_check.check_path = check.get("path")
    step_check.is_check = True
    return step_check


def materialize(check):
    """The check's own file when it is here unchanged; else a private copy of its source."""
    path = check.get("path")
    source = check.get("source")
    if path and os.path.isfile(path):
        try:
            with open(path, "r", encoding="utf-8") as fh:
                # never more than the source's size: the file may have grown meanwhile
                limit = -1 if source is None else len(source) + 1
                if source is None or fh.read(limit) == source:
                    return path
        except (OSError, UnicodeDecodeError, ValueError):
            pass
    if source is None:
        raise StepFailed("check file %s is missing" % path)
    folder = os.path.join(SCRATCH[0] or scratch_folder(), "checks")
    if not os.path.isdir(folder):
        os.makedirs(folder)
    target = os.path.join(
        folder, "%d-%s" % (len(os.listdir(folder)), os.path.basename(path or "check.py"))
    )
    with open(target, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(source)
    return target


#: Where check copies go: the spec file's folder (removed by whoever made it), else a
#: temporary folder this worker removes as it ends.
SCRATCH = [None]


def scratch_folder():
    import tempfile

    SCRATCH[0] = tempfile.mkdtemp(prefix="envforge-check-")
    OWN_SCRATCH.append(SCRATCH[0])
    return SCRATCH[0]


OWN_SCRATCH = []


def remove_own_scratch():
    import shutil

    for folder in OWN_SCRATCH:
        shutil.rmtree(folder, ignore_errors=True)


STEPS = {
    "env-snapshot": step_env_snapshot,
    "expected-versions": step_expected_versions,
    "device": step_device,
    "memory": step_memory,
    "small-tensor": step_small_tensor,
    "matmul": step_matmul,
    "transfer-back": step_transfer_back,
    "conv2d": step_conv2d,
    "autocast": step_autocast,
    "grad-checkpoint": step_grad_checkpoint,
    "torchvision-nms": step_torchvision_nms,
    "torchvision-convnet": step_torchvision_convnet,
    "torchaudio-melspectrogram": step_torchaudio_melspectrogram,
}
IMPORT_PREFIX = "import:"


# --------------------------------------------------------------------------- driver


#: Written to stderr as each step starts, so the host can keep only that step's stderr.
STDERR_MARK = "[envforge-probe] step "


def run_step(ctx, name, func, deadline):
    sys.stderr.write(STDERR_MARK + name + "\n")
    sys.stderr.flush()
    emit({"event": "start", "step": name, "deadline": deadline})
    set_alarm(deadline)
    start = time.monotonic()
    try:
        status, detail, data = call_step(ctx, name, func)
    finally:
        set_alarm(None)
    seconds = round(time.monotonic() - start, 4)
    if getattr(func, "is_check", False):
        detail = note_stopped(detail, stop_descendants(os.getpid()))
    event = {
        "event": "end",
        "step": name,
        "status": status,
        "seconds": seconds,
        "detail": short(detail),
    }
    if data is not None:
        event["data"] = data
    emit(event)


def set_alarm(deadline):
    """The backstop alarm past a step's deadline; None or 0 clears it."""
    if not hasattr(signal, "SIGALRM"):
        return
    if not deadline:
        signal.alarm(0)
        return
    try:
        signal.alarm(min(int(deadline), ALARM_MAX) + BACKSTOP)
    except (OverflowError, ValueError):
        pass


def call_step(ctx, name, func):
    """(status, detail, data) of one step; everything it raises is reported, never fatal."""
    try:
        return step_outcome(func(ctx))
    except Skip as exc:
        return "skip", "skipped: %s" % exc, None
    except NoDevice as exc:
        ctx.device_error = ctx.device_error or "no GPU device"
        return "no-device", str(exc), None
    except StepFailed as exc:
        return "fail", str(exc), None
    except SystemExit as exc:  # a check calling sys.exit(0) passed; any other code failed
        if exc.code in (None, 0):
            return "pass", "exited with sys.exit(0)", None
        return "fail", "check exited with sys.exit(%r)" % (exc.code,), None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return (
            step_error(ctx, name, func, exc),
            describe(exc, getattr(func, "check_path", None)),
            None,
        )


def step_outcome(result):
    """A step's return value as (status, detail, data): TEXT or (TEXT, DATA[, STATUS])."""
    if not isinstance(result, tuple):
        return "pass", result or "", None
    data = result[1] if len(result) > 1 else None
    return (result[2] if len(result) > 2 else "pass"), result[0], data


def step_error(ctx, name, func, exc):
    """The status of a step that raised exc (fail or oom), after noting what it broke."""
    status = "oom" if is_oom(exc) else "fail"
    traceback.print_exc(file=sys.stderr)
    if name == "device":
        ctx.device_error = "device step failed: " + short(exc, 120)
    if status == "oom" and ctx.torch is not None and ctx.device == "cuda":
        try:
            ctx.torch.cuda.empty_cache()
        except BaseException:
            pass
    return status


def note_stopped(detail, stopped):
    """detail, plus what a check left running (now stopped)."""
    if not stopped:
        return detail
    return (
        short(detail, DETAIL_MAX - 120)
        + "; "
        + short(
            "stopped %d process%s the check left running: %s"
            % (len(stopped), "" if len(stopped) == 1 else "es", ", ".join(stopped)),
            115,
        )
    )


def proc_table():
    """{pid: (ppid, state)} from /proc; None where there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                data = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = data.rpartition(")")[2].split()
        if len(fields) > 2 and fields[1].lstrip("-").isdigit():
            table[int(name)] = (int(fields[1]), fields[0])
    return table


def descendants(root, table):
    """Live processes below root in table, parents before their children."""
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for pid in sorted(children.get(todo.pop(0), ())):
            if pid != root and pid not in found:
                found.append(pid)
                todo.append(pid)
    return [pid for pid in found if table[pid][1] not in ("Z", "X")]


def command_of(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            words = fh.read(200).split(b"\0")
    except OSError:
        return "pid %d" % pid
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    return printable("%s (pid %d)" % (text[:60] or "?", pid))


def has_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return bool(fh.read(1))
    except OSError:
        return False


def stop_descendants(root):
    """Freeze (SIGSTOP), then SIGKILL and reap every process below root; their commands.

    Freezing first keeps them from forking or moving away while the tree is walked. As a
    sub-reaper, root inherits every orphan below it, so nothing escapes by re-parenting.
    """
    table = proc_table()
    if table is None:  # no /proc: the process group is all there is to kill
        return []
    frozen = []
    for _ in range(200):
        new = [p for p in descendants(root, table) if p not in frozen]
        if not new:
            break
        for pid in new:
            frozen.append(pid)
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        table = proc_table() or {}
    # Name only what really was left running: a process already on its way out when
    # it was found (a double fork's middle process) ends on its own and has no cmdline.
    time.sleep(0.01)
    table = proc_table() or {}
    names = [
        command_of(pid)
        for pid in frozen
        if pid in table and table[pid][1] not in ("Z", "X") and has_cmdline(pid)
    ]
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    reap(root, frozen)
    return names


def reap(root, pids, seconds=2.0):
    """Collect the zombies of killed processes that are (or became) children of root."""
    end = time.monotonic() + seconds
    while True:
        for pid in pids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
        table = proc_table() or {}
        if not [p for p in pids if p in table and table[p][0] == root] or time.monotonic() > end:
            return
        time.sleep(0.01)


def become_subreaper():
    """Orphans below this process re-parent to it, not to init (Linux >= 3.4)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:
        return False


def watch_parent(on_orphaned):
    """Call on_orphaned() when the process that started this one goes away."""
    parent = os.getppid()
    if parent <= 1:
        return

    def loop():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                on_orphaned()

    t = threading.Thread(target=loop, name="envforge-parent-watch")
    t.daemon = True
    t.start()


def worker_orphaned():
    # The launcher is gone: end whatever the steps started, and this worker.
    stop_descendants(os.getpid())
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os._exit(3)


TREE_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def launch():
    """Split into launcher (this process) and worker (the child, which returns).

    The launcher waits for the worker, then kills every process left below it and exits
    with the worker's status: the same signal (so the host sees SIGSEGV as before), or
    128+N as PID 1, where the kernel drops signals PID 1 sends itself. TERM, INT, HUP and
    QUIT, and envforge going away, end the whole tree the same way.
    """
    if not hasattr(os, "fork"):
        return
    pid1 = os.getpid() == 1
    if not pid1:
        become_subreaper()
    try:
        child = os.fork()
    except OSError:  # no process to spare: run the steps in this one, unsupervised
        return
    if child == 0:
        try:
            os.setpgid(0, 0)  # the worker leads a group of its own (killpg reaches its steps)
        except OSError:
            pass
        return
    supervise(child, pid1)


def supervise(child, pid1):
    """The launcher's life: wait for the worker, stop what is left, exit as it did."""
    me = os.getpid()

    def end_all(signum=None, frame=None):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
        stop_descendants(me)
        os._exit(128 + (signum or signal.SIGKILL))

    for name in TREE_SIGNALS:
        signal.signal(getattr(signal, name), end_all)
    watch_parent(end_all)
    status = wait_for(child)
    for name in TREE_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_IGN)  # the cleanup below must finish
    stop_descendants(me)
    exit_like(status, pid1)


def wait_for(child):
    """The wait status of child (reaping every orphan meanwhile); None if it is not ours."""
    while True:
        try:
            pid, got = os.wait()
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if pid == child:
            return got


def exit_like(status, pid1):
    """Exit as the worker did: its signal (128+N as PID 1) or its exit code."""
    if status is None:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if not pid1:
            mirror_signal(sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def mirror_signal(sig):
    """Die of signal sig, as the worker did (no second core dump)."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except Exception:
        pass
    try:
        signal.signal(sig, signal.SIG_DFL)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    except Exception:  # SIGKILL and SIGSTOP cannot be caught, blocked or reset
        pass
    try:
        os.kill(os.getpid(), sig)
        time.sleep(1.0)
    except Exception:
        pass


def load_spec(argv):
    if len(argv) < 2:
        raise SystemExit("usage: worker.py SPEC  (JSON text, JSON file path, or - for stdin)")
    arg = argv[1]
    if arg == "-":
        return json.loads(sys.stdin.read())
    if arg.lstrip().startswith("{"):
        return json.loads(arg)
    SCRATCH[0] = os.path.dirname(os.path.abspath(arg))
    with open(arg, "r") as fh:
        return json.load(fh)


def main(argv):
    global _out
    launch()
    become_subreaper()
    # Events go to a private copy of stdout; fd 1 and sys.stdout go to stderr so that
    # prints from checks, torch warnings and C libraries never corrupt the stream.
    sys.stdout.flush()
    _out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import faulthandler

        faulthandler.enable(file=sys.stderr, all_threads=True)
    except Exception:
        pass
    spec = load_spec(argv)
    watch_parent(worker_orphaned)
    emit(
        {
            "event": "hello",
            "pid": os.getpid(),
            "python": platform.python_version(),
            "protocol": PROTOCOL,
        }
    )
    ctx = Context(spec)
    deadlines = spec.get("deadlines") or {}
    default_deadline = spec.get("step_timeout")
    checks = dict((c["step"], c) for c in spec.get("checks") or [])
    for name in spec.get("steps") or []:
        if name in STEPS:
            func = STEPS[name]
        elif name.startswith(IMPORT_PREFIX):
            func = make_import_step(name[len(IMPORT_PREFIX) :])
        elif name in checks:
            func = make_check_step(checks[name])
        else:
            emit({"event": "start", "step": name, "deadline": 0})
            emit(
                {
                    "event": "end",
                    "step": name,
                    "status": "fail",
                    "seconds": 0.0,
                    "detail": "this worker has no step named %r" % name,
                }
            )
            continue
        run_step(ctx, name, func, deadlines.get(name, default_deadline))
    stop_descendants(os.getpid())
    remove_own_scratch()
    emit({"event": "done"})
    _out.close()
    sys.stderr.flush()
    # Skip interpreter teardown: some GPU runtimes hang or crash in their atexit hooks,
    # and every result is already out.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
