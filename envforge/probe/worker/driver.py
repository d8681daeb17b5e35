"""The step loop: read the spec, run each step under its backstop alarm, emit the events.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package
for the protocol and the process model).
"""

import contextlib
import json
import os
import platform
import signal
import sys
import time
import traceback

from .checks import make_check_step, remove_own_scratch
from .collective import step_collective
from .common import DETAIL_MAX, Context, NoDevice, Skip, StepFailed, describe, is_oom, short
from .companions import (
    step_torchaudio_melspectrogram,
    step_torchvision_convnet,
    step_torchvision_nms,
)
from .device import step_device, step_memory
from .packages import make_import_step
from .processes import become_subreaper, launch, stop_descendants, watch_parent, worker_orphaned
from .tensors import (
    step_autocast,
    step_conv2d,
    step_grad_checkpoint,
    step_matmul,
    step_small_tensor,
    step_transfer_back,
)
from .versions import step_env_snapshot, step_expected_versions

PROTOCOL = 1
#: Seconds past a step's deadline after which an orphaned worker ends itself (SIGALRM).
BACKSTOP = 30
#: Longest alarm the backstop sets (the host refuses deadlines beyond a day anyway).
ALARM_MAX = 7 * 24 * 3600

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
    "collective": step_collective,
}
IMPORT_PREFIX = "import:"


#: Written to stderr as each step starts, so the host can keep only that step's stderr.
STDERR_MARK = "[envforge-probe] step "


def run_step(out, ctx, name, func, deadline):
    sys.stderr.write(STDERR_MARK + name + "\n")
    sys.stderr.flush()
    emit(out, {"event": "start", "step": name, "deadline": deadline})
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
    emit(out, event)


def set_alarm(deadline):
    """The backstop alarm past a step's deadline; None or 0 clears it."""
    if not hasattr(signal, "SIGALRM"):
        return
    if not deadline:
        signal.alarm(0)
        return
    with contextlib.suppress(OverflowError, ValueError):
        signal.alarm(min(int(deadline), ALARM_MAX) + BACKSTOP)


def call_step(ctx, name, func):
    """(status, detail, data) of one step; everything it raises is reported, never fatal."""
    try:
        return step_outcome(func(ctx))
    except Skip as exc:
        return "skip", f"skipped: {exc}", None
    except NoDevice as exc:
        ctx.device_error = ctx.device_error or "no GPU device"
        return "no-device", str(exc), None
    except StepFailed as exc:
        return "fail", str(exc), None
    except SystemExit as exc:  # a check calling sys.exit(0) passed; any other code failed
        if exc.code in (None, 0):
            return "pass", "exited with sys.exit(0)", None
        return "fail", f"check exited with sys.exit({exc.code!r})", None
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
        with contextlib.suppress(BaseException):
            ctx.torch.cuda.empty_cache()
    return status


def note_stopped(detail, stopped):
    """detail, plus what a check left running (now stopped)."""
    if not stopped:
        return detail
    return (
        short(detail, DETAIL_MAX - 120)
        + "; "
        + short(
            f"stopped {len(stopped)} process{'' if len(stopped) == 1 else 'es'} "
            f"the check left running: {', '.join(stopped)}",
            115,
        )
    )


def load_spec(argv):
    """(the spec, the folder of its file or None)."""
    if len(argv) < 2:
        raise SystemExit("usage: worker.py SPEC  (JSON text, JSON file path, or - for stdin)")
    arg = argv[1]
    if arg == "-":
        return json.loads(sys.stdin.read()), None
    if arg.lstrip().startswith("{"):
        return json.loads(arg), None
    folder = os.path.dirname(os.path.abspath(arg))
    with open(arg) as fh:
        return json.load(fh), folder


def emit(out, obj):
    """One event: a JSON line on the private stream, flushed at once."""
    line = json.dumps(obj, sort_keys=True, default=str)
    out.write(line + "\n")
    out.flush()


def step_function(name, checks):
    """The function that runs step name, or None when this worker has no such step."""
    if name in STEPS:
        return STEPS[name]
    if name.startswith(IMPORT_PREFIX):
        return make_import_step(name[len(IMPORT_PREFIX) :])
    if name in checks:
        return make_check_step(checks[name])
    return None


def run_steps(out, ctx):
    spec = ctx.spec
    deadlines = spec.get("deadlines") or {}
    default_deadline = spec.get("step_timeout")
    checks = {c["step"]: c for c in spec.get("checks") or []}
    for name in spec.get("steps") or []:
        func = step_function(name, checks)
        if func is None:
            emit(out, {"event": "start", "step": name, "deadline": 0})
            emit(
                out,
                {
                    "event": "end",
                    "step": name,
                    "status": "fail",
                    "seconds": 0.0,
                    "detail": f"this worker has no step named {name!r}",
                },
            )
            continue
        run_step(out, ctx, name, func, deadlines.get(name, default_deadline))


def main(argv):
    launch()
    become_subreaper()
    # Events go to a private copy of stdout; fd 1 and sys.stdout go to stderr so that
    # prints from checks, torch warnings and C libraries never corrupt the stream.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import faulthandler  # noqa: PLC0415 - where the build has it

        faulthandler.enable(file=sys.stderr, all_threads=True)
    except Exception:
        pass
    spec, folder = load_spec(argv)
    watch_parent(worker_orphaned)
    emit(
        out,
        {
            "event": "hello",
            "pid": os.getpid(),
            "python": platform.python_version(),
            "protocol": PROTOCOL,
        },
    )
    ctx = Context(spec, folder)
    run_steps(out, ctx)
    stop_descendants(os.getpid())
    remove_own_scratch(ctx)
    emit(out, {"event": "done"})
    out.close()
    sys.stderr.flush()
    # Skip interpreter teardown: some GPU runtimes hang or crash in their atexit hooks,
    # and every result is already out.
    os._exit(0)
