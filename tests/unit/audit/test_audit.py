"""envforge audit on real ELF files built here (gcc, objcopy) and fake venvs.

Each shared object is compiled with the soname, links and runpath a case needs; GPU
code sections are added with ``objcopy --add-section`` holding a fatbin container or a
clang offload bundle written byte by byte in the real formats (envforge/audit/fatbin.py
describes them).
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from envforge.audit.collect import collect_python
from envforge.audit.elfscan import ElfFacts, scan
from envforge.audit.fatbin import read_hip_fatbin, read_nv_fatbin
from envforge.audit.image import collect_target
from envforge.audit.judge_gpu import amd_runs
from envforge.audit.model import Collected
from envforge.audit.run import judge
from envforge.cli import main
from envforge.probe.local import LocalPythonTarget

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("objcopy") is None, reason="needs gcc, objcopy"
)

PY_TAG = f"cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu"


# --------------------------------------------------------------------------- formats


def nv_entry(
    kind: int, arch: int, payload: bytes = b"\x7fELF" + b"\0" * 12, flags: int = 0x11
) -> bytes:
    """One fatbin entry: a 64-byte header (kind, version, header size, payload size,
    compressed size, ?, minor, major, arch, name offset/len, flags, 0, 0) and payload."""
    size = (len(payload) + 7) // 8 * 8
    head = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x0101, 64, size, 0, 0, 0, 1, arch, 0, 0, flags, 0, 0
    )
    return head + payload.ljust(size, b"\0")


def nv_container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def offload_bundle(*ids: str, code: bytes = b"\x7fELF" + b"\0" * 28) -> bytes:
    """A clang offload bundle: magic, count, (offset, size, id length, id) each, then code."""
    table = b""
    header = 24 + 8 + sum(24 + len(i) for i in ids)
    at = header
    blobs = b""
    for bundle_id in ids:
        size = 0 if bundle_id.startswith("host") else len(code)
        table += struct.pack("<QQQ", at, size, len(bundle_id)) + bundle_id.encode()
        blobs += code[:size]
        at += size
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids)) + table + blobs


def ccob(bundle: bytes, method: int) -> bytes:
    """A compressed bundle, version 2: magic, version, method, total size, size, hash."""
    data = zlib.compress(bundle) if method == 0 else b"\x28\xb5\x2f\xfd" + b"\0" * 32
    total = 24 + len(data)
    return b"CCOB" + struct.pack("<HHIIQ", 2, method, total, len(bundle), 0) + data


# --------------------------------------------------------------------------- building


def build_so(
    out: Path,
    *,
    soname: str | None = None,
    source: str = "int f(void) { return 1; }\n",
    links: Sequence[Path] = (),
    runpath: str | None = None,
    sections: dict[str, bytes] | None = None,
) -> Path:
    """A shared object at ``out`` (gcc), with ``sections`` added (objcopy)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name + ".c")
    src.write_text(source, encoding="utf-8")
    argv = ["gcc", "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed"]
    if soname:
        argv.append(f"-Wl,-soname,{soname}")
    if runpath:
        argv += [f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"]
    argv += [str(p) for p in links]
    subprocess.run(argv, check=True, capture_output=True)
    src.unlink()
    for name, data in (sections or {}).items():
        blob = out.parent / f"{out.name}.{name.strip('.')}.bin"
        blob.write_bytes(data)
        subprocess.run(
            [
                "objcopy",
                "--add-section",
                f"{name}={blob}",
                "--set-section-flags",
                f"{name}=alloc,readonly",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        blob.unlink()
    return out


def add_dist(
    site: Path,
    name: str,
    version: str,
    files: Sequence[Path],
    *,
    requires: Sequence[str] = (),
    sizes: dict[str, int] | None = None,
) -> None:
    """A ``*.dist-info`` folder whose RECORD lists ``files`` (paths in ``site``)."""
    meta = site / f"{name.replace('-', '_')}-{version}.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (meta / "METADATA").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    record = []
    for path in files:
        rel = path.relative_to(site).as_posix()
        size = (sizes or {}).get(rel, path.stat().st_size if path.exists() else 0)
        record.append(f"{rel},sha256=x,{size}")
    record.append(f"{meta.name}/RECORD,,")
    (meta / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")


def make_venv(root: Path) -> tuple[Path, Path]:
    """(venv folder, its site-packages): a real venv without pip."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    return root, site


def audit(venv: Path, arch: str | None = None) -> Collected:
    return collect_python(str(venv / "bin" / "python"), f"venv {venv}")


def messages(collected: Collected, arch: str | None = None, check: str | None = None) -> list[str]:
    report = judge(collected, arch, arch_source="--arch")
    return [f.message for f in report.findings if check is None or f.check == check]


# --------------------------------------------------------------------------- formats


def test_fatbin_walk_lists_sass_and_ptx_across_containers_and_padding() -> None:
    blob = (
        nv_container(nv_entry(2, 80), nv_entry(2, 90), nv_entry(1, 90, b".version 8"))
        + b"\0" * 8
        + nv_container(nv_entry(2, 75, flags=0x2011))
    )
    code = read_nv_fatbin(io.BytesIO(b"junk" + blob), 4, len(blob))
    assert code.sass == ("sm_75", "sm_80", "sm_90")
    assert code.ptx == ("sm_90",)
    assert (code.entries, code.compressed, code.problem) == (4, 1, None)


def test_fatbin_with_a_lying_size_is_named_not_trusted() -> None:
    blob = bytearray(nv_container(nv_entry(2, 80)))
    struct.pack_into("<Q", blob, 8, 1 << 40)
    code = read_nv_fatbin(io.BytesIO(bytes(blob)), 0, len(blob))
    assert code.sass == ()
    assert code.problem is not None


def test_offload_bundles_plain_and_zlib_compressed_are_read_zstd_is_unknown() -> None:
    plain = offload_bundle("host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx1030")
    packed = ccob(offload_bundle("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"), 0)
    blob = plain.ljust(4096, b"\0") + packed.ljust(4096, b"\0") + ccob(plain, 1)
    code = read_hip_fatbin(io.BytesIO(blob), 0, len(blob))
    assert code.targets == ("gfx1030", "gfx90a:xnack-")
    assert code.unreadable == ("zstd",)
    assert code.bundles == 3


@pytest.mark.parametrize(
    ("code", "gpu", "runs"),
    [
        ("gfx90a:xnack-", "gfx90a", True),
        ("gfx90a:xnack-", "gfx90a:xnack+", False),
        ("gfx90a", "gfx90a:xnack+", True),
        ("gfx10-3-generic", "gfx1031", True),
        ("gfx1030", "gfx1031", False),
    ],
)
def test_amd_code_object_matching(code: str, gpu: str, runs: bool) -> None:
    assert amd_runs(code, gpu) is runs


def test_a_real_shared_object_with_a_fatbin_section(tmp_path: Path) -> None:
    dep = build_so(tmp_path / "libdep.so", soname="libdep.so")
    lib = build_so(
        tmp_path / "libk.so.1",
        soname="libk.so.1",
        links=[dep],
        runpath="$ORIGIN",
        sections={".nv_fatbin": nv_container(nv_entry(2, 86), nv_entry(1, 80))},
    )
    facts = scan(str(lib))
    assert facts.soname == "libk.so.1"
    assert "libdep.so" in facts.needed
    assert facts.runpath == ("$ORIGIN",)
    assert facts.nvidia is not None
    assert facts.nvidia.sass == ("sm_86",)
    assert facts.nvidia.ptx == ("sm_80",)
    assert scan(str(tmp_path / "nothing")).problem is not None
    (tmp_path / "text.so").write_text("not elf")
    assert scan(str(tmp_path / "text.so")).problem == "not an ELF file"


# --------------------------------------------------------------------------- a venv


@pytest.fixture(scope="module")
def gpu_venv(tmp_path_factory: pytest.TempPathFactory) -> Collected:
    """NVIDIA and AMD GPU code carriers in one venv."""
    root, site = make_venv(tmp_path_factory.mktemp("gpu") / "venv")
    big = b"\x7fELF" + bytes(20 * 1024)  # above the stub size: a verdict
    nv = build_so(
        site / "kern" / "libnv.so",
        soname="libnv.so",
        sections={
            ".nv_fatbin": nv_container(nv_entry(2, 80, big), nv_entry(2, 90, big), nv_entry(1, 90))
        },
    )
    stub = build_so(
        site / "kern" / "libstub.so",
        soname="libstub.so",
        sections={".nv_fatbin": nv_container(nv_entry(2, 75))},
    )
    amd = build_so(
        site / "kern" / "libamd.so",
        soname="libamd.so",
        sections={
            ".hip_fatbin": offload_bundle(
                "host-x86_64-unknown-linux-gnu-",
                "hipv4-amdgcn-amd-amdhsa--gfx1030",
                "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
            )
        },
    )
    zstd = build_so(
        site / "kern" / "libz.so",
        soname="libz_kern.so",
        sections={".hip_fatbin": ccob(offload_bundle("hipv4-amdgcn-amd-amdhsa--gfx1100"), 1)},
    )
    add_dist(site, "kern", "1.0", [nv, stub, amd, zstd])
    return audit(root)


@pytest.mark.parametrize(
    ("arch", "named"),
    [
        ("sm_86", None),  # SASS sm_80 runs on sm_86 (same major, higher minor)
        ("sm_75", "libnv.so"),  # neither SASS for 7.x nor PTX at or below 7.5
        ("sm_120", None),  # PTX sm_90 is JIT-compiled for sm_120
        ("gfx1030", "libz"),  # a zstd bundle: a warning, not a guess
        ("gfx1010", "libamd.so"),
    ],
)
def test_gpu_code_against_the_arch(gpu_venv: Collected, arch: str, named: str | None) -> None:
    found = [m for m in messages(gpu_venv, arch, "gpu-code") if "libstub" not in m]
    if named is None:
        assert found == []
        return
    assert any(named in m for m in found), found
    if arch == "sm_75":
        assert "SASS sm_80, sm_90; PTX sm_90" in found[0]
        report = judge(gpu_venv, arch, arch_source="--arch")
        assert not report.ok
    if arch == "gfx1010":
        assert "has gfx1030, gfx90a:xnack-" in next(m for m in found if "libamd" in m)
    if arch == "gfx1030":
        assert "targets unknown" in found[0]
        assert judge(gpu_venv, arch, arch_source="--arch").ok


def test_a_stub_fatbin_gives_a_warning_not_a_verdict(gpu_venv: Collected) -> None:
    report = judge(gpu_venv, "sm_90", arch_source="--arch")
    stub = [f for f in report.findings if "libstub.so" in f.message]
    assert [f.severity for f in stub] == ["warning"]
    assert "-byte .nv_fatbin (SASS sm_75; PTX none), none for sm_90" in stub[0].message
    assert report.ok


def test_without_an_arch_gpu_code_is_skipped_with_the_reason(gpu_venv: Collected) -> None:
    report = judge(gpu_venv, None, arch_source="none", skip_reason="no GPU on this host")
    gpu = next(c for c in report.checks if c.name == "gpu-code")
    assert (gpu.status, gpu.detail) == ("skip", "no GPU on this host")


def test_hsa_override_from_the_environment_chooses_the_target(
    gpu_venv: Collected, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = gpu_venv.inventory
    import dataclasses

    with_override = dataclasses.replace(
        gpu_venv, inventory=dataclasses.replace(inv, env=(("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),))
    )
    found = messages(with_override, "gfx1010", "gpu-code")
    assert not any("libamd.so" in m for m in found)


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Collected]:
    """torch (cpu) with its libraries, an extension for another torch and a CUDA
    torchvision, duplicate libraries, an overwritten file, NumPy 1 and 2 extensions."""
    base = tmp_path_factory.mktemp("torch")
    root, site = make_venv(base / "venv")
    lib = site / "torch" / "lib"
    c10 = build_so(lib / "libc10.so", soname="libc10.so")
    torch_lib = build_so(lib / "libtorch.so", soname="libtorch.so", links=[c10], runpath="$ORIGIN")
    omp = build_so(lib / "libgomp.so.1", soname="libgomp.so.1")
    add_dist(site, "torch", "2.13.0+cpu", [c10, torch_lib, omp])
    stubs = base / "stubs"
    c10_cuda = build_so(stubs / "libc10_cuda.so", soname="libc10_cuda.so")
    # an extension built for torch 2.5.1 with CUDA
    ext = build_so(site / "xformers" / f"_C.{PY_TAG}.so", links=[c10, c10_cuda])
    add_dist(site, "xformers", "0.0.28.post3", [ext], requires=["torch==2.5.1"])
    tv = build_so(site / "torchvision" / "_C.so", links=[c10, c10_cuda])
    add_dist(site, "torchvision", "0.20.0", [tv], requires=["torch==2.5.0"])
    # the same soname from two distributions; torch's library finds one by RUNPATH
    one = build_so(site / "nvidia" / "nccl12" / "libnccl.so.2", soname="libnccl.so.2")
    two = build_so(site / "nvidia" / "nccl13" / "libnccl.so.2", soname="libnccl.so.2")
    add_dist(site, "nvidia-nccl-cu12", "2.32.3", [one])
    add_dist(site, "nvidia-nccl-cu13", "2.32.3", [two])
    build_so(
        lib / "libtorch_cuda_stub.so",
        soname="libtorch_cuda_stub.so",
        links=[one],
        runpath="$ORIGIN/../../nvidia/nccl13",
    )
    # one file in two RECORDs
    shared = build_so(site / "shared" / "libshared.so.1", soname="libshared.so.1")
    add_dist(site, "pkg-a", "1.0", [shared], sizes={"shared/libshared.so.1": 1})
    add_dist(site, "pkg-b", "2.0", [shared])
    # Intel OpenMP beside torch's GNU one
    iomp = build_so(site / "mkl" / "libiomp5.so", soname="libiomp5.so")
    add_dist(site, "intel-openmp", "2025.0", [iomp])
    # extension modules with one file name in two packages: not duplicates
    for pkg in ("alpha", "beta"):
        mod = build_so(site / pkg / f"_speedups.{PY_TAG}.so")
        add_dist(site, pkg, "1.0", [mod])
    # NumPy C-API users: one built against NumPy 1, one against NumPy 2
    np1 = build_so(
        site / "oldnp" / f"_m.{PY_TAG}.so",
        source=('const char *m = "numpy.core._multiarray_umath"; const char *a = "_ARRAY_API";\n'),
    )
    add_dist(site, "oldnp", "1.0", [np1], requires=["numpy<2"])
    np2 = build_so(
        site / "newnp" / f"_m.{PY_TAG}.so",
        source=(
            'const char *m = "numpy._core._multiarray_umath"; const char *b = '
            '"numpy.core._multiarray_umath"; const char *a = "_ARRAY_API";\n'
        ),
    )
    add_dist(site, "newnp", "1.0", [np2], requires=["numpy>=1.25"])
    add_dist(site, "numpy", "2.4.6", [])
    return root, audit(root)


def test_a_cpu_torch_against_a_gpu_arch_is_named(
    torch_venv: tuple[Path, Collected], gpu_venv: Collected
) -> None:
    """torch with no GPU code of the arch's vendor runs on the CPU without a word: the
    audit says so; a venv without torch is not named."""
    for arch in ("sm_90", "gfx1100"):
        found = messages(torch_venv[1], arch, "gpu-code")
        assert any(
            m.startswith("torch 2.13.0+cpu: none of its libraries has") and "runs on the CPU" in m
            for m in found
        ), found
        assert not judge(torch_venv[1], arch, arch_source="--arch").ok
    assert not any(m.startswith("torch ") for m in messages(gpu_venv, "sm_90", "gpu-code"))


def test_compiled_extension_for_another_torch_is_named(torch_venv: tuple[Path, Collected]) -> None:
    found = messages(torch_venv[1], None, "torch-extensions")
    xf = [m for m in found if m.startswith("xformers")]
    assert any(
        "requires torch==2.5.1 (its metadata)" in m and "pypi.org/project/xformers" in m for m in xf
    ), xf
    assert any("links libc10_cuda.so, which torch 2.13.0+cpu does not have" in m for m in xf)


def test_companion_that_does_not_pair_is_named(torch_venv: tuple[Path, Collected]) -> None:
    found = messages(torch_venv[1], None, "companions")
    assert any(
        "torchvision 0.20.0 does not pair with torch 2.13.0+cpu; torchvision 0.28.0" in m
        for m in found
    ), found
    assert any(
        "is a cuda build (has libc10_cuda.so)" in m and "install torchvision==0.28.0+cpu" in m
        for m in found
    ), found


def test_duplicates_by_soname_overwritten_files_and_runtimes(
    torch_venv: tuple[Path, Collected],
) -> None:
    found = messages(torch_venv[1], None, "duplicate-libraries")
    nccl = next(m for m in found if m.startswith("libnccl.so.2 twice"))
    assert "nvidia-nccl-cu12 2.32.3" in nccl
    assert "nvidia-nccl-cu13 2.32.3" in nccl
    assert (
        "libtorch_cuda_stub.so (no distribution) takes nvidia/nccl13/libnccl.so.2 by its "
        "RUNPATH" in nccl
    )
    over = next(m for m in found if "libshared.so.1 is in both" in m)
    assert "pkg-b 2.0's" in over.split("the file here")[1]
    assert any("2 OpenMP runtimes" in m for m in found)
    assert not any("_speedups" in m for m in found)


def test_numpy_1_extension_beside_numpy_2_is_named(torch_venv: tuple[Path, Collected]) -> None:
    found = messages(torch_venv[1], None, "numpy-c-api")
    assert len(found) == 1, found
    assert found[0].startswith("oldnp 1.0: oldnp/_m."), found
    assert "built against NumPy 1" in found[0]


def test_the_bundled_runner_sees_what_the_local_collector_sees(
    torch_venv: tuple[Path, Collected],
) -> None:
    root, local = torch_venv
    inside = collect_target(LocalPythonTarget(python=str(root / "bin" / "python")))
    assert inside.facts.keys() == local.facts.keys()
    assert messages(inside) == messages(local)


def test_cli_exit_codes_and_json(
    torch_venv: tuple[Path, Collected], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = torch_venv
    assert main(["audit", str(root), "--arch", "sm_90", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"schema", "ok", "target", "arch", "checks", "findings", "counts"}
    assert data["ok"] is False
    assert data["arch"] == "sm_90"
    assert [c["name"] for c in data["checks"]] == [
        "gpu-code",
        "duplicate-libraries",
        "torch-extensions",
        "numpy-c-api",
        "companions",
    ]
    clean, _site = make_venv(tmp_path / "clean")
    assert main(["audit", "--python", str(clean / "bin" / "python"), "--arch", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "clean: 0 error(s)" in out
    assert main(["audit", str(clean), "--arch", "sm_9"]) == 2
    assert main(["audit", "--python", str(tmp_path / "nope" / "python")]) == 4
    assert main(["audit", str(tmp_path)]) == 2  # a folder that is no venv
    assert main(["audit"]) == 2


# --------------------------------------------------------------------------- probe step


def test_the_probe_runs_the_audit_after_the_worker_and_refuses_what_it_finds(
    torch_venv: tuple[Path, Collected],
    tmp_path: Path,
) -> None:
    from envforge.probe.runner import run_probe
    from envforge.probe.spec import AUDIT_STEP, ProbeSpec

    spec = ProbeSpec(level="quick", vendor="none", audit=True, only=(AUDIT_STEP,))
    assert spec.steps == (AUDIT_STEP,)
    assert AUDIT_STEP not in spec.worker_dict()["steps"]
    root, _ = torch_venv
    report = run_probe(spec, LocalPythonTarget(python=str(root / "bin" / "python")))
    (step,) = report.steps
    assert (step.name, step.status) == ("audit", "fail")
    assert "error: xformers 0.0.28.post3" in step.detail
    assert not report.passed
    clean, _site = make_venv(tmp_path / "clean")
    report = run_probe(spec, LocalPythonTarget(python=str(clean / "bin" / "python")))
    assert report.steps[0].status == "pass"
    assert report.steps[0].detail.startswith("clean: ")
    assert ProbeSpec(level="full").steps == ProbeSpec(level="full", audit=False).steps


def test_facts_are_cached_until_the_file_changes(tmp_path: Path) -> None:
    from envforge.audit.collect import scan_all
    from envforge.audit.factcache import cached_scan

    lib = build_so(tmp_path / "libc.so.1", soname="libc_cached.so.1")
    read: list[list[str]] = []

    def counting(paths: list[str]) -> dict[str, ElfFacts]:
        read.append(paths)
        return scan_all(paths)

    where = tmp_path / "cache.json"
    first = cached_scan([str(lib)], counting, where)
    again = cached_scan([str(lib)], counting, where)
    assert first == again
    assert len(read) == 1
    build_so(lib, soname="libc_changed.so.1")
    changed = cached_scan([str(lib)], counting, where)
    assert changed[str(lib)].soname == "libc_changed.so.1"
    where.write_text("{not json")
    assert cached_scan([str(lib)], counting, where)[str(lib)].soname == "libc_changed.so.1"


def test_two_copies_are_an_error_only_when_users_can_get_different_ones(
    tmp_path: Path,
) -> None:
    """Every user finding the same copy (torch's RPATH to nvidia's CUPTI, triton's own
    loaded by path, as in the real torch 2.14.1 environment): a warning. Two users
    finding two copies: whichever loads first serves both, an error."""
    root, site = make_venv(tmp_path / "venv")
    one = build_so(site / "vendor_a" / "lib" / "libdup.so.1", soname="libdup.so.1")
    two = build_so(site / "vendor_b" / "lib" / "libdup.so.1", soname="libdup.so.1")
    add_dist(site, "vendor-a", "1.0", [one])
    add_dist(site, "vendor-b", "1.0", [two])
    user_a = build_so(
        site / "user_a" / "libua.so",
        soname="libua.so",
        links=[one],
        runpath="$ORIGIN/../vendor_a/lib",
    )
    add_dist(site, "user-a", "1.0", [user_a])
    [same] = [
        f
        for f in judge(audit(root), None, arch_source="none").findings
        if f.subject == "libdup.so.1"
    ]
    assert same.severity == "warning"
    assert "loaded only by path" in same.message
    user_b = build_so(
        site / "user_b" / "libub.so",
        soname="libub.so",
        links=[two],
        runpath="$ORIGIN/../vendor_b/lib",
    )
    add_dist(site, "user-b", "1.0", [user_b])
    [mixed] = [
        f
        for f in judge(audit(root), None, arch_source="none").findings
        if f.subject == "libdup.so.1"
    ]
    assert mixed.severity == "error"


def test_requires_dist_markers_are_evaluated_for_the_audited_interpreter(
    tmp_path: Path,
) -> None:
    """opencv-python-headless 5.0.0.93 says ``numpy<2.0; python_version < "3.9"`` and
    ``numpy>=2; python_version >= "3.9"``: on this interpreter only the second applies,
    so numpy 2 beside it is no finding (seen on an H200's environment as a false error).
    A pin whose marker applies is still named."""
    root, site = make_venv(tmp_path / "venv")
    source = 'const char *m = "numpy._core._multiarray_umath"; const char *a = "_ARRAY_API";\n'
    cv = build_so(site / "cvlike" / f"_cv.{PY_TAG}.so", source=source)
    add_dist(
        site,
        "cvlike",
        "5.0",
        [cv],
        requires=['numpy<2.0; python_version < "3.9"', 'numpy>=2; python_version >= "3.9"'],
    )
    pinned = build_so(site / "pinned" / f"_p.{PY_TAG}.so", source=source)
    add_dist(site, "pinned", "1.0", [pinned], requires=['numpy<2; python_version >= "3.9"'])
    add_dist(site, "numpy", "2.4.6", [])
    collected = audit(root)
    assert (
        collected.inventory.marker_env["python_version"]
        == f"{sys.version_info[0]}.{sys.version_info[1]}"
    )
    found = messages(collected, None, "numpy-c-api")
    assert not any(m.startswith("cvlike") for m in found), found
    assert any(
        m.startswith("pinned 1.0 uses the NumPy C-API and requires numpy<2") for m in found
    ), found


def test_copies_of_one_vendored_build_are_not_duplicates(tmp_path: Path) -> None:
    """auditwheel names a vendored library by its content hash (libgfortran-83c28eba.so.5.0.0
    in opencv-python-headless and in scipy, as on the H200's environment): copies with that
    soname and one size are one build, whichever loads. A different size is still named."""
    root, site = make_venv(tmp_path / "venv")
    soname = "libgfortran-83c28eba.so.5.0.0"
    for pkg in ("opencv", "scipy"):
        lib = build_so(site / f"{pkg}.libs" / soname, soname=soname)
        user = build_so(
            site / pkg / f"_m.{PY_TAG}.so", links=[lib], runpath=f"$ORIGIN/../{pkg}.libs"
        )
        add_dist(site, pkg, "1.0", [lib, user])
    report = judge(audit(root), None, arch_source="none")
    assert not [f for f in report.findings if f.subject == soname]
    [check] = [c for c in report.checks if c.name == "duplicate-libraries"]
    assert "1 vendored in several wheels as one build" in check.detail
    build_so(
        site / "scipy.libs" / soname,
        soname=soname,
        source="int f(void) { return 1; }\nint g(void) { return 2; }\n"
        "static const char big[4096] = {1};\nconst char *h(void) { return big; }\n",
    )
    [twice] = [
        f for f in judge(audit(root), None, arch_source="none").findings if f.subject == soname
    ]
    assert twice.severity == "error"
