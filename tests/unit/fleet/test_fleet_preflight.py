"""Preflight (envforge/fleet/preflight.py): the Slurm Prolog/Epilog script that drains a
failing node, the Kubernetes init container that stops a failing pod, and the reason.

The Slurm script runs here under bash with a stand-in node check and a stand-in
``scontrol`` that records its arguments (no slurmd runs a prolog here); the Kubernetes
objects pass strict kubernetes-validate, and the init container's script runs here on
the ConfigMap's own files with this interpreter as the image's.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from envforge.cli import main
from envforge.fleet.preflight import (
    MANIFEST,
    REASON_MAX,
    SCRIPT,
    TAINT,
    Preflight,
    drain_reason,
    slurm_files,
)
from envforge.probe.report import ProbeReport, ReportHost, StepResult
from envforge.probe.spec import ProbeSpec

VERSION = "1.30.0"


def _report(*steps: tuple[str, str, str]) -> ProbeReport:
    return ProbeReport(
        steps=tuple(StepResult(n, s, 0.1, d) for n, s, d in steps),  # type: ignore[arg-type]
        level="quick",
        target="t",
        host=ReportHost(kernel="Linux", machine="x86_64"),
        envforge_version="0",
        created="2026-11-28T00:00:00Z",
    )


def test_the_reason_names_the_first_failing_step() -> None:
    assert drain_reason(_report(("device", "pass", "1 x H200"), ("health", "warn", "x"))) is None
    failed = _report(
        ("device", "pass", ""),
        ("matmul", "fail", 'max rel error 3.2 "too\nhigh"'),
        ("transfer-back", "skip", "skipped"),
    )
    assert drain_reason(failed) == "envforge: matmul: max rel error 3.2 'too high'"
    hung = _report(("matmul", "hang", "no result within the 60s deadline"))
    assert drain_reason(hung) == "envforge: matmul: hang: no result within the 60s deadline"
    long = drain_reason(_report(("health", "fail", "GPU 0: " + "x" * 500)))
    assert long is not None
    assert len(long) == REASON_MAX
    assert long.endswith("...")


# --------------------------------------------------------------------------- Slurm


def _exe(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _script(tmp_path: Path, check: str, limit: int | None = None) -> Path:
    """The rendered script, its node check a stand-in running ``check``."""
    fake = _exe(tmp_path / "envforge", check)
    pre = Preflight(recipe="sm_90", python=None, envforge=(str(fake),), reports=str(tmp_path / "r"))
    text = slurm_files(pre, ProbeSpec(level="quick"), limit)[SCRIPT]
    return _exe(tmp_path / SCRIPT, text.partition("\n")[2])


def _prolog(tmp_path: Path, script: Path, context: str = "prolog_slurmd") -> tuple[int, list[str]]:
    """Run the script as slurmd would; (exit status, scontrol's arguments or [])."""
    calls = tmp_path / "scontrol.args"
    _exe(tmp_path / "scontrol", f'printf "%s\\n" "$@" > {calls}')
    env = {
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "SLURMD_NODENAME": "gpu7",
        "SLURM_JOB_ID": "42",
        "SLURM_SCRIPT_CONTEXT": context,
        "SLURM_JOB_GPUS": "1",
    }
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, timeout=60, check=False
    )
    args = calls.read_text().splitlines() if calls.exists() else []
    return done.returncode, args


def test_a_passing_check_drains_nothing(tmp_path: Path) -> None:
    script = _script(tmp_path, 'echo "$@" > "$(dirname "$0")/argv"; exit 0')
    assert _prolog(tmp_path, script) == (0, [])
    argv = (tmp_path / "argv").read_text().split()
    assert argv[:4] == ["fleet", "node-check", "--recipe", "sm_90"]
    assert argv[-2:] == ["--report", f"{tmp_path}/r/42-prolog_slurmd"]


def test_a_failing_check_drains_the_node_with_its_reason(tmp_path: Path) -> None:
    script = _script(tmp_path, "echo 'envforge: matmul: max rel error 3.2'; exit 1")
    code, args = _prolog(tmp_path, script)
    assert code == 1  # the prolog fails: Slurm requeues the job
    assert args == [
        "update",
        "nodename=gpu7",
        "state=drain",
        "reason=envforge: matmul: max rel error 3.2",
    ]
    code, args = _prolog(tmp_path, script, "epilog_slurmd")
    assert code == 0  # the job is over; the node is drained all the same
    assert args[-1] == "reason=envforge: matmul: max rel error 3.2"


def test_a_hung_check_drains_at_the_limit(tmp_path: Path) -> None:
    script = _script(tmp_path, f"exec {shutil.which('sleep')} 30", limit=1)
    code, args = _prolog(tmp_path, script)
    assert code == 1
    assert args[-1] == "reason=envforge: preflight: no result within 1s"


def test_envforge_not_running_is_not_the_nodes_fault(tmp_path: Path) -> None:
    script = _script(tmp_path, "echo 'usage: ...' >&2; exit 2")
    assert _prolog(tmp_path, script) == (0, [])


def test_the_script_is_valid_bash() -> None:
    pre = Preflight(
        recipe="sm_90",
        python="/opt/env/bin/python",
        envforge=("/usr/bin/python3", "-m", "envforge"),
    )
    text = slurm_files(pre, ProbeSpec(level="quick"))[SCRIPT]
    assert subprocess.run(["bash", "-n"], input=text.encode(), check=False).returncode == 0
    assert "--python /opt/env/bin/python" in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_script_is_shellcheck_clean(tmp_path: Path) -> None:
    pre = Preflight(recipe="sm_90", python=None, envforge=("/usr/bin/python3", "-m", "envforge"))
    path = tmp_path / SCRIPT
    path.write_text(slurm_files(pre, ProbeSpec(level="quick"))[SCRIPT])
    done = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def test_the_command_writes_the_script(tmp_path: Path) -> None:
    out = tmp_path / "pre"
    assert main(["fleet", "preflight", "--engine", "slurm", "--recipe", "cpu", "-o", str(out)]) == 0
    path = out / SCRIPT
    assert path.stat().st_mode & stat.S_IXUSR
    assert "fleet node-check --recipe cpu --step-timeout" in path.read_text()
    assert "--collective" not in path.read_text()
    argv = ["fleet", "preflight", "--engine", "slurm", "--recipe", "cpu", "--collective"]
    assert main([*argv, "--require-healthy", "-o", str(out / "more")]) == 0
    assert "--require-healthy --collective --report" in (out / "more" / SCRIPT).read_text()


# --------------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module")
def k8s(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("pre")
    argv = ["fleet", "preflight", "--engine", "kubernetes", "--recipe", "sm_90", "-o", str(out)]
    assert main([*argv, "--image", "127.0.0.1:5000/lab/sm_90@sha256:" + "a" * 64]) == 0
    return list(yaml.safe_load_all((out / MANIFEST).read_text()))


def test_the_manifests_pass_strict_validation(k8s: list[dict[str, Any]]) -> None:
    assert [d["kind"] for d in k8s] == ["ConfigMap", "Job"]
    for doc in k8s:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_init_container_runs_the_quick_spec_in_the_jobs_image(
    k8s: list[dict[str, Any]],
) -> None:
    config, job = k8s
    pod = job["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"].endswith("@sha256:" + "a" * 64)
    assert init["command"][:2] == ["python3", "/envforge/preflight.py"]
    assert init["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert {"name": "ENVFORGE_TAINT", "value": TAINT} in init["env"]
    assert pod["volumes"][0]["configMap"]["name"] == config["metadata"]["name"]
    assert set(config["data"]) == {"worker.py", "pod.py", "preflight.py", "spec.json"}
    spec = json.loads(config["data"]["spec.json"])
    assert spec["level"] == "quick"
    assert "audit" not in spec["steps"]
    assert "health" not in spec["steps"]


_PASS = "print('fine')\n"
_FAIL = "raise AssertionError('GPU 0 gave a wrong sum')\n"


@pytest.mark.parametrize(("source", "code"), [(_PASS, 0), (_FAIL, 1)])
def test_the_init_container_fails_with_the_reason(
    k8s: list[dict[str, Any]], tmp_path: Path, source: str, code: int
) -> None:
    """The ConfigMap's files, run as the init container runs them (this interpreter as
    the image's): a failing step ends it with exit 1 and the reason as its message."""
    data = k8s[0]["data"]
    for name in ("worker.py", "pod.py", "preflight.py"):
        (tmp_path / name).write_text(data[name])
    spec = {
        "vendor": "none",
        "steps": ["check:x"],
        "step_timeout": 30,
        "checks": [{"step": "check:x", "path": None, "source": source}],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    message = tmp_path / "termination-log"
    env = {
        **os.environ,
        "NODE_NAME": "gpu7",
        "ENVFORGE_MESSAGE_FILE": str(message),
        "ENVFORGE_TAINT": TAINT,
    }
    done = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "preflight.py"),
            str(tmp_path / "worker.py"),
            str(tmp_path / "spec.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == code, done.stderr
    if code == 0:
        assert not message.exists()
        return
    reason, taint = message.read_text().splitlines()
    assert reason.startswith("envforge: check:x: AssertionError: GPU 0 gave a wrong sum")
    assert taint == f"to keep pods off this node: kubectl taint nodes gpu7 {TAINT} --overwrite"


def test_the_init_containers_script_keeps_to_python_37(k8s: list[dict[str, Any]]) -> None:
    """It runs in the image under test, as the worker and the pod wrapper do."""
    ast.parse(k8s[0]["data"]["preflight.py"], feature_version=(3, 7))
    with pytest.raises(SyntaxError):  # the check can fail: walrus is 3.8+
        ast.parse("if (x := 1):\n    pass\n", feature_version=(3, 7))


# --------------------------------------------------------------------------- node-check


@pytest.mark.needs_torch
def test_node_check_passes_silently_with_the_health_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report"
    assert main(["fleet", "node-check", "--recipe", "cpu", "--report", str(report)]) == 0
    assert capsys.readouterr().out == ""
    steps = [s["name"] for s in json.loads((report / "probe.json").read_text())["steps"]]
    assert steps[-1] == "health"
    assert "audit" not in steps


def test_node_check_prints_the_reason_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An environment without torch: exit 1, and the one line the script drains with."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True
    )
    python = str(tmp_path / "env" / "bin" / "python")
    assert main(["fleet", "node-check", "--recipe", "cpu", "--python", python]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("envforge: env-snapshot: torch not importable")
