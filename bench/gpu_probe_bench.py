"""The full probe on a GPU against the floor of the same device work (issue 32 §3).

    python bench/gpu_probe_bench.py --out DIR [--runs N] [--tree PATH]...
    python bench/gpu_probe_bench.py --probe-once [--no-audit]     (one probe, JSON out)

Run on a machine with an NVIDIA GPU and an interpreter holding a CUDA torch, torchvision
and torchaudio. It alternates, N times after one warm-up round, whole processes:

- ``floor-min``: ``import torch`` and one Conv2d forward and backward on the GPU;
- ``floor``: the full probe's device work with torchvision and torchaudio
  (bench/gpu_floor.py same --companions, torch's real non-reentrant checkpoint);
- ``probe`` (for each ``--tree``, an envforge source tree; default: this one): the full
  probe with the torchvision and torchaudio steps and the audit, through ``run_probe``.

It writes DIR/results.md (medians, per-step medians, the import costs measured alone),
DIR/audit.json (``envforge audit --json`` of this interpreter) and DIR/probe.json (one
probe report). Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISTS = ("torch", "numpy", "torchvision", "torchaudio")


def probe_once(audit: bool) -> int:
    sys.path.insert(0, str(ROOT))
    from envforge.probe.runner import LocalPythonTarget, run_probe
    from envforge.probe.spec import ProbeSpec

    spec = ProbeSpec(
        level="full", vendor="nvidia", step_timeout=300.0, distributions=DISTS, audit=audit
    )
    report = run_probe(spec, LocalPythonTarget(python=sys.executable))
    print(report.to_json(indent=None))
    return 0


def timed(argv: list[str], cwd: Path = ROOT) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        print(
            f"FAILED {argv}: {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}",
            file=sys.stderr,
        )
    return seconds, done.stdout


def run_audit(path: Path, *flags: str, label: str) -> None:
    """``envforge audit`` of this interpreter (this tree's envforge) into ``path``; says
    its exit status and seconds on stderr as ``label``."""
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    began = time.perf_counter()
    done = subprocess.run(
        [py, "-m", "envforge", "audit", "--python", py, *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    path.write_text(done.stdout + done.stderr[-4000:])
    print(
        f"{label}: exit {done.returncode} in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
        flush=True,
    )


IMPORTS = {
    "import torch": "import torch",
    "import torch + CUDA context": "import torch; torch.zeros(1, device='cuda'); "
    "torch.cuda.synchronize()",
    "import torch + torch._dynamo": "import torch, torch._dynamo",
    "import torch + torchvision": "import torch, torchvision",
    "import torch + torchaudio": "import torch, torchaudio",
}


def import_costs(runs: int) -> dict[str, float]:
    py = sys.executable
    out: dict[str, list[float]] = {k: [] for k in IMPORTS}
    for _ in range(runs):
        for name, code in IMPORTS.items():
            out[name].append(timed([py, "-c", code])[0])
    return {k: statistics.median(v) for k, v in out.items()}


def rounds(runs: int, trees: list[Path]) -> tuple[dict[str, list[float]], dict[str, list[dict]]]:
    py = sys.executable
    floor = str(ROOT / "bench" / "gpu_floor.py")
    commands: dict[str, tuple[list[str], Path]] = {
        "floor-min": ([py, floor, "min"], ROOT),
        "floor": ([py, floor, "same", "--companions"], ROOT),
        "floor-reentrant": ([py, floor, "same", "--companions", "--ckpt", "reentrant"], ROOT),
    }
    for tree in trees:
        script = str(tree / "bench" / "gpu_probe_bench.py")
        label = "probe" if tree == ROOT else f"probe@{tree.name}"
        commands[label] = ([py, script, "--probe-once"], tree)
    wall: dict[str, list[float]] = {k: [] for k in commands}
    steps: dict[str, list[dict]] = {k: [] for k in commands if k.startswith("probe")}
    for i in range(runs + 1):
        for name, (argv, cwd) in commands.items():
            seconds, out = timed(argv, cwd)
            if i == 0:
                continue
            wall[name].append(seconds)
            if name in steps and out.strip():
                report = json.loads(out)
                steps[name].append(
                    {
                        s["name"]: (s["seconds"], s["status"], s.get("detail", ""))
                        for s in report["steps"]
                    }
                )
        print(
            f"round {i}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in wall.items() if v),
            file=sys.stderr,
            flush=True,
        )
    return wall, steps


def write_results(
    out: Path,
    runs: int,
    imports: dict[str, float],
    wall: dict[str, list[float]],
    steps: dict[str, list[dict]],
) -> None:
    med = {k: statistics.median(v) for k, v in wall.items() if v}
    lines = [f"# GPU probe bench ({runs} runs, medians, wall seconds)", ""]
    lines += ["| command | median | min | max | / floor |", "|---|---|---|---|---|"]
    for k, v in wall.items():
        if v:
            lines.append(
                f"| {k} | {med[k]:.2f} | {min(v):.2f} | {max(v):.2f} "
                f"| {med[k] / med['floor']:.2f} |"
            )
    lines += ["", "| import alone (whole process) | median s |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in imports.items()]
    for label, runs_steps in steps.items():
        if not runs_steps:
            continue
        lines += [
            "",
            f"## {label}: per-step medians (worker/host measured)",
            "",
            "| step | median s | status | detail (last run) |",
            "|---|---|---|---|",
        ]
        for name in runs_steps[-1]:
            secs = statistics.median(r[name][0] for r in runs_steps if name in r)
            _, status, detail = runs_steps[-1][name]
            lines.append(
                f"| {name} | {secs:.3f} | {status} | "
                f"{str(detail).splitlines()[0][:120] if detail else ''} |"
            )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe-once", action="store_true")
    parser.add_argument("--no-audit", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    args = parser.parse_args()
    if args.probe_once:
        return probe_once(audit=not args.no_audit)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_audit(out / "audit.json", "--json", label="audit")
    run_audit(out / "audit.txt", label="audit (again, warm)")
    py = sys.executable
    _, probe = timed([py, str(ROOT / "bench" / "gpu_probe_bench.py"), "--probe-once"])
    (out / "probe.json").write_text(probe)
    imports = import_costs(3)
    wall, steps = rounds(args.runs, [ROOT, *[t.resolve() for t in args.tree]])
    write_results(out, args.runs, imports, wall, steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
