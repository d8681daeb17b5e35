"""GitHub Actions: the plan as a workflow whose matrix is (recipe, arch) over runner labels.

Each matrix job runs on a self-hosted runner with the site's labels plus the arch
(``[self-hosted, gpu, gfx942]``), certifies with ``--report report`` and uploads the
report folder as an artifact named by its task; the ``collect`` job downloads them all
into ``reports/NNN`` and writes the matrix site. ``fail-fast`` is off: one arch failing
does not cancel the others. A label no runner has keeps its job queued (GitHub fails it
after 24 hours). Checked with actionlint (scripts/test); the labels go into the
``actionlint.yaml`` written beside it.

A recipe given as a file is copied into the plan's folder (``recipe-NAME.yaml``) and the
matrix names it under :data:`RECIPES` (``.github/envforge/``), where the operator commits
it beside the workflow; a runner has no other way to see it. The plan's wheel folder is
passed on (``--wheelhouse``: the path must exist on the runners, as on Slurm nodes).
Actions are pinned by commit (:data:`ACTIONS`: the release each SHA is, read from the
actions' own repositories), not by a tag that can move.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envforge.errors import InvalidInput
from envforge.fleet import values
from envforge.fleet.base import yaml_text
from envforge.fleet.plan import CPU, Plan, Task
from envforge.fleet.slurm_state import JobState

PYTHON = "3.11"
#: Where the workflow finds the plan's recipe files in the repository.
RECIPES = ".github/envforge"
#: Each action used, pinned by the commit of a release; the release (a comment in the
#: workflow, as Dependabot and Renovate read it).
PINS = {
    "checkout": ("actions/checkout@fbc6f3992d24b796d5a048ff273f7fcc4a7b6c09", "v5.1.0"),
    "upload": ("actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f", "v6.0.0"),
    "download": ("actions/download-artifact@37930b1c2abaa49bbe596cd826c3c89aef350131", "v7.0.0"),
    "python": ("actions/setup-python@ece7cb06caefa5fff74198d8649806c4678c61a1", "v6.3.0"),
}
ACTIONS = {name: ref for name, (ref, _) in PINS.items()}
#: The distribution envforge is published as on the package index (pyproject.toml's name).
DISTRIBUTION = "envforge-stacks"


def _certify_command(plan: Plan) -> str:
    # shell text for the runner: the matrix values are the plan's own (recipe names)
    cmd = f'envforge build "$RECIPE" --backend {plan.backend} --report report'
    if plan.wheelhouse:
        cmd += f" --wheelhouse {shlex.quote(plan.wheelhouse)}"
    if plan.level:
        cmd += f" --level {plan.level}"
    if plan.checks is not None:  # each task's own flags (fixed words), as bash words
        cmd = 'read -r -a checks <<< "$PROBE_CHECKS"\n' + cmd + ' "${checks[@]}"'
    return cmd


#: The expressions the workflow holds, all envforge's own: any other ``${{`` in a value
#: would be evaluated by Actions (an injection), so :func:`workflow` refuses it.
_OWN_EXPRESSIONS = (
    "${{ matrix.arch }}",
    "${{ matrix.recipe }}",
    "${{ matrix.task }}",
    "${{ matrix.checks }}",
    f"${{{{ vars.ENVFORGE_PIP_SPEC || '{DISTRIBUTION}' }}}}",
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _check_expressions(flow: dict[str, Any]) -> None:
    for text in _strings(flow):
        rest = text
        for own in _OWN_EXPRESSIONS:
            rest = rest.replace(own, "")
        if "${{" in rest:
            raise InvalidInput(
                f"a workflow value holds an expression: {text[:80]!r}",
                hint="use recipe names, archs and runner labels without ${{",
            )


def workflow(plan: Plan) -> dict[str, Any]:
    """The workflow (a YAML dumper writes it); every value is a checked name, and no
    ``${{`` but envforge's own is in it."""
    flow = _workflow(plan)
    _check_expressions(flow)
    return flow


def recipe_files(plan: Plan) -> dict[str, str]:
    """``recipe-NAME.yaml`` -> the text of each recipe the plan names by file."""
    found = {}
    for task in plan.tasks:
        if values.recipe_name_problem(task.ref):  # a path, not a catalogue name
            try:
                found[f"recipe-{task.recipe}.yaml"] = Path(task.ref).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InvalidInput(
                    f"--recipe {task.ref}: cannot read it: {exc}", hint="check the path"
                ) from None
    return found


def _recipe_ref(ref: str, name: str) -> str:
    return f"{RECIPES}/recipe-{name}.yaml" if values.recipe_name_problem(ref) else ref


def _checks(plan: Plan, task: Task) -> dict[str, str]:
    """The task's health and collective flags as a matrix value (none in plans from
    before them)."""
    checks = plan.task_checks(task)
    return {} if checks is None else {"checks": " ".join(checks.argv())}


def _workflow(plan: Plan) -> dict[str, Any]:
    include = [
        {
            "task": f"{t.index:03d}",
            "recipe": _recipe_ref(t.ref, t.recipe),
            "arch": t.arch,
            **_checks(plan, t),
        }
        for t in plan.tasks
    ]
    labels = [*plan.site.runner_labels]
    runs_on: Any = [*labels, "${{ matrix.arch }}"]
    if all(t.arch == CPU for t in plan.tasks):
        runs_on = labels or "ubuntu-latest"
    install = {
        "name": "Install envforge",
        "run": 'python3 -m venv "$RUNNER_TEMP/envforge"\n'
        '"$RUNNER_TEMP/envforge/bin/pip" install "$ENVFORGE_PIP_SPEC"\n'
        'echo "$RUNNER_TEMP/envforge/bin" >> "$GITHUB_PATH"\n',
    }
    certify = {
        "runs-on": runs_on,
        "timeout-minutes": 90,
        "strategy": {"fail-fast": False, "matrix": {"include": include}},
        # the plan's nonce, recorded by the probe in each report (fleet collect checks it)
        "env": {
            "RECIPE": "${{ matrix.recipe }}",
            **({"PROBE_CHECKS": "${{ matrix.checks }}"} if plan.checks is not None else {}),
            "ENVFORGE_FLEET_TASK": f"{plan.id}:${{{{ matrix.task }}}}:{plan.nonce}",
        },
        "steps": [
            {"uses": ACTIONS["checkout"]},
            install,
            {"name": "Certify on this runner's GPU", "run": _certify_command(plan) + "\n"},
            {
                "name": "Upload the report",
                "if": "always()",
                "uses": ACTIONS["upload"],
                "with": {
                    "name": "envforge-report-${{ matrix.task }}",
                    "path": "report/",
                    "if-no-files-found": "warn",
                },
            },
        ],
    }
    collect = {
        "needs": "certify",
        "if": "always()",
        "runs-on": "ubuntu-latest",
        "timeout-minutes": 15,
        "steps": [
            {"uses": ACTIONS["python"], "with": {"python-version": PYTHON}},
            {"name": "Install envforge", "run": 'python -m pip install "$ENVFORGE_PIP_SPEC"\n'},
            {
                "name": "Download the reports",
                "uses": ACTIONS["download"],
                "with": {"pattern": "envforge-report-*", "path": "reports"},
            },
            {
                "name": "The certified-on matrix",
                "run": "envforge matrix --evidence reports -o site\n",
            },
            {
                "name": "Upload the matrix site",
                "uses": ACTIONS["upload"],
                "with": {"name": "envforge-matrix", "path": "site/"},
            },
        ],
    }
    return {
        "name": f"envforge fleet {plan.id}",
        "on": {"workflow_dispatch": None, "schedule": [{"cron": "17 3 * * *"}]},
        "permissions": {"contents": "read"},
        # what `pip install` installs envforge from (a version pin, a wheel URL, a path)
        "env": {"ENVFORGE_PIP_SPEC": f"${{{{ vars.ENVFORGE_PIP_SPEC || '{DISTRIBUTION}' }}}}"},
        "jobs": {"certify": certify, "collect": collect},
    }


def actionlint_config(plan: Plan) -> dict[str, Any]:
    labels = sorted({*plan.site.runner_labels, *(t.arch for t in plan.tasks)} - {"self-hosted"})
    return {"self-hosted-runner": {"labels": labels}}


# --------------------------------------------------------------------------- the engine


def check_backend(backend: str, *, images: bool) -> None:
    """Any backend: a matrix job runs ``envforge build`` on its runner."""


def files(plan: Plan, folder: Path) -> dict[str, str]:
    """``workflow.yml`` and the ``actionlint.yaml`` that names its runner labels."""
    text = yaml_text(workflow(plan)).replace("'on':", "on:", 1)
    for ref, release in PINS.values():
        text = text.replace(f"uses: {ref}\n", f"uses: {ref} # {release}\n")
    return {
        "workflow.yml": text,
        "actionlint.yaml": yaml_text(actionlint_config(plan)),
        **recipe_files(plan),
    }


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Not from here: the workflow is committed and dispatched."""
    raise InvalidInput(
        "a GitHub Actions plan is not submitted from here",
        hint=f"commit {folder / 'workflow.yml'} as .github/workflows/envforge-fleet.yml"
        + (f" and {folder}/recipe-*.yaml into {RECIPES}/" if recipe_files(plan) else "")
        + ", and run it (workflow_dispatch)",
    )


def queued(plan: Plan, folder: Path) -> dict[int, JobState]:
    """No queue is read: a task without a report counts as missing."""
    return {}
