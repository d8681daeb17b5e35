"""The Kubernetes Jobs ``fleet plan --engine k8s`` writes pass strict schema validation
(kubernetes-validate, the API's own OpenAPI schemas, unknown keys refused). No API server
runs here: values the schema does not constrain (an enum's case) are not checked."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import ValidationError

from envforge.cli import main

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
            "-o",
            str(out),
        ]
    )
    assert code == 0
    found = list(yaml.safe_load_all((Path(out) / "jobs.yaml").read_text()))
    assert [d["kind"] for d in found] == ["ConfigMap", "Job", "Job", "Job", "Job"]
    return found


def test_every_manifest_passes_strict_validation(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_check_refuses_a_misspelt_key(docs: list[dict[str, Any]]) -> None:
    """The validation above can fail: a Job with ``nodeSelecter`` is refused."""
    job = copy.deepcopy(docs[1])
    pod = job["spec"]["template"]["spec"]
    pod["nodeSelecter"] = pod.pop("nodeSelector")
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(job, VERSION, strict=True)
