"""A plan's files on disk, and handing them to the scheduler.

``plan.json`` always; then the engine's own files (:data:`~envforge.fleet.engines.ENGINES`:
``certify-ARCH-gpuN.sbatch`` for Slurm, ``jobs.yaml`` for Kubernetes, ``workflow.yml`` and
``actionlint.yaml`` for GitHub Actions). The files are written all or none, so a folder
with a ``plan.json`` has all its files.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from envforge.core.fsutil import check_folder_target, make_dirs, write_files
from envforge.fleet.engines import engine_for
from envforge.fleet.plan import Plan


def engine_files(plan: Plan, folder: Path) -> dict[str, str]:
    """File name -> text of the engine's files for ``plan`` (in ``folder``, absolute)."""
    return engine_for(plan.engine, "engine").files(plan, folder)


def write_plan(plan: Plan, folder: Path) -> list[Path]:
    """Write the plan's files into ``folder`` (created); the paths written. All or none
    (:func:`~envforge.core.fsutil.write_files`): a file that cannot be written (a device
    or FIFO where one goes, a full disk) leaves none of them, nor ``logs/``."""
    files = {**engine_files(plan, folder), "plan.json": plan.to_json()}
    check_folder_target(folder, setting="-o", files=files)
    check_folder_target(folder / "logs", setting="-o")
    created = make_dirs(folder / "logs", setting="-o")
    try:
        write_files([(folder / name, text, 0o644) for name, text in files.items()], setting="-o")
    except BaseException:
        for made in reversed(created):
            with suppress(OSError):
                made.rmdir()
        raise
    return [folder / "plan.json", *(folder / name for name in files if name != "plan.json")]


def submit(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Hand the plan to its scheduler; the job ids (Slurm: ``submitted.json`` records them)."""
    return engine_for(plan.engine, "engine").submit_plan(plan, folder, environ)
