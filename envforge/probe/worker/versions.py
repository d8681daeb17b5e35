"""The environment and its pins: env-snapshot, expected-versions, a small PEP 440 check.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

import os
import platform
import sys

from .common import Skip, StepFailed, describe, short

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


def step_env_snapshot(ctx):
    data = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "env": dict(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES))),
    }
    try:
        import numpy  # noqa: PLC0415 - a library under test, imported in its step

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
    detail = "Python {}, torch {} ({}), numpy {}".format(
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
        from packaging.specifiers import SpecifierSet  # noqa: PLC0415 - the target's, if any
        from packaging.version import Version  # noqa: PLC0415 - as above

        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except ImportError:
        pass
    except Exception:  # packaging present but the text is odd: fall through
        pass
    return fallback_contains(spec, version)


def fallback_contains(spec, version):
    """Release-number comparison for ==, !=, <, <=, >, >=, ~=, ===, and ==X.* clauses."""
    have = release(version)
    for text in spec.split(","):
        clause = text.strip()
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
        problems.append(f"torch is not importable ({ctx.torch_error})")
        raise StepFailed("; ".join(problems)) from None
    seen.append("torch " + torch.__version__)
    torch_version_problems(exp, torch.__version__, problems)
    build_problems(exp, torch, problems)
    arch_problems(exp, torch, problems, seen)
    if problems:
        raise StepFailed("; ".join(problems))
    return ", ".join(seen) if seen else "no pins; installed versions accepted"


def python_problems(exp, problems, seen):
    py = "{}.{}".format(*sys.version_info[:2])
    if exp.get("python"):
        seen.append("python " + py)
        if py != exp["python"]:
            problems.append("python {}, recipe pins {}".format(py, exp["python"]))


def numpy_problems(exp, problems, seen):
    if not exp.get("numpy"):
        return
    try:
        import numpy  # noqa: PLC0415 - a library under test, imported in its step
    except ImportError as exc:
        problems.append(
            "numpy is not importable ({}), recipe wants {}".format(short(exc, 80), exp["numpy"])
        )
        return
    have = numpy.__version__
    seen.append("numpy {} {}".format(have, exp["numpy"]))
    if not specifier_contains(exp["numpy"], have):
        problems.append("numpy {} is outside {}".format(have, exp["numpy"]))


def torch_version_problems(exp, have_torch, problems):
    want_torch = exp.get("torch")
    if not want_torch:
        return
    if "+" in want_torch:
        if have_torch != want_torch:
            problems.append(f"torch {have_torch}, recipe pins {want_torch}")
        return
    public, _, local = have_torch.partition("+")
    if release(public) != release(want_torch) or public.split(".")[:3] != want_torch.split(".")[:3]:
        problems.append(f"torch {have_torch}, recipe pins {want_torch}")
    acc = exp.get("accelerator")
    if local and acc and local != acc:
        problems.append(f"torch {have_torch} is the {local} build, recipe wants {acc}")


def build_problems(exp, torch, problems):
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if exp.get("hip"):
        if not hip:
            problems.append(
                "torch has no HIP (ROCm) support, recipe wants ROCm {} (wrong wheel: "
                "it would run on the CPU)".format(exp["hip"])
            )
        elif major_minor(hip) != major_minor(exp["hip"]):
            problems.append("torch built for HIP {}, recipe wants ROCm {}".format(hip, exp["hip"]))
    if exp.get("cuda"):
        if not cuda:
            problems.append(
                "torch has no CUDA support, recipe wants CUDA {} (wrong wheel: "
                "it would run on the CPU)".format(exp["cuda"])
            )
        elif major_minor(cuda) != major_minor(exp["cuda"]):
            problems.append("torch built for CUDA {}, recipe wants {}".format(cuda, exp["cuda"]))
    if exp.get("accelerator") == "cpu" and (hip or cuda):
        problems.append(
            f"torch is a {'HIP ' + str(hip) if hip else 'CUDA ' + str(cuda)} build, "
            "recipe wants the CPU build"
        )


def arch_problems(exp, torch, problems, seen):
    arch = exp.get("arch")
    archs = compiled_archs(torch) if arch else []
    if not archs:
        return
    if arch not in {a.split(":", 1)[0] for a in archs}:
        problems.append("torch is not compiled for {} (has {})".format(arch, " ".join(archs)))
    else:
        seen.append(f"arch {arch} compiled in")
