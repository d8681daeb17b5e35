"""Time to sign 100 certification attestations about one image and to verify all of them.

    python bench/attest_bench.py [--count 100] [--runs 5]

Each attestation is made as ``build``/``certify`` make one: the predicate from a full
probe report (12 steps, host facts through the redactor), the in-toto Statement, its DSSE
envelope signed with a real ed25519 key (``envforge keys generate``), appended as one line
to the image's ``.intoto.jsonl`` file. Verifying is what ``envforge attest verify FILE
--trust PUB --subject ID`` does after reading its options: read the file, check each
envelope's signature against the trust list, its statement, subject and predicate schema,
and tally hosts, archs and passes. Also timed: the whole ``envforge attest verify`` command
as a fresh process (start-up and imports included).

With ``--registry`` (a docker-registry binary on PATH: Debian's ``docker-registry``), also
the registry part: a docker-registry started on a free loopback port with its storage in a
temporary folder, a small OCI image pushed to it, then each of the 100 attestations
attached on its own (``envforge.publish.referrers.attach``, as 100 ``publish`` runs of 100
sites would: its blob, its artifact manifest, and the referrers tag's index read and put
back each time), then all 100 read back from the registry (``envelopes_of``: the index,
each manifest and envelope, digests checked) and verified, then imported as
``evidence import REF --trust PUB`` does (fetched again, checked, verified, added to an
empty evidence store). The attestations are of distinct real-shaped quick probe runs.
The registry is stopped after.

Targets (issue 28): attach at most 0.5 s each; verify all 100 in at most 5 s. Not a test:
timings depend on the machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = (
    "python",
    "import-torch",
    "numpy",
    "device",
    "memory",
    "matmul",
    "conv2d",
    "backward",
    "amp",
    "dataloader",
    "audit",
    "compile",
)


def _report(n: int) -> dict[str, object]:
    return {
        "status": "pass",
        "steps": [
            {"name": s, "status": "pass", "seconds": 0.5 + i, "detail": "ok"}
            for i, s in enumerate(STEPS)
        ],
        "level": "full",
        "host": {
            "kernel": "6.8.0-49-generic",
            "machine": "x86_64",
            "driver": "6.8.5",
            "id": f"{n:064x}",
            "gpus": [
                {
                    "name": "AMD Radeon RX 6700 XT",
                    "arch": "gfx1031",
                    "vendor": "amd",
                    "pci_id": "1002:73df",
                }
            ],
        },
        "created": "2026-11-27T23:00:00Z",
    }


def run(count: int, folder: Path) -> tuple[float, float, float]:
    from envforge.evidence.redact import Redactor
    from envforge.publish import attestation as at
    from envforge.publish.attest_verify import check_file, tally
    from envforge.publish.signing import generate, load_signing_key, load_trust

    key_path, pub = generate(folder / "keys", "bench")
    key = load_signing_key(key_path)
    image = "sha256:" + "cd" * 32
    subject = at.image_subject("envforge/gfx1031:torch2.13.0-rocm7.1-py3.12", image)
    target = folder / "image.intoto.jsonl"
    redact = Redactor.for_this_host()
    started = time.perf_counter()
    for n in range(count):
        pred = at.predicate(
            report=_report(n),
            backend="docker",
            recipe={
                "name": "gfx1031",
                "hash": "sha256:" + "ab" * 32,
                "stack_tag": "torch2.13.0-rocm7.1-py3.12",
            },
            stack={"torch": "2.13.0"},
            certificate="sha256:" + "01" * 32,
            redact=redact,
        )
        at.append(target, at.attest(subject, pred, key))
    signed = time.perf_counter() - started
    started = time.perf_counter()
    checks = check_file(target, load_trust([pub]), image)
    counts = tally(checks)
    verified = time.perf_counter() - started
    assert counts.verified == count == counts.passed, counts
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "envforge",
            "attest",
            "verify",
            str(target),
            "--trust",
            str(pub),
            "--subject",
            image,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    command = time.perf_counter() - started
    return signed, verified, command


def _genuine(key: object, image_id: str, count: int) -> list[bytes]:
    """``count`` attestations of distinct real-shaped runs (a quick probe's steps, one
    minute apart), as ``evidence import REF`` accepts them."""
    from dataclasses import replace
    from datetime import datetime, timedelta, timezone

    from tests.acceptance.test_attest_evidence import _attestation, _spec
    from tests.helpers.matrix_synth import make_certificate

    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    out = []
    for n in range(count):
        spec = replace(_spec(), created=start + timedelta(minutes=n))
        out.append(_attestation(key, make_certificate(spec), image_id))  # type: ignore[arg-type]
    return out


def _imported(ref: str, pub: Path, home: Path) -> tuple[float, int]:
    """``evidence import REF --trust PUB`` in process: every attestation fetched,
    checked, verified and added to an empty store; seconds and records added."""
    import os

    from envforge.evidence.attested import fetch
    from envforge.evidence.evidence_store import import_documents
    from envforge.publish.signing import load_trust

    os.environ["ENVFORGE_HOME"] = str(home)
    started = time.perf_counter()
    found = fetch(ref, load_trust([pub]))
    done = import_documents(found.documents, found.problems)
    return time.perf_counter() - started, len(done.added)


def run_registry(count: int, folder: Path) -> tuple[float, float, float]:
    import socket
    import urllib.request

    from envforge.publish import referrers as rf
    from envforge.publish.attest_verify import check_envelope
    from envforge.publish.signing import generate, load_signing_key, load_trust
    from tests.acceptance.test_attest_referrers import _push_image

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    (folder / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{folder / 'storage'}\nhttp:\n  addr: {addr}\n"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(folder / "config.yml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://{addr}/v2/", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        digest, image_id = _push_image(addr, "bench/image")
        key_path, pub = generate(folder / "keys", "bench")
        key = load_signing_key(key_path)
        envelopes = _genuine(key, image_id, count)
        ref = f"{addr}/bench/image@{digest}"
        started = time.perf_counter()
        for envelope in envelopes:
            rf.attach(ref, [envelope])
        attached = time.perf_counter() - started
        started = time.perf_counter()
        trust = load_trust([pub])
        read = rf.envelopes_of(ref)
        ok = [check_envelope(e, trust, image_id, source="r").ok for e in read]
        verified = time.perf_counter() - started
        assert len(ok) == count, (len(ok), count)
        assert all(ok)
        imported, added = _imported(ref, pub, folder / "home")
        assert added == count, (added, count)
        return attached, verified, imported
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--registry", action="store_true")
    args = parser.parse_args()
    rows = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(run(args.count, Path(tmp)))
    sign_med = statistics.median(r[0] for r in rows)
    verify_med = statistics.median(r[1] for r in rows)
    command_med = statistics.median(r[2] for r in rows)
    print(
        f"{platform.python_version()} on {platform.machine()}, {args.runs} runs, "
        f"{args.count} attestations"
    )
    print(
        f"sign+append: median {sign_med:.3f} s total, {sign_med / args.count * 1000:.2f} ms "
        f"each (min {min(r[0] for r in rows):.3f} s)"
    )
    print(f"verify all: median {verify_med:.3f} s (min {min(r[1] for r in rows):.3f} s)")
    print(f"envforge attest verify (fresh process): median {command_med:.3f} s")
    if not args.registry:
        return
    regs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            regs.append(run_registry(args.count, Path(tmp)))
    attach_med = statistics.median(r[0] for r in regs)
    print(
        f"registry attach, one at a time: median {attach_med:.3f} s total, "
        f"{attach_med / args.count * 1000:.1f} ms each (max run "
        f"{max(r[0] for r in regs) / args.count * 1000:.1f} ms each)"
    )
    print(
        f"registry read back + verify all: median {statistics.median(r[1] for r in regs):.3f}"
        f" s (max {max(r[1] for r in regs):.3f} s)"
    )
    print(
        f"evidence import REF (fetch, verify, add all): median "
        f"{statistics.median(r[2] for r in regs):.3f} s (max {max(r[2] for r in regs):.3f} s)"
    )


if __name__ == "__main__":
    main()
