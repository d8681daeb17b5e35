"""What every step shares: text made safe for one event line, the step errors, the context.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

import importlib
import os
import traceback

DETAIL_MAX = 400


def printable(text):
    """Control characters and lone surrogates as escapes (\\x1b, \\udc80); idempotent."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if (
            ch.isprintable()
            or ch == " "
            or (code > 0x9F and not 0xD800 <= code <= 0xDFFF and code not in (0xFFFE, 0xFFFF))
        ):
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out)


def text_of(obj):
    """str(obj), or a stand-in when its __str__ raises (a hostile exception)."""
    try:
        return str(obj)
    except BaseException:
        try:
            return f"<unprintable {type(obj).__name__}>"
        except BaseException:
            return "<unprintable>"


def short(text, limit=DETAIL_MAX):
    text = text_of(text)
    if len(text) > 64 * limit:
        text = text[: 64 * limit]
    text = printable(" ".join(text.split()))
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


class StepFailed(Exception):
    """A step's check did not hold (wrong number, wrong version): status fail."""


class NoDevice(Exception):
    """The recipe needs a GPU that torch cannot see: status no-device."""


class Skip(Exception):
    """The step cannot run because an earlier one broke what it needs."""


def is_oom(exc):
    name = type(exc).__name__
    if name in ("OutOfMemoryError", "MemoryError"):
        return True
    text = str(exc).lower()
    return (
        "out of memory" in text
        or "outofmemory" in text
        or "hiperroroutofmemory" in text
        or "cuda_error_out_of_memory" in text
    )


def describe(exc, prefer_file=None, where=True):
    """'TypeName: message (at file:line)' for a Python error."""
    msg = f"{type(exc).__name__}: {text_of(exc)}"
    if not where:
        return short(msg)
    where = None
    tb = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(tb):
        if prefer_file is None or frame.filename == prefer_file:
            where = f"{os.path.basename(frame.filename)}:{frame.lineno}"
            break
    if where:
        msg = f"{msg} (at {where})"
    cause = root_cause(exc)
    said = head_line(cause) if cause is not None else ""
    if said and said.partition(": ")[2] not in msg:
        said = f" (cause: {short(said, DETAIL_MAX // 2)})"
        return short(msg, DETAIL_MAX - len(said)) + said
    return short(msg)


def head_line(exc):
    """'TypeName: the first line of its message'."""
    lines = text_of(exc).strip().splitlines()
    return "{}: {}".format(type(exc).__name__, lines[0].strip() if lines else "")


def root_cause(exc):
    """The innermost exception exc was raised from or while handling (torch's "Could not
    load this library: PATH" hides the loader's "libtorch_cuda.so: cannot open shared
    object file" in its __cause__), or None when there is none."""
    seen, cause = [exc], None
    current = exc
    while len(seen) < 16:
        nxt = current.__cause__
        if nxt is None and not current.__suppress_context__:
            nxt = current.__context__
        if nxt is None or nxt in seen:
            break
        seen.append(nxt)
        cause = current = nxt
    return cause


def clip(text, limit):
    """text on one line, at most limit characters: the middle cut, never the end (where
    a loader's message puts the cause)."""
    text = short(text, 64 * limit)
    if len(text) <= limit:
        return text
    tail = (limit - 5) * 2 // 3
    return text[: limit - 5 - tail] + " ... " + text[len(text) - tail :]


def first_line(exc, limit=300):
    """'TypeName: the first line of the message', and the first line of the underlying
    cause when the message does not already say it (one line, at most limit)."""
    text = head_line(exc)
    cause = root_cause(exc)
    if cause is not None:
        said = head_line(cause)
        if said.partition(": ")[2] not in text:
            text = f"{text} (cause: {said})"
    return clip(text, limit)


# --------------------------------------------------------------------------- context


class Context:
    """What one run's steps learn and share; ``scratch``: where check copies go."""

    def __init__(self, spec, scratch=None):
        self.spec = spec
        self.vendor = spec.get("vendor", "auto")
        self.expect = spec.get("expect") or {}
        self.torch = None
        self.torch_error = None
        self.device = None  # "cuda" or "cpu" once the device step ran
        self.device_error = None
        self.module_errors = {}  # distribution -> why its import step failed
        #: The spec file's folder (removed by whoever made it), else a temporary folder
        #: made on first use and listed in own_scratch for this worker to remove.
        self.scratch = scratch
        self.own_scratch = []

    def need_torch(self):
        if self.torch is not None:
            return self.torch
        if self.torch_error is not None:
            raise Skip("torch is not importable: " + self.torch_error)
        try:
            import torch  # noqa: PLC0415 - the library under test, imported as a step
        except BaseException as exc:  # ImportError, OSError from a broken .so, ...
            self.torch_error = describe(exc, where=False)
            raise
        self.torch = torch
        return torch

    def need_device(self):
        torch = self.need_torch()
        if self.device is None:
            raise Skip(self.device_error or "no usable device")
        return torch, self.device

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def need_module(self, name):
        """A companion module (torchvision) for its device steps; Skip when it did not import."""
        if name in self.module_errors:
            raise Skip(f"{name} is not importable: {self.module_errors[name]}")
        try:
            return importlib.import_module(name)
        except BaseException as exc:
            self.module_errors[name] = first_line(exc)
            raise Skip(f"{name} is not importable: {self.module_errors[name]}") from None
