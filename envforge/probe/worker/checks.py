"""A project's check files as steps: run as ``__main__``; any exception fails the step.

Stdlib-only, Python 3.7 syntax: runs inside the environment under test (see the package).
"""

import os

from .common import Skip, StepFailed


def make_check_step(check):
    def step_check(ctx):
        import runpy  # noqa: PLC0415 - only a project's checks need it

        path = materialize(check, ctx)
        if ctx.vendor != "none" and ctx.device is None and ctx.device_error:
            raise Skip(ctx.device_error)
        runpy.run_path(path, run_name="__main__")
        return "finished without raising"

    step_check.check_path = check.get("path")
    step_check.is_check = True
    return step_check


def materialize(check, ctx):
    """The check's own file when it is here unchanged; else a private copy of its source."""
    path = check.get("path")
    source = check.get("source")
    if path and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as fh:
                # never more than the source's size: the file may have grown meanwhile
                limit = -1 if source is None else len(source) + 1
                if source is None or fh.read(limit) == source:
                    return path
        except (OSError, UnicodeDecodeError, ValueError):
            pass
    if source is None:
        raise StepFailed(f"check file {path} is missing")
    folder = os.path.join(ctx.scratch or scratch_folder(ctx), "checks")
    if not os.path.isdir(folder):
        os.makedirs(folder)
    target = os.path.join(
        folder, f"{len(os.listdir(folder))}-{os.path.basename(path or 'check.py')}"
    )
    with open(target, "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(source)
    return target


def scratch_folder(ctx):
    """A temporary folder for check copies, which this worker removes as it ends."""
    import tempfile  # noqa: PLC0415 - only when the spec came without a folder

    ctx.scratch = tempfile.mkdtemp(prefix="envforge-check-")
    ctx.own_scratch.append(ctx.scratch)
    return ctx.scratch


def remove_own_scratch(ctx):
    if not ctx.own_scratch:
        return
    import shutil  # noqa: PLC0415 - only when scratch_folder made one

    for folder in ctx.own_scratch:
        shutil.rmtree(folder, ignore_errors=True)
