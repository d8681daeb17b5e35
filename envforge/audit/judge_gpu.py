"""Check 1: does every shared object with GPU code have code the target arch runs?

NVIDIA: SASS runs on its own major at the same or a higher minor
(:func:`envforge.knowledge.arch.sass_runs_on`); PTX is JIT-compiled for its arch and every
newer one. AMD: a code object runs on its gfx target (or a generic target covering it,
``gfx10-3-generic``), with matching ``xnack``/``sramecc`` features when both sides name
them; ``HSA_OVERRIDE_GFX_VERSION`` in the environment makes the runtime look for the
override's target instead.
"""

from __future__ import annotations

from envforge.audit.elfscan import ElfFacts
from envforge.audit.fatbin import AmdCode, NvidiaCode
from envforge.audit.model import CheckResult, Collected, Finding, SharedObject, check_result
from envforge.knowledge.arch import (
    gfx_from_isa,
    parse_gfx,
    parse_sm,
    sass_runs_on,
    strip_features,
    vendor_of,
)

CHECK = "gpu-code"
#: A ``.nv_fatbin`` smaller than this is a stub: NVIDIA's libcufft.so.12 carries a
#: 672-byte one (SASS sm_75 only) and its kernels outside it, so no verdict.
STUB_FATBIN = 16 * 1024
#: LLVM's generic AMDGPU targets and the gfx targets each covers (AMDGPUUsage, "Generic
#: Processors"): a code object built for one runs on these.
GENERIC_TARGETS: dict[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset(
        {"gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"}
    ),
    "gfx11-generic": frozenset(
        {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}
    ),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
}


def _features(target: str) -> dict[str, str]:
    """``gfx90a:xnack-:sramecc+`` → {"xnack": "-", "sramecc": "+"}."""
    out: dict[str, str] = {}
    for part in target.split(":")[1:]:
        if part and part[-1] in "+-":
            out[part[:-1]] = part[-1]
    return out


def amd_runs(code_target: str, gpu: str) -> bool:
    """Does a code object for ``code_target`` run on ``gpu`` (``gfx90a``, maybe with
    features)? A feature either side leaves out matches both settings."""
    base, want = strip_features(code_target), strip_features(gpu)
    if base != want and want not in GENERIC_TARGETS.get(base, frozenset()):
        return False
    have, need = _features(code_target), _features(gpu)
    return all(need.get(k, v) == v for k, v in have.items())


def nvidia_runs(code: NvidiaCode, arch: str) -> bool:
    if any(sass_runs_on(s, arch) for s in code.sass):
        return True
    gpu = parse_sm(arch)
    if gpu is None:
        return False
    for p in code.ptx:
        sm = parse_sm(p)
        if sm is not None and (sm.major, sm.minor) <= (gpu.major, gpu.minor):
            return True
    return False


def effective_arch(arch: str, env: dict[str, str]) -> tuple[str, str | None]:
    """(the arch the runtime looks for, the override that chose it or None)."""
    override = env.get("HSA_OVERRIDE_GFX_VERSION", "").strip()
    if vendor_of(strip_features(arch)) == "amd" and override:
        target = gfx_from_isa(override)
        if target is not None:
            return target, override
    return arch, None


def _has(items: tuple[str, ...]) -> str:
    return ", ".join(items) if items else "none"


def _nvidia_finding(name: str, owner: str, code: NvidiaCode, arch: str) -> Finding:
    if code.size and code.size < STUB_FATBIN:
        return Finding(
            CHECK,
            "warning",
            name,
            f"{name} ({owner}): only a {code.size}-byte .nv_fatbin (SASS {_has(code.sass)}; "
            f"PTX {_has(code.ptx)}), none for {arch}: its kernels may be stored elsewhere "
            "(cuFFT's are), so this cannot tell",
        )
    return Finding(
        CHECK,
        "error",
        name,
        f"{name} ({owner}): no code for {arch}: SASS {_has(code.sass)}; PTX {_has(code.ptx)} "
        f"(SASS runs on its own major at the same or a higher minor, PTX at or above its arch)",
    )


def _amd_finding(name: str, owner: str, code: AmdCode, arch: str, note: str) -> Finding | None:
    if any(amd_runs(t, arch) for t in code.targets):
        return None
    if code.unreadable:
        methods = ", ".join(code.unreadable)
        seen = f"; readable targets {_has(code.targets)}" if code.targets else ""
        return Finding(
            CHECK,
            "warning",
            name,
            f"{name} ({owner}): compressed code objects ({methods}), targets "
            f"unknown{seen}: cannot tell whether it has code for {arch}{note}",
        )
    return Finding(
        CHECK,
        "error",
        name,
        f"{name} ({owner}): no code object for {arch}{note}: has {_has(code.targets)}",
    )


def _one(  # noqa: PLR0917 - one library's facts and the target, all needed
    collected: Collected, so: SharedObject, facts: ElfFacts, arch: str, vendor: str, note: str
) -> Finding | None:
    name, owner = collected.name(so), collected.owner(so)
    if vendor == "nvidia" and facts.nvidia is not None:
        code = facts.nvidia
        if code.problem and not (code.sass or code.ptx):
            return Finding(
                CHECK,
                "warning",
                name,
                f"{name} ({owner}): its .nv_fatbin cannot be read: {code.problem}",
            )
        if not (code.sass or code.ptx) or nvidia_runs(code, arch):
            return None
        return _nvidia_finding(name, owner, code, arch)
    if vendor == "amd" and facts.amd is not None:
        if facts.amd.problem and not (facts.amd.targets or facts.amd.unreadable):
            return Finding(
                CHECK,
                "warning",
                name,
                f"{name} ({owner}): its .hip_fatbin cannot be read: {facts.amd.problem}",
            )
        return _amd_finding(name, owner, facts.amd, arch, note)
    return None


def _torch_without_gpu_code(
    collected: Collected, own: list[SharedObject], target: str, vendor: str
) -> Finding | None:
    """torch installed with no library of its own carrying the vendor's GPU code: a CPU
    build (or the other vendor's), which runs on the CPU without a word."""
    torch = collected.inventory.dist("torch")
    if torch is None or any(
        "torch" in {o.lower() for o in (so.owners or collected.owners_of(so.real))} for so in own
    ):
        return None
    return Finding(
        CHECK,
        "error",
        "torch",
        f"torch {torch.version}: none of its libraries has {vendor.upper()} GPU code, so it "
        f"cannot use {target} and runs on the CPU (install the build for the arch: "
        f"`envforge solve {target}` names it)",
    )


def check_gpu_code(
    collected: Collected, arch: str | None, skip_reason: str
) -> tuple[CheckResult, list[Finding]]:
    """Every shared object with GPU code of the arch's vendor against ``arch``."""
    carriers = [
        (so, f) for so, f in collected.libraries() if f.nvidia is not None or f.amd is not None
    ]
    if arch is None:
        return check_result(CHECK, [], "", skipped=skip_reason), []
    target, override = effective_arch(arch, collected.inventory.env_map)
    vendor = vendor_of(strip_features(target))
    if vendor is None or (vendor == "amd" and parse_gfx(strip_features(target)) is None):
        return check_result(CHECK, [], "", skipped=f"{arch} is not a GPU arch"), []
    note = (
        f" (HSA_OVERRIDE_GFX_VERSION={override} makes the runtime look for {target})"
        if override
        else ""
    )
    findings = [
        f
        for so, facts in carriers
        if (f := _one(collected, so, facts, target, vendor, note)) is not None
    ]
    own = [so for so, f in carriers if (f.nvidia if vendor == "nvidia" else f.amd) is not None]
    cpu_only = _torch_without_gpu_code(collected, own, target, vendor)
    if cpu_only is not None:
        findings.insert(0, cpu_only)
    detail = f"{len(own)} shared objects with {vendor.upper()} GPU code checked against {target}"
    return check_result(CHECK, findings, detail), findings
