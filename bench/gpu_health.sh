#!/usr/bin/env bash
# Device checks of the probe's health facts and collective step on a GPU machine (an
# NVIDIA GPU, a python3 with a CUDA torch; envforge run from this source tree; pyelftools
# from a wheel in .whl/ when the machine has none). Writes to OUT (default ./gpu-health).
# Not a test: its output goes into the note.
set -u
out=${OUT:-gpu-health}
mkdir -p "$out"
wheels=$(ls "$PWD"/.whl/*.whl 2>/dev/null | tr '\n' ':')
export PYTHONPATH="$PWD:${wheels}${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export ENVFORGE_HOME="$out/home"
say() { printf '\n== %s\n' "$*"; }
say "probe --level quick --health (report in $out/health)"
python3 -m envforge probe --level quick --health --report "$out/health" 2>&1 | tail -16
echo "exit ${PIPESTATUS[0]}"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get('health'), indent=1)[:3000])" "$out/health/probe.json"
say "probe --level quick --require-healthy --collective"
python3 -m envforge probe --level quick --require-healthy --collective 2>&1 | tail -16
echo "exit ${PIPESTATUS[0]}"
say "fleet preflight --engine slurm --recipe cpu, then its node check on this GPU"
python3 -m envforge fleet preflight --engine slurm --recipe cpu -o "$out/preflight" 2>&1 | tail -3
ls "$out/preflight"
python3 -m envforge fleet node-check --help 2>&1 | head -12
