"""envforge's pod wrapper: run the probe worker in a Kubernetes pod, print its report framed.

Shipped in the plan's ConfigMap as ``pod.py`` (``envforge fleet plan --engine k8s``) and
run by each pod as ``python3 /envforge/pod.py /envforge/worker.py SPEC FIRST_TASK``. It
runs the worker (envforge's stdlib-only probe worker) as its child, keeps each event line
with the second it came, stops the worker's whole process group when a step overruns its
deadline (the spec's), and at the end prints one frame to the pod's log:

    envforge-report-begin task=NNN plan=PLAN nonce=NONCE framing=1
    envforge-report-data NNN BASE64 (as many lines as needed)
    envforge-report-end task=NNN sha256=HEX

The data lines hold the JSON record (the events, the exit status, the host facts the
detector reads: kernel, machine, node, the device files) base64-encoded; sha256 is over
the decoded bytes. ``envforge fleet collect --from-logs`` replays the events with
envforge's own runner, so a pod's verdicts are those of a local probe run. The task number
is FIRST_TASK + the Indexed Job's ``JOB_COMPLETION_INDEX``; the plan's id and nonce come
from ``ENVFORGE_PLAN`` (``PLAN:NONCE``), the node's name from ``NODE_NAME`` (the
downward API). Stdlib-only, Python 3.7 syntax: it runs in the image under test.
"""

import base64
import collections
import datetime
import glob
import hashlib
import json
import os
import platform
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

FRAMING = 1
BEGIN = "envforge-report-begin"
DATA = "envforge-report-data"
END = "envforge-report-end"
#: Characters of base64 per data line (kubectl and log shippers keep lines far longer).
CHUNK = 4000
#: What envforge's host detector reads (envforge/host/detect.py), relative to /.
FACTS = (
    "proc/sys/kernel/osrelease",
    "sys/module/amdgpu/version",
    "sys/class/kfd/kfd/topology/nodes/*/properties",
    "sys/class/drm/card*/device/vendor",
    "sys/class/drm/card*/device/device",
    "sys/class/drm/card*/device/product_name",
    "proc/driver/nvidia/version",
    "proc/driver/nvidia/gpus/*/information",
    "etc/machine-id",
)
#: Folders whose presence the detector reads.
FOLDERS = ("sys/module/amdgpu", "sys/class/drm/card*/device/drm/renderD*")
GRANT_VARIABLES = (
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
)
MAX_FILE = 65536
MAX_LINE = 1 << 20
MAX_EVENTS = 5000
EXIT_WAIT = 5.0
MIN_STARTUP = 30.0


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_FILE).decode("utf-8", "replace")
    except OSError:
        return None


def host_files():
    """{path relative to /: text, or None for a folder} of what the detector reads."""
    found = {}
    for pattern in FACTS:
        for path in sorted(glob.glob("/" + pattern))[:256]:
            text = _read(path)
            if text is not None:
                found[path[1:]] = text
    for bus in sorted(glob.glob("/proc/driver/nvidia/gpus/*"))[:64]:
        name = "sys/bus/pci/devices/" + os.path.basename(bus) + "/device"
        text = _read("/" + name)
        if text is not None:
            found[name] = text
    for pattern in FOLDERS:
        for path in sorted(glob.glob("/" + pattern))[:256]:
            if os.path.isdir(path):
                found[path[1:]] = None
    return found


def host_facts():
    uname = platform.uname()
    return {
        "kernel": f"{uname.system} {uname.release}",
        "machine": uname.machine,
        "node": os.environ.get("NODE_NAME") or socket.gethostname(),
        "pod": socket.gethostname(),
        "granted": {k: os.environ[k] for k in GRANT_VARIABLES if os.environ.get(k)},
        "files": host_files(),
    }


def _pump(stream, lines, began):
    for raw in iter(stream.readline, b""):
        lines.put((time.monotonic() - began, raw[:MAX_LINE].decode("utf-8", "replace")))
    lines.put(None)


def _keep(stream, tail):
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace")
        tail.append(text)
        sys.stderr.write(text)
        sys.stderr.flush()


def _limit(line, spec, limit):
    """The next deadline after ``line`` (the runner's: startup, step, gap, exit)."""
    try:
        event = json.loads(line)
    except ValueError:
        return limit
    if not isinstance(event, dict):
        return limit
    kind = event.get("event")
    step_timeout = float(spec.get("step_timeout") or 60.0)
    if kind == "hello":
        return max(step_timeout, MIN_STARTUP)
    if kind == "start":
        deadline = event.get("deadline")
        return float(deadline) if isinstance(deadline, (int, float)) and deadline > 0 else limit
    if kind == "end":
        return step_timeout
    if kind == "done":
        return EXIT_WAIT
    return limit


def _stop(child):
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        child.kill()


def run(worker, spec_path, spec):
    """The worker's events [[second, line], ...], the second it was stopped (or None), its
    exit status and the end of its stderr."""
    began = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, worker, spec_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    lines = queue.Queue()
    tail = collections.deque(maxlen=200)
    for target, args in ((_pump, (child.stdout, lines, began)), (_keep, (child.stderr, tail))):
        threading.Thread(target=target, args=args, daemon=True).start()
    events, stopped, last = [], None, 0.0
    limit = max(float(spec.get("step_timeout") or 60.0), MIN_STARTUP)
    while True:
        try:
            item = lines.get(timeout=max(began + last + limit - time.monotonic(), 0.0))
        except queue.Empty:
            stopped = round(time.monotonic() - began, 3)
            _stop(child)
            break
        if item is None:
            break
        last, line = item
        if len(events) < MAX_EVENTS and line.strip():
            events.append([round(last, 3), line.rstrip("\n")])
        limit = _limit(line, spec, limit)
    try:
        code = child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _stop(child)
        code = child.wait()
    return events, stopped, code, "".join(tail)[-8000:]


def frame(task, plan, nonce, record):
    data = json.dumps(record, sort_keys=True).encode("utf-8")
    text = base64.b64encode(data).decode("ascii")
    out = [f"{BEGIN} task={task:03d} plan={plan} nonce={nonce} framing={FRAMING}"]
    out += [f"{DATA} {task:03d} {text[i : i + CHUNK]}" for i in range(0, len(text), CHUNK)]
    out.append(f"{END} task={task:03d} sha256={hashlib.sha256(data).hexdigest()}")
    return "\n".join(out) + "\n"


def main(argv):
    worker, spec_path, first = argv[1], argv[2], int(argv[3])
    task = first + int(os.environ.get("JOB_COMPLETION_INDEX") or 0)
    plan, _, nonce = os.environ.get("ENVFORGE_PLAN", "").partition(":")
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    created = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    events, stopped, code, stderr = run(worker, spec_path, spec)
    record = {
        "framing": FRAMING,
        "plan": plan,
        "task": task,
        "nonce": nonce,
        "created": created.isoformat().replace("+00:00", "Z"),
        "events": events,
        "stopped": stopped,
        "exit": code,
        "stderr": stderr,
        "host": host_facts(),
    }
    sys.stdout.write(frame(task, plan, nonce, record))
    sys.stdout.flush()
    return 0 if code == 0 and stopped is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
