"""A plan's files on disk, and handing them to the scheduler.

``plan.json`` always; then per engine: ``certify-ARCH-gpuN.sbatch`` (Slurm), ``jobs.yaml``
(Kubernetes: the ConfigMap and the Jobs, one YAML document each), ``workflow.yml`` and
``actionlint.yaml`` (GitHub Actions). The files are written all or none, so a folder with a
``plan.json`` has all its files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

import yaml

from envforge.core.fsutil import check_folder_target, make_dirs, write_atomically, write_files
from envforge.errors import InvalidInput, Unavailable
from envforge.fleet import github, k8s, slurm
from envforge.fleet.plan import Plan
from envforge.knowledge.compiled import load_table
from envforge.probe.runner import worker_source
from envforge.probe.spec import ProbeSpec
from envforge.recipe.catalogue import Catalogue


def _yaml(doc: object) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def _k8s_files(plan: Plan) -> dict[str, str]:
    table = load_table()
    catalogue = Catalogue.default()
    specs = {}
    for task in plan.tasks:
        recipe = catalogue.load(task.ref)
        level = plan.level if plan.level in ("quick", "full") else None
        specs[task.index] = ProbeSpec.from_recipe(recipe, level=level).worker_json()  # type: ignore[arg-type]

    def pci_ids(arch: str) -> list[int]:
        return [p.device_id for p in table.amd_pci_ids if p.arch == arch]

    docs = k8s.manifests(plan, worker_source(), specs, pci_ids)
    return {"jobs.yaml": "".join("---\n" + _yaml(d) for d in docs)}


def engine_files(plan: Plan, folder: Path) -> dict[str, str]:
    """File name -> text of the engine's files for ``plan`` (in ``folder``, absolute)."""
    if plan.engine == "slurm":
        return slurm.render(plan, folder)
    if plan.engine == "k8s":
        return _k8s_files(plan)
    return {
        "workflow.yml": _yaml(github.workflow(plan)).replace("'on':", "on:", 1),
        "actionlint.yaml": _yaml(github.actionlint_config(plan)),
    }


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
    """Hand the plan to its scheduler; the job ids (``submitted.json`` records them)."""
    if plan.engine == "github":
        raise InvalidInput(
            "a GitHub Actions plan is not submitted from here",
            hint=f"commit {folder / 'workflow.yml'} as .github/workflows/envforge-fleet.yml "
            "and run it (workflow_dispatch)",
        )
    if plan.engine == "k8s":
        raise Unavailable(
            "no Kubernetes cluster is reached from envforge itself",
            hint=f"kubectl apply -f {folder / 'jobs.yaml'}, then put each pod's log "
            f"into {folder}/reports/NNN/ for `fleet collect`",
        )
    scripts = [folder / name for name in slurm.render(plan, folder)]
    missing = [p for p in scripts if not p.is_file()]
    if missing:
        raise InvalidInput(f"{missing[0]}: no such file", hint="plan again (fleet plan -o DIR)")
    jobs = slurm.submit(scripts, environ)
    record = {
        "engine": plan.engine,
        "plan": plan.id,
        "jobs": jobs,
        "submitted": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
    }
    write_atomically(folder / "submitted.json", json.dumps(record, indent=2) + "\n")
    return jobs
