"""Issue 27 classes 2, 3 and 7 (fleet): values that would become lines of a batch job,
forged reports, malformed plans, unbounded counts and timeouts.

Class 2: every hostile value (line breaks, ``$(...)``, backticks, ``;``, quotes, ``${{ }}``,
``..``, ``/``, NUL, very long, unicode) of every option that lands in a scheduler's file
is refused by ``fleet plan`` in one line (exit 2) naming the option, and nothing is
written; a plan folder a path may hold is quoted so that the script keeps its one
command line (checked with sbatch's own reading of ``#SBATCH`` lines, re-implemented
below from Slurm's ``_get_argument``, and with bash). Class 3: forged reports in a plan's
task folders are ``refused``, never imported; ``evidence import`` refuses reports no
probe run writes. Class 7: malformed ``plan.json`` fields are one-line exit 2;
``--nodes`` and ``--timeout`` are bounded. The real Slurm cluster runs the same in
tests/acceptance/test_fleet_slurm.py.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envforge.backends import BACKENDS
from envforge.cli import main
from envforge.errors import InvalidInput
from envforge.evidence.genuine import document_problem, steps_problem
from envforge.evidence.records import Redactor
from envforge.fleet import github, outcome, slurm, values
from envforge.fleet.plan import Plan, Site
from envforge.fleet.planning import load_plan, make_plan
from envforge.fleet.task import environment
from envforge.host.grant import FLEET_VARIABLE, fleet_facts
from envforge.probe.report import host_info
from envforge.probe.spec import FULL_STEPS, QUICK_STEPS
from envforge.recipe.catalogue import Catalogue
from tests.helpers.fleet_args import plan_args

CAT = Catalogue.default({})
HOSTILE = [
    "a\nb",
    "x\n#SBATCH --wrap=id",
    "$(touch /tmp/pwn)",
    "`id`",
    "a;b",
    "a'b",
    'a"b',
    "${{ secrets.GITHUB_TOKEN }}",
    "../../../x",
    "a/b",
    "a\x00b",
    "x" * 5000,
    "gpü",
    "a b",
    "a#b",
    "a\u2028b",
    "a\rb",
    "",
]
#: (engine, option as named in the error, the arguments for a value)
OPTIONS: list[tuple[str, str, Any]] = [
    ("slurm", "--partition", lambda v: ["--partition", v]),
    ("slurm", "--account", lambda v: ["--account", v]),
    ("slurm", "--time", lambda v: ["--time", v]),
    ("slurm", "--feature", lambda v: ["--arch", "gfx942", "--feature", f"gfx942={v}"]),
    ("slurm", "--feature", lambda v: ["--arch", "gfx942", "--feature", f"{v}=mi300x"]),
    ("slurm", "--arch", lambda v: ["--arch", v]),
    ("github", "--runner-label", lambda v: ["--arch", "gfx942", "--runner-label", v]),
    ("github", "--arch", lambda v: ["--arch", v]),
    ("k8s", "--namespace", lambda v: ["--namespace", v]),
    ("k8s", "--arch-label", lambda v: ["--arch", "gfx942", "--arch-label", v]),
    ("k8s", "--registry", lambda v: ["--registry", v]),
]
#: Values an option may take (not hostile there): "" means "none" for these options.
ALLOWED = {
    ("--partition", ""),
    ("--account", ""),
    ("--arch-label", ""),
    ("--registry", ""),
    ("--arch-label", "a/b"),
    ("--registry", "a/b"),
}


@pytest.fixture(autouse=True)
def no_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "SLURM_JOB_ID",
        "SLURM_JOB_GPUS",
        "KUBERNETES_SERVICE_HOST",
        FLEET_VARIABLE,
        "ENVFORGE_RECIPE_PATH",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))


def plan_of(*names: str, engine: str = "slurm", **kw: Any) -> Plan:
    kw.setdefault("images", BACKENDS[str(kw.get("backend", "docker"))].runs_images())
    return make_plan(engine, [(n, CAT.load(n)) for n in names], **kw)


# --------------------------------------------------------------------------- class 2


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: ascii(v)[:24])
@pytest.mark.parametrize(
    ("engine", "option", "make"), OPTIONS, ids=[f"{e}{o}{i}" for i, (e, o, _) in enumerate(OPTIONS)]
)
def test_plan_refuses_each_hostile_value_in_one_line_and_writes_nothing(  # noqa: PLR0917
    engine: str,
    option: str,
    make: Any,
    value: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "plan"
    code = main(plan_args(out, *make(value), engine=engine))
    err = capsys.readouterr().err
    if (option, value) in ALLOWED:
        assert code == 0, err
        return
    assert code == 2, err
    assert err.count("\n") == 1, err  # one line
    assert option in err
    assert "fix:" in err
    assert "\x00" not in err
    assert not out.exists()


def sbatch_argument(line: str) -> tuple[str, str]:
    """Slurm's ``_get_argument`` (src/sbatch/opt.c): the first argument of a directive
    line's rest, and what follows it."""
    i, arg, quote, escaped = 0, [], "", False
    while i < len(line) and line[i].isspace():
        i += 1
    while i < len(line) and (quote or not line[i].isspace()) and line[i] != "\n":
        ch = line[i]
        i += 1
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
            continue
        elif quote:
            if ch == quote:
                quote = ""
                continue
        elif ch in "\"'":
            quote = ch
            continue
        elif ch == "#":
            break
        arg.append(ch)
    return "".join(arg), line[i:]


FOLDER_CHARS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=40
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=FOLDER_CHARS)
def test_any_plan_folder_is_refused_or_keeps_one_command_line(name: str) -> None:
    folder = Path("/srv/plans") / name
    plan = plan_of("cpu", archs=("gfx942",), backend="venv")
    if values.folder_problem(str(folder)):
        with pytest.raises(InvalidInput, match=r"^-o "):
            slurm.render(plan, folder)
        return
    files = slurm.render(plan, folder)
    text = files["certify-gfx942-gpu1.sbatch"]
    lines = text.split("\n")
    assert [ln for ln in lines if ln and not ln.startswith("#")] == [
        f"exec {shlex.join(plan.envforge)} fleet task {shlex.quote(str(folder))} "
        '"$SLURM_ARRAY_TASK_ID" ${1:+--run "$1"}'
    ]
    output = next(ln for ln in lines if ln.startswith("#SBATCH --output"))
    arg, rest = sbatch_argument(output[len("#SBATCH ") :])
    assert arg == f"--output={folder}/logs/%A_%a.out"
    assert not rest.strip()


def test_a_quoted_plan_folder_is_one_word_for_bash_too(tmp_path: Path) -> None:
    folder = tmp_path / 'we\'ird $(id) `x` ; "q" #h ü'
    files = slurm.render(plan_of("cpu", backend="venv"), folder)
    script = tmp_path / "s.sh"
    script.write_text(files["certify-cpu-gpu0.sbatch"].replace("exec ", "printf '%s\\n' ", 1))
    done = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        check=True,
        env={"SLURM_ARRAY_TASK_ID": "0", "PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.splitlines()[-3:] == ["task", str(folder), "0"]


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (
            values.time_problem,
            ["30", "30:00", "01:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"],
            ["1h", "01:00:00\n", "-1", "1:2:3:4", ""],
        ),
        (values.partition_problem, ["gpu", "gpu,debug", "gpu_a.1-x"], ["gpu debug", "a,", "-x"]),
        (
            values.feature_problem,
            ["gfx942", "mi300x&rocm", "a|b", "[rack1*2&rack2*4]"],
            ["", "a b", "a$b", "a;b"],
        ),
        (values.namespace_problem, ["default", "ml-team"], ["Default", "a_b", "-a", "a" * 64]),
        (values.label_key_problem, ["envforge.io/gpu-arch", "arch"], ["a/b/c", "A_/x", "/x"]),
        (
            values.arch_problem,
            ["gfx942", "gfx90a", "gfx1100", "sm_90", "sm_100a", "cpu"],
            ["gfx", "sm90", "../x", "GFX942", "gfx942/"],
        ),
    ],
)
def test_the_value_checks_take_what_the_scheduler_takes(
    check: Any, good: list[str], bad: list[str]
) -> None:
    assert [v for v in good if check(v)] == []
    assert [v for v in bad if not check(v)] == []


def test_the_workflow_holds_no_expression_but_envforges_own() -> None:
    plan = plan_of("cpu", archs=("gfx942",), engine="github", backend="venv")
    flow = github.workflow(plan)
    env = flow["jobs"]["certify"]["env"]
    assert env[FLEET_VARIABLE] == f"{plan.id}:${{{{ matrix.task }}}}:{plan.nonce}"
    forged = Plan(
        plan.engine,
        plan.backend,
        plan.tasks,
        Site(runner_labels=("${{ secrets.TOKEN }}",)),
        nonce=plan.nonce,
    )
    with pytest.raises(InvalidInput, match="holds an expression"):
        github.workflow(forged)


def test_file_names_come_from_checked_archs_only() -> None:
    with pytest.raises(InvalidInput, match="not a GPU arch"):
        slurm.script_name("../../../x", 1)
    assert slurm.script_name("gfx942", 1) == "certify-gfx942-gpu1.sbatch"


# --------------------------------------------------------------------------- class 7


def _plan_dir(tmp_path: Path, **change: Any) -> Path:
    plan = json.loads(plan_of("cpu", "gfx942").to_json())
    for key, value in change.items():
        if key.startswith("site_"):
            plan["site"][key[5:]] = value
        elif key.startswith("task_"):
            plan["tasks"][0][key[5:]] = value
        else:
            plan[key] = value
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(plan))
    return folder


@pytest.mark.parametrize(
    "change",
    [
        {"site_features": 5},
        {"site_features": [[1]]},
        {"site_features": [["a"]]},
        {"site_features": "ab"},
        {"site_features": [[1, 2, 3]]},
        {"site_runner_labels": 3},
        {"site_time": 7},
        {"site_partition": None},
        {"site_partition": ["x"]},
        {"site_namespace": {}},
        {"site_partition": "gpu\n#SBATCH --wrap=id"},
        {"site_features": [["gfx942", "$(id)"]]},
        {"site_time": "1 day"},
        {"site_runner_labels": ["${{ secrets.X }}"]},
        {"site": []},
        {"task_arch": "../../x"},
        {"task_gpus": 1.5},
        {"task_gpus": 10**9},
        {"task_recipe": "a\nb"},
        {"task_index": "0"},
        {"level": 5},
        {"level": "all"},
        {"envforge": [1, 2]},
        {"nonce": "$(id)"},
        {"tasks": [{}] * 1001},
    ],
    ids=lambda c: ascii(c)[:40],
)
def test_a_malformed_plan_json_is_one_line_exit_2(
    change: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _plan_dir(tmp_path, **change)
    for command in (["status"], ["submit"], ["collect"]):
        assert main(["fleet", *command, str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "plan.json" in err
    with pytest.raises(InvalidInput):
        load_plan(folder)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--nodes", "100000000"], "--nodes 100000000: must be from 1 to 1000"),
        (["--nodes", "0"], "--nodes 0"),
        (["--gpus", "1000000000"], "--gpus 1000000000: must be from 0 to 64"),
        (["--gpus", "-1"], "--gpus -1"),
        (["--nodes", "600", "--arch", "gfx942", "--arch", "sm_90"], "1200 tasks: more than 1000"),
    ],
)
def test_counts_are_bounded_before_any_task_is_made(
    args: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.monotonic()
    assert main(plan_args(tmp_path / "p", *args)) == 2
    assert time.monotonic() - start < 10
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e12"])
def test_status_refuses_a_timeout_that_never_ends(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _plan_dir(tmp_path)
    assert main(["fleet", "status", str(folder), "--wait", "--timeout", value]) == 2
    assert "--timeout" in capsys.readouterr().err


# --------------------------------------------------------------------------- class 3


def report(plan: Plan, index: int, **over: Any) -> dict[str, Any]:
    """A report as the probe run of task ``index`` writes it (cpu recipe, quick)."""
    task = plan.tasks[index]
    doc: dict[str, Any] = {
        "schema": "envforge.probe/1",
        "status": "pass",
        "steps": [
            {"name": s, "status": "pass", "seconds": 0.1, "detail": ""}
            for s in (*QUICK_STEPS, "import:torch", "import:numpy")
        ],
        "level": "quick",
        "recipe": {"name": task.recipe, "hash": task.recipe_hash},
        "environment": {
            "target": "python",
            "snapshot": {"torch": "2.13.0+cpu", "python": "3.11.4"},
        },
        "host": {
            "kernel": "Linux 6.8",
            "machine": "x86_64",
            "gpus": [],
            "driver": None,
            "node": "n1",
            "fleet": {"plan": plan.id, "task": str(index), "nonce": plan.nonce},
        },
        "envforge_version": "0.1.0",
        "created": "2026-01-01T00:00:00Z",
        "seconds": 1.0,
    }
    doc.update(over)
    return doc


def _host(plan: Plan, index: int, **over: Any) -> dict[str, Any]:
    host: dict[str, Any] = report(plan, index)["host"]
    host.update(over)
    return host


FORGERIES: dict[str, Any] = {
    "one step": lambda p, i: report(
        p, i, steps=[{"name": "device", "status": "pass", "seconds": 0.1}]
    ),
    "no nonce": lambda p, i: report(p, i, host=_host(p, i, fleet=None)),
    "another plan's nonce": lambda p, i: report(
        p, i, host=_host(p, i, fleet={"plan": p.id, "task": str(i), "nonce": "0" * 32})
    ),
    "another task's report": lambda p, i: report(p, i + 1 if i + 1 < len(p.tasks) else 0),
    "full level, quick plan": lambda p, i: report(
        p,
        i,
        level="full",
        steps=[{"name": s, "status": "pass", "seconds": 0.1} for s in FULL_STEPS],
    ),
    "status lies": lambda p, i: report(
        p,
        i,
        steps=[
            *report(p, i)["steps"][:-1],
            {"name": "import:numpy", "status": "fail", "seconds": 0.1},
        ],
    ),
    "negative time": lambda p, i: report(p, i, seconds=-5),
    "unknown step": lambda p, i: report(
        p, i, steps=[*report(p, i)["steps"], {"name": "trust-me", "status": "pass", "seconds": 0.1}]
    ),
    "step twice": lambda p, i: report(
        p, i, steps=[*report(p, i)["steps"], report(p, i)["steps"][0]]
    ),
    "from the future": lambda p, i: report(p, i, created="2999-01-01T00:00:00Z"),
    "gpu name a number": lambda p, i: report(p, i, host=_host(p, i, gpus=[{"name": 5}])),
    "pci id a command": lambda p, i: report(
        p,
        i,
        host=_host(
            p,
            i,
            gpus=[
                {
                    "name": "AMD Radeon RX 7900 XTX",
                    "vendor": "amd",
                    "arch": "gfx1100",
                    "pci_id": "$(id)",
                }
            ],
        ),
    ),
    "no steps": lambda p, i: report(p, i, steps=[]),
    "another node": lambda p, i: report(p, i, host=_host(p, i, node="elsewhere")),
}


def _write(folder: Path, index: int, doc: dict[str, Any]) -> None:
    out = folder / f"reports/{index:03d}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(doc))
    (out / "task.json").write_text(json.dumps({"exit": 0, "node": "n1"}))


def test_forged_reports_are_refused_and_never_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "plan"
    assert main(plan_args(folder, "--level", "quick", "--nodes", str(len(FORGERIES) + 1))) == 0
    plan = load_plan(folder)
    for index, make in enumerate(FORGERIES.values()):
        _write(folder, index, make(plan, index))
    _write(folder, len(FORGERIES), report(plan, len(FORGERIES)))  # the real one
    found = outcome.states(plan, folder, {}, Redactor(()))
    states = {name: (s.state, s.detail) for name, s in zip(FORGERIES, found)}
    assert {n: s for n, (s, _) in states.items() if s != "refused"} == {}
    assert "not those of a quick probe run" in states["one step"][1]
    assert "carries no fleet task" in states["no nonce"][1]
    assert "another plan's nonce" in states["another plan's nonce"][1]
    assert "written for task" in states["another task's report"][1]
    assert "plan asks for quick" in states["full level, quick plan"][1]
    assert "is not what its steps give" in states["status lies"][1]
    assert "ran on node 'elsewhere'" in states["another node"][1]
    assert found[-1].state == "passed"
    capsys.readouterr()
    assert main(["fleet", "collect", str(folder), "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 1  # the real report only
    assert [t["state"] for t in summary["tasks"]].count("refused") == len(FORGERIES)


def test_a_gpu_recipe_pass_without_its_gpu_is_refused(tmp_path: Path) -> None:
    plan = plan_of("gfx942", backend="venv", level="quick")
    folder = tmp_path / "p"
    doc = report(plan, 0)
    _write(folder, 0, doc)
    state = outcome.states(plan, folder, {}, Redactor(()))[0]
    assert state.state == "refused"
    assert "without a amd GPU of arch gfx942" in state.detail
    doc["host"]["gpus"] = [{"name": "AMD Instinct MI300X", "vendor": "amd", "arch": "gfx942"}]
    _write(folder, 0, doc)
    assert outcome.states(plan, folder, {}, Redactor(()))[0].state == "passed"


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in FORGERIES
        if n
        not in (
            "no nonce",
            "another plan's nonce",
            "another task's report",
            "full level, quick plan",
            "another node",
        )
    ],
)
def test_evidence_import_refuses_what_no_probe_run_writes(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_of("cpu", nodes=2, level="quick")
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(FORGERIES[name](plan, 0)))
    assert main(["evidence", "import", str(path)]) == 2
    assert f"skipped {path}: refused: " in capsys.readouterr().err


def test_a_real_report_imports_and_the_nonce_comes_from_the_task(tmp_path: Path) -> None:
    plan = plan_of("cpu", backend="venv")
    env = environment(plan, plan.tasks[0], tmp_path, {"SLURM_JOB_ID": "3"})
    assert fleet_facts(env) == (("plan", plan.id), ("task", "0"), ("nonce", plan.nonce))
    host = host_info(environ=env).to_dict()
    assert host["fleet"] == {"plan": plan.id, "task": "0", "nonce": plan.nonce}
    assert plan_of("cpu").nonce != plan_of("cpu").nonce  # random per plan
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(report(plan, 0)))
    assert main(["evidence", "import", str(path)]) == 0
    assert steps_problem(report(plan, 0)["steps"], "quick") is None
    assert (
        document_problem(
            {
                "report": report(
                    plan, 0, steps=[{"name": "import:torch", "status": "pass", "seconds": 0.1}]
                ),
                "incremental": True,
                "fingerprint": "x",
            }
        )
        is None
    )  # an incremental venv certification: a part
    part = report(plan, 0, steps=[{"name": "import:torch", "status": "pass", "seconds": 0.1}])
    venv_cert = {"schema": "envforge.certificate/3", "report": part}
    assert document_problem({**venv_cert, "incremental": True}) is None  # format 3: a part too
    assert document_problem(venv_cert) is not None  # not incremental: the level's steps


def test_the_hostile_subprocess_plan_hangs_no_more(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "envforge", *plan_args(tmp_path / "p", "--nodes", "100000000")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--nodes 100000000" in done.stderr
