"""GitHub Actions: the plan as a workflow whose matrix is (recipe, arch) over runner labels.

Each matrix job runs on a self-hosted runner with the site's labels plus the arch
(``[self-hosted, gpu, gfx942]``), certifies with ``--report report`` and uploads the
report folder as an artifact named by its task; the ``collect`` job downloads them all
into ``reports/NNN`` and writes the matrix site. ``fail-fast`` is off: one arch failing
does not cancel the others. A label no runner has keeps its job queued (GitHub fails it
after 24 hours). Checked with actionlint (scripts/test); the labels go into the
``actionlint.yaml`` written beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envforge.errors import InvalidInput
from envforge.fleet import values
from envforge.fleet.base import yaml_text
from envforge.fleet.plan import CPU, Plan
from envforge.fleet.slurm_state import JobState

PYTHON = "3.11"
#: The distribution envforge is published as on the package index (pyproject.toml's name).
DISTRIBUTION = "envforge-stacks"


def _certify_command(plan: Plan) -> str:
    # shell text for the runner: the matrix values are the plan's own (recipe names)
    cmd = f'envforge build "$RECIPE" --backend {plan.backend} --report report'
    if plan.level:
        cmd += f" --level {plan.level}"
    return cmd


#: The expressions the workflow holds, all envforge's own: any other ``${{`` in a value
#: would be evaluated by Actions (an injection), so :func:`workflow` refuses it.
_OWN_EXPRESSIONS = (
    "${{ matrix.arch }}",
    "${{ matrix.recipe }}",
    "${{ matrix.task }}",
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


def _workflow(plan: Plan) -> dict[str, Any]:
    include = [
        {
            "task": f"{t.index:03d}",
            "recipe": t.recipe if values.recipe_name_problem(t.ref) else t.ref,
            "arch": t.arch,
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
            "ENVFORGE_FLEET_TASK": f"{plan.id}:${{{{ matrix.task }}}}:{plan.nonce}",
        },
        "steps": [
            {"uses": "actions/checkout@v5"},
            install,
            {"name": "Certify on this runner's GPU", "run": _certify_command(plan) + "\n"},
            {
                "name": "Upload the report",
                "if": "always()",
                "uses": "actions/upload-artifact@v6",
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
            {"uses": "actions/setup-python@v6", "with": {"python-version": PYTHON}},
            {"name": "Install envforge", "run": 'python -m pip install "$ENVFORGE_PIP_SPEC"\n'},
            {
                "name": "Download the reports",
                "uses": "actions/download-artifact@v7",
                "with": {"pattern": "envforge-report-*", "path": "reports"},
            },
            {
                "name": "The certified-on matrix",
                "run": "envforge matrix --evidence reports -o site\n",
            },
            {
                "name": "Upload the matrix site",
                "uses": "actions/upload-artifact@v6",
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
    return {
        "workflow.yml": yaml_text(workflow(plan)).replace("'on':", "on:", 1),
        "actionlint.yaml": yaml_text(actionlint_config(plan)),
    }


def submit_plan(plan: Plan, folder: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """Not from here: the workflow is committed and dispatched."""
    raise InvalidInput(
        "a GitHub Actions plan is not submitted from here",
        hint=f"commit {folder / 'workflow.yml'} as .github/workflows/envforge-fleet.yml "
        "and run it (workflow_dispatch)",
    )


def queued(plan: Plan, folder: Path) -> dict[int, JobState]:
    """No queue is read: a task without a report counts as missing."""
    return {}
