#!/usr/bin/env bash
# The device checks of a GPU machine (an NVIDIA GPU, a python3 with a CUDA torch,
# torchvision and torchaudio; envforge run from this source tree). Writes to OUT (default
# ./gpu-checks): audit of that interpreter, a full probe report, and the memory step's
# verdicts while another process holds most of the GPU's memory. Not a test.
set -u
out=${OUT:-gpu-checks}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
ef() { python3 -m envforge "$@"; }
say() { printf '\n== %s\n' "$*"; }
took() { python3 -c "import sys,time; print('took %.1f s' % (time.time() - float(sys.argv[1])))" "$1"; }

say "audit of $(command -v python3)"
t=$(date +%s.%N)
python3 -m envforge audit --python python3 >"$out/audit.txt" 2>&1; echo "exit $?"; took "$t"
tail -25 "$out/audit.txt"

say "full probe, CLI, report in $out/probe"
t=$(date +%s.%N)
python3 -m envforge probe --level full --report "$out/probe" >"$out/probe.txt" 2>&1; echo "exit $?"
took "$t"; tail -22 "$out/probe.txt"

say "another process holds ~70% of GPU 0"
python3 - <<'PY' &
import time, torch
free, total = torch.cuda.mem_get_info(0)
held = torch.empty(int(total * 0.7), dtype=torch.uint8, device="cuda")
open("/tmp/holder.ready", "w").write("ok")
time.sleep(120)
PY
holder=$!
for _ in $(seq 60); do [ -e /tmp/holder.ready ] && break; sleep 1; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
ef probe --level quick 2>&1 | grep -E 'memory|probe|PASS|WARN|FAIL' | head -8; echo "exit (quick, held) ${PIPESTATUS[0]}"
ef probe --level quick --require-free 80 2>&1 | grep -E 'memory|probe|FAIL' | head -8; echo "exit (--require-free 80, held) ${PIPESTATUS[0]}"
kill "$holder"; wait "$holder" 2>/dev/null
ef probe --level quick --require-free 80 2>&1 | grep -E 'memory|probe' | head -4; echo "exit (--require-free 80, released) ${PIPESTATUS[0]}"
