"""The Kubernetes Jobs ``fleet plan --engine k8s`` writes pass strict schema validation
(kubernetes-validate, the API's own OpenAPI schemas, unknown keys refused). No API server
runs here: values the schema does not constrain (an enum's case) are not checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import ValidationError

from envforge.cli import main
from envforge.errors import InvalidInput
from envforge.fleet.planning import load_plan

VERSION = "1.30.0"


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("k8s") / "plan"
    code = main(
        [
            "fleet",
            "plan",
            "--engine",
            "k8s",
            "--recipe",
            "gfx942",
            "--recipe",
            "sm_90",
            "--recipe",
            "cpu",
            "--recipe",
            "gfx1100",
            "--arch-label",
            "envforge.io/gpu-arch",
            "--nodes",
            "2",
            "--registry",
            "127.0.0.1:5000/lab",
            *("--toleration", "amd.com/gpu:NoSchedule"),
            *("--toleration", "pool=gpu:NoExecute"),
            *("--cpu", "500m", "--mem", "8Gi", "--time", "1-02:00:00", "--ttl", "3600"),
            *("--image", f"127.0.0.1:5000/lab/cpu@sha256:{'a' * 64}"),
            *("--pod-group", "109", "--pod-group", "44"),
            "-o",
            str(out),
        ]
    )
    assert code == 0
    found = list(yaml.safe_load_all((Path(out) / "jobs.yaml").read_text()))
    assert [d["kind"] for d in found] == ["ConfigMap", *(["ConfigMap", "Job"] * 4)]
    return found


def _jobs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "Job"]


def test_pods_carry_the_site_settings(docs: list[dict[str, Any]]) -> None:
    """Every new field is in the objects the strict validation above reads."""
    for job in _jobs(docs):
        spec = job["spec"]
        assert spec["activeDeadlineSeconds"] == 26 * 3600
        assert spec["ttlSecondsAfterFinished"] == 3600
        pod = spec["template"]["spec"]
        assert pod["tolerations"] == [
            {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoExecute"},
        ]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["supplementalGroups"] == [109, 44]
        box = pod["containers"][0]
        assert box["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert box["resources"]["requests"] == {"cpu": "500m", "memory": "8Gi"}
        assert {"cpu": "500m", "memory": "8Gi"}.items() <= box["resources"]["limits"].items()
        assert box["command"][:2] == ["python3", "/envforge/pod.py"]
        sources = pod["volumes"][0]["projected"]["sources"]
        assert [s["configMap"]["name"] for s in sources] == [
            docs[0]["metadata"]["name"],
            docs[docs.index(job) - 1]["metadata"]["name"],
        ]
    images = {j["metadata"]["labels"]["envforge.io/recipe"]: j for j in _jobs(docs)}
    cpu = images["cpu"]["spec"]["template"]["spec"]["containers"][0]
    assert cpu["image"] == f"127.0.0.1:5000/lab/cpu@sha256:{'a' * 64}"
    assert cpu["imagePullPolicy"] == "IfNotPresent"
    gpu = images["gfx942"]["spec"]["template"]["spec"]["containers"][0]
    assert gpu["image"].startswith("127.0.0.1:5000/lab/gfx942:")  # as publish pushes it
    assert gpu["imagePullPolicy"] == "Always"


def test_a_plan_of_1000_tasks_stays_under_the_last_applied_annotation(tmp_path: Path) -> None:
    """Client-side ``kubectl apply`` stores each object whole in an annotation of at most
    256 KiB: no object of a 1000-task plan comes near it (one spec per Job)."""
    archs = ["gfx90a", "gfx942", "gfx1100", "gfx908", "gfx1030"]
    archs += ["sm_90", "sm_80", "sm_89", "sm_70", "sm_86"]
    argv = ["fleet", "plan", "--engine", "k8s", "--recipe", "cpu", "--nodes", "100"]
    argv += [x for a in archs for x in ("--arch", a)]
    argv += ["--arch-label", "envforge.io/gpu-arch", "-o", str(tmp_path / "p")]
    assert main(argv) == 0
    found = list(yaml.safe_load_all((tmp_path / "p" / "jobs.yaml").read_text()))
    assert sum(j["spec"]["completions"] for j in _jobs(found)) == 1000
    largest = max(len(json.dumps(d, separators=(",", ":"))) for d in found)
    assert largest < 128 * 1024  # half the annotation's limit
    for doc in found:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_every_manifest_passes_strict_validation(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_check_refuses_a_misspelt_key(docs: list[dict[str, Any]]) -> None:
    """The validation above can fail: a Job with ``nodeSelecter`` is refused."""
    job = copy.deepcopy(docs[2])
    pod = job["spec"]["template"]["spec"]
    pod["nodeSelecter"] = pod.pop("nodeSelector")
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(job, VERSION, strict=True)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--toleration", "gpu"),  # no effect
        ("--toleration", "gpu=x:Sometimes"),
        ("--toleration", "bad key!:NoSchedule"),
        ("--cpu", "two"),
        ("--mem", "16 GB"),
        ("--image", "127.0.0.1:5000/lab/cpu:tag"),  # no digest
        ("--image", "127.0.0.1:5000/lab/cpu@sha256:abc"),
        ("--ttl", "-1"),
        ("--time", "soon"),
    ],
)
def test_pod_settings_the_api_would_not_take_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    argv = ["fleet", "plan", "--engine", "k8s", "--recipe", "cpu", option, value]
    assert main([*argv, "-o", str(tmp_path / "p")]) == 2
    assert option in capsys.readouterr().err
    assert not (tmp_path / "p" / "plan.json").exists()


def test_a_plan_json_with_a_hostile_pod_setting_is_refused(tmp_path: Path) -> None:
    assert main(["fleet", "plan", "--engine", "k8s", "--recipe", "cpu", "-o", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "plan.json").read_text())
    data["site"]["tolerations"] = ["x:NoSchedule\n  privileged: true"]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(InvalidInput) as refused:
        load_plan(tmp_path)
    assert "site.tolerations" in refused.value.message
