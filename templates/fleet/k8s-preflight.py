"""envforge's preflight init container: the quick probe in the job's image, before the job.

Shipped in the ConfigMap of ``envforge fleet preflight --engine kubernetes`` as
``preflight.py`` and run as the pod's init container: ``python3 /envforge/preflight.py
/envforge/worker.py /envforge/spec.json``. It runs envforge's stdlib-only probe worker
under each step's deadline through the pod wrapper (``pod.py`` beside it: its ``run``),
then judges the events as envforge's runner does: every step of the spec must end
``pass`` or ``warn``. On a failure it writes ``envforge: STEP: one line`` to the
termination message (``/dev/termination-log``, shown by ``kubectl describe pod``), prints
the ``kubectl taint`` command that keeps other pods off this node (``NODE_NAME`` from the
downward API) and exits 1, so the job's containers never start. Stdlib-only, Python 3.7
syntax: it runs in the image under test.
"""

import json
import os
import sys

import pod

PASSING = ("pass", "warn")
MESSAGE = os.environ.get("ENVFORGE_MESSAGE_FILE", "/dev/termination-log")
TAINT = os.environ.get("ENVFORGE_TAINT", "envforge.io/preflight=failed:NoSchedule")
REASON_MAX = 200


def one_line(text):
    text = " ".join(str(text).split()).replace('"', "'")
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def ends_of(events):
    """({step: its end event}, the step started and not ended, if any)."""
    ends, current = {}, None
    for _, line in events:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "start":
            current = event.get("step")
        elif event.get("event") == "end":
            ends[event.get("step")] = event
            if event.get("step") == current:
                current = None
    return ends, current


def verdict(spec, events, stopped, code):
    """None when every step of the spec passed; else ``envforge: STEP: one line``."""
    ends, current = ends_of(events)
    for name in spec.get("steps") or []:
        end = ends.get(name)
        if end is None:
            step = current or name
            if stopped is not None:
                return one_line(f"envforge: {step}: hang: no result within its deadline")
            return one_line(f"envforge: {step}: crash: worker exited with code {code}")
        status = end.get("status")
        if status not in PASSING:
            detail = str(end.get("detail") or "")
            said = detail if status == "fail" else f"{status}: {detail}"
            return one_line(f"envforge: {name}: {said}")
    return None


def main(argv):
    worker, spec_path = argv[1], argv[2]
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    events, stopped, code, _ = pod.run(worker, spec_path, spec)
    reason = verdict(spec, events, stopped, code)
    node = os.environ.get("NODE_NAME") or "NODE"
    if reason is None:
        sys.stderr.write(f"envforge preflight: passed on {node}\n")
        return 0
    taint = f"kubectl taint nodes {node} {TAINT} --overwrite"
    try:
        with open(MESSAGE, "w", encoding="utf-8") as handle:
            handle.write(f"{reason}\nto keep pods off this node: {taint}\n")
    except OSError:
        pass
    sys.stderr.write(
        f"{reason}\nenvforge preflight failed on {node}; to keep pods off it: {taint}\n"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
