"""``fleet plan -> submit -> status -> collect`` on a real one-node Slurm cluster.

Nothing is mocked: munged, slurmctld and slurmd from Debian's archive run on loopback
(``bash scripts/ci-slurm.sh up``; two fake GPUs, features amd,gfx942,rocm). Two recipes on
the venv backend with the torch wheel of ``PIP_FIND_LINKS``: ``cpu``, which passes, and a
copy of it with a check that fails. Each array task builds and probes (quick) its venv in
an ENVFORGE_HOME of its own. With ``ENVFORGE_REQUIRE_ENGINE=1`` (CI) a cluster that is not
up fails the test; otherwise it is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envforge.evidence import evidence_db
from tests.helpers.fleet_args import plan_args

from .helpers import unavailable

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("ENVFORGE_SLURM_STATE", "/tmp/envforge-ci-slurm"))
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    conf = os.environ.get("SLURM_CONF") or str(STATE / "slurm.conf")
    if shutil.which("sbatch") is None or not Path(conf).is_file():
        unavailable(f"no Slurm cluster ({conf} missing; run: bash scripts/ci-slurm.sh up)")
    if not any(WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl")):
        unavailable(f"no torch 2.13.0+cpu cp311 wheel in {WHEELS} (PIP_FIND_LINKS)")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    environ.update(
        SLURM_CONF=conf,
        UV_HTTP_RETRIES="0",
        ENVFORGE_HOME=str(tmp_path_factory.mktemp("collector-home")),
    )
    ping = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%T"], env=environ, capture_output=True, text=True, check=False
    )
    if ping.returncode != 0 or ping.stdout.strip() not in ("idle", "mixed", "allocated"):
        unavailable(f"the Slurm node is not up: {ping.stdout.strip()} {ping.stderr.strip()}")
    return environ


def envforge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def failing_recipe(folder: Path) -> Path:
    check = folder / "fails.py"
    check.write_text("raise SystemExit('this node is not good enough')\n")
    text = (ROOT / "recipes" / "cpu.yaml").read_text()
    text = text.replace("name: cpu\n", "name: cpu-fails\n", 1)
    text = text.replace("certify:\n", f"certify:\n  extra_checks: [{check}]\n", 1)
    path = folder / "cpu-fails.yaml"
    path.write_text(text)
    return path


def test_plan_submit_status_collect_with_a_passing_and_a_failing_recipe(
    env: dict[str, str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan"
    planned = envforge(
        "fleet",
        "plan",
        "--engine",
        "slurm",
        "--recipe",
        "cpu",
        "--recipe",
        str(failing_recipe(tmp_path)),
        "--arch",
        "gfx942",
        "--backend",
        "venv",
        "--wheelhouse",
        str(WHEELS),
        "--level",
        "quick",
        "-o",
        str(plan),
        env=env,
    )
    assert planned.returncode == 0, planned.stderr
    script = (plan / "certify-gfx942-gpu1.sbatch").read_text()
    assert "#SBATCH --gres=gpu:1" in script
    assert "#SBATCH --constraint=gfx942" in script

    submitted = envforge("fleet", "submit", str(plan), "--json", env=env)
    assert submitted.returncode == 0, submitted.stderr
    assert len(json.loads(submitted.stdout)["jobs"]) == 1

    status = envforge("fleet", "status", str(plan), "--wait", "--timeout", "500", "--json", env=env)
    assert status.returncode == 1, status.stderr  # one failed
    tasks = {t["task"]: t for t in json.loads(status.stdout)["tasks"]}
    assert tasks[0]["state"] == "passed", tasks[0]
    assert tasks[1]["state"] == "failed"
    assert "check:fails.py fail" in tasks[1]["detail"]
    node = socket.gethostname().split(".")[0]
    for index in (0, 1):
        assert tasks[index]["node"] == node
        assert tasks[index]["gpus"] in ("0", "1")  # one of the two fake GRES devices
        record = json.loads((plan / f"runs/001/reports/{index:03d}/task.json").read_text())
        assert record["granted"]["variable"] == "SLURM_JOB_GPUS"
        host = json.loads((plan / f"runs/001/reports/{index:03d}/probe.json").read_text())
        host = host["host"]
        assert host["node"] == node  # the report itself says where it ran, and on what
        assert host["granted"]["SLURM_JOB_GPUS"] == tasks[index]["gpus"]
    log = "".join(p.read_text() for p in (plan / "runs" / "001" / "logs").iterdir())
    assert "the scheduler granted GPU" in log
    assert "not used, the recipe needs none" in log

    site = tmp_path / "site"
    collected = envforge("fleet", "collect", str(plan), "-o", str(site), "--json", env=env)
    assert collected.returncode == 1, collected.stderr
    summary = json.loads(collected.stdout)
    assert summary["added"] == 2
    matrix = json.loads((site / "matrix.json").read_text())
    assert sorted(c["column"] for c in matrix["cells"]) == ["cpu", "cpu-fails"]
    again = envforge("fleet", "collect", str(plan), "--json", env=env)
    assert json.loads(again.stdout)["added"] == 0  # idempotent
    with evidence_db.connect(Path(env["ENVFORGE_HOME"]) / "evidence.sqlite") as conn:
        assert len(evidence_db.documents(conn)) == 2
    shown = envforge("show", "cpu", env=env)
    assert "Evidence: certified on CPU only, 1 host" in shown.stdout


def test_hostile_values_are_refused_before_sbatch_and_a_forged_report_is_not_counted(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 27: a line break in --partition or a command in --feature never reaches
    sbatch (nor does one put into plan.json by hand); a hand-written probe.json in a real
    plan's task folder is refused by collect, not counted and not imported."""
    for option in (
        ["--partition", "debug\n#SBATCH --wrap=touch /tmp/pwned"],
        ["--arch", "gfx942", "--feature", "gfx942=gfx942;touch /tmp/pwned"],
    ):
        out = tmp_path / f"refused{len(option)}"
        refused = envforge(
            "fleet",
            "plan",
            "--engine",
            "slurm",
            "--recipe",
            "cpu",
            "--backend",
            "venv",
            *option,
            "-o",
            str(out),
            env=env,
        )
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1
        assert option[-2] in refused.stderr
        assert not out.exists()

    plan = tmp_path / "plan"
    planned = envforge(
        "fleet",
        "plan",
        "--engine",
        "slurm",
        "--recipe",
        "cpu",
        "--arch",
        "gfx942",
        "--backend",
        "venv",
        "--level",
        "quick",
        "-o",
        str(plan),
        env=env,
    )
    assert planned.returncode == 0, planned.stderr
    data = json.loads((plan / "plan.json").read_text())
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    data_bad = json.loads(json.dumps(data))
    data_bad["site"]["partition"] = "debug\n#SBATCH --wrap=touch /tmp/pwned"
    (tampered / "plan.json").write_text(json.dumps(data_bad))
    shutil.copy(plan / "certify-gfx942-gpu1.sbatch", tampered)
    submitted = envforge("fleet", "submit", str(tampered), env=env)
    assert submitted.returncode == 2, submitted.stderr
    assert "key 'site.partition'" in submitted.stderr
    assert not (tampered / "runs").exists()  # sbatch never ran

    task = data["tasks"][0]
    forged = {
        "schema": "envforge.probe/1",
        "status": "pass",
        "level": "quick",
        "steps": [{"name": "device", "status": "pass", "seconds": 0.1, "detail": ""}],
        "recipe": {"name": task["recipe"], "hash": task["recipe_hash"]},
        "environment": {"target": "python", "snapshot": {"torch": "2.13.0+cpu"}},
        "host": {
            "kernel": "Linux",
            "machine": "x86_64",
            "driver": None,
            "gpus": [{"name": "AMD Radeon RX 7900 XTX", "arch": "gfx1100", "vendor": "amd"}],
        },
        "envforge_version": "0.1.0",
        "created": "2026-01-01T00:00:00Z",
        "seconds": 0.1,
    }
    reports = plan / "reports" / "000"
    reports.mkdir(parents=True)
    (reports / "probe.json").write_text(json.dumps(forged))
    (reports / "task.json").write_text(json.dumps({"exit": 0, "node": "x"}))
    collected = envforge("fleet", "collect", str(plan), "--json", env=env)
    assert collected.returncode == 1, collected.stderr
    summary = json.loads(collected.stdout)
    assert summary["added"] == 0
    assert summary["tasks"][0]["state"] == "refused"
    assert "not those of a quick probe run" in summary["tasks"][0]["detail"]
    shown = envforge("show", "cpu", env=env)
    assert "RX 7900 XTX" not in shown.stdout


def _plan_cpu(env: dict[str, str], out: Path, *extra: str) -> None:
    options = ("--backend", "venv", "--wheelhouse", str(WHEELS), "--level", "quick", *extra)
    planned = envforge(*plan_args(out, *options), env=env)
    assert planned.returncode == 0, planned.stderr


def _task(env: dict[str, str], out: Path, *extra: str) -> dict[str, object]:
    shown = envforge("fleet", "status", str(out), "--json", *extra, env=env)
    task: dict[str, object] = json.loads(shown.stdout)["tasks"][0]
    return task


def test_slurm_states_blocked_cancelled_and_a_feature_no_node_has(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 33 §2 on the real cluster: a task over the partition's MaxTime is blocked
    (--wait ends at once, exit 4, PartitionTimeLimit named); scancel-ed, it is failed and
    CANCELLED; a feature no node has is sbatch's refusal (exit 4), the run records no job."""
    over = tmp_path / "over"
    _plan_cpu(env, over, "--time", "01:00:00")  # the partition's MaxTime is 30 minutes
    assert envforge("fleet", "submit", str(over), env=env).returncode == 0
    waited = envforge("fleet", "status", str(over), "--wait", env=env)  # no --timeout
    assert waited.returncode == 4, waited.stderr
    assert "PartitionTimeLimit" in waited.stderr
    assert "blocked" in waited.stdout
    job = json.loads((over / "runs" / "001" / "run.json").read_text())["jobs"][0]
    subprocess.run(["scancel", job], env=env, check=True)
    task = _task(env, over)
    assert task["state"] == "failed"
    assert str(task["detail"]).startswith("CANCELLED")
    assert task["slurm"]["source"] in ("sacct", "scontrol")  # type: ignore[index]

    nowhere = tmp_path / "nowhere"
    _plan_cpu(env, nowhere, "--arch", "gfx942", "--feature", "gfx942=gfx90a")
    refused = envforge("fleet", "submit", str(nowhere), env=env)
    assert refused.returncode == 4, refused.stderr
    assert "sbatch certify-gfx942-gpu1.sbatch" in refused.stderr
    assert json.loads((nowhere / "runs" / "001" / "run.json").read_text())["jobs"] == []


def test_a_second_submit_is_a_new_run_that_probes_again(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 33 §3: a finished plan submitted again probes again in run 2 (its own home,
    reports and logs); status speaks of the newest run unless --run N."""
    plan = tmp_path / "again"
    _plan_cpu(env, plan)
    for number in (1, 2):
        assert envforge("fleet", "submit", str(plan), env=env).returncode == 0
        waited = envforge("fleet", "status", str(plan), "--wait", "--timeout", "500", env=env)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        report = plan / "runs" / f"{number:03d}" / "reports" / "000" / "probe.json"
        assert json.loads(report.read_text())["status"] == "pass"  # probed in this run
    assert _task(env, plan, "--run", "1")["state"] == "passed"
    collected = envforge("fleet", "collect", str(plan), "--json", env=env)
    assert json.loads(collected.stdout)["run"] == 2


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def test_every_node_pins_a_task_to_the_node_with_all_its_gpus(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 33 §1: --every-node lists the cluster's one node (sinfo), pins a task to it
    (--nodelist) with both fake GPUs (--gpus all, --exclusive); task.json names the node
    and the GPUs as the job saw them."""
    plan = tmp_path / "every"
    node = socket.gethostname().split(".")[0]
    _plan_cpu(env, plan, "--arch", "gfx942", "--every-node", "--partition", "gpu",
              "--gpus", "all")  # fmt: skip
    script = (plan / f"certify-gfx942-gpu2-{node}.sbatch").read_text()
    assert f"#SBATCH --nodelist={node}\n" in script
    assert "#SBATCH --exclusive\n" in script
    assert "#SBATCH --gres=gpu:2\n" in script
    assert envforge("fleet", "submit", str(plan), env=env).returncode == 0
    waited = envforge("fleet", "status", str(plan), "--wait", "--timeout", "500", env=env)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    task = _task(env, plan)
    assert (task["state"], task["node"], task["pinned"]) == ("passed", node, node)
    seen = task["seen"]
    assert isinstance(seen, dict)
    assert seen["node"] == node
    assert seen["node_indexes"] == "0,1"  # both GRES devices, as the node numbers them
    assert len(str(seen.get("job", "0,1")).split(",")) == 2


def test_workdir_keeps_the_build_off_the_plan_folder_and_clean_keeps_reports(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 33 §4: the task builds under --workdir (node-local here: the one node is this
    machine) with a shared uv cache, removes it when it ends, and leaves only its report,
    task.json and log in the plan folder (at most 20 MB); fleet clean keeps the reports."""
    plan, work, cache = tmp_path / "local", tmp_path / "node-local", tmp_path / "uv-cache"
    work.mkdir()
    _plan_cpu(env, plan, "--workdir", str(work), "--cache-dir", str(cache))
    assert envforge("fleet", "submit", str(plan), env=env).returncode == 0
    waited = envforge("fleet", "status", str(plan), "--wait", "--timeout", "500", env=env)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    run = plan / "runs" / "001"
    record = json.loads((run / "reports" / "000" / "task.json").read_text())
    assert record["workdir"].startswith(str(work) + "/")
    assert list(work.iterdir()) == []  # removed when the task ended
    assert not (run / "homes").exists()
    assert _folder_bytes(plan) < 20 * 1024 * 1024, _folder_bytes(plan)
    cleaned = envforge("fleet", "clean", str(plan), "--keep", "0", "--json", env=env)
    assert cleaned.returncode == 0, cleaned.stderr
    assert (run / "reports" / "000" / "probe.json").is_file()
    assert (run / "reports" / "000" / "certified.json").is_file()  # the venv's certificate
    assert not (run / "logs").exists()  # an older run than the newest 0 keeps its reports
