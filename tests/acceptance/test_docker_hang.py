"""A recipe whose extra check hangs: exit 1, no certified tag, no container left."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image

from .helpers import (
    BUILD_TIMEOUT,
    FIXTURES,
    ROOT,
    Built,
    Envforge,
    all_containers,
    build_args,
    parse_json,
)

pytestmark = pytest.mark.engine

STEP_TIMEOUT = 8
#: What the run adds around the hung step: envforge's own start, the probe container's
#: start and removal, the tag. The step itself is held to its deadline (+1.5 s) below;
#: this bound only tells a stopped hang from one left running until the build timeout, and
#: leaves room for a CI machine whose two cores are busy (13.2 s seen there with 5.0).
SLACK = 15.0


def _hang_recipe(folder: Path) -> Path:
    """The shipped cpu recipe, renamed, with an extra check that never returns."""
    data = yaml.safe_load((ROOT / "recipes" / "cpu.yaml").read_text(encoding="utf-8"))
    data["name"] = "hangcheck"
    data["description"] = "test fixture: the cpu stack with an extra check that hangs"
    data["certify"] = {
        "level": "quick",
        "step_timeout": STEP_TIMEOUT,
        "extra_checks": [str(FIXTURES / "hang_forever.py")],
    }
    path = folder / "hangcheck.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_hanging_check_fails_within_deadline_and_leaves_nothing(  # noqa: PLR0917
    client: EngineClient,
    sdk: docker.DockerClient,
    built_cpu: Built,  # warms the layer cache: only the labels differ
    envforge: Envforge,
    standin: str,
    wheelhouse: Path,
    ca_bundle: Path,
    tmp_path: Path,
) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    _hang_recipe(recipes)
    before = all_containers()
    started = time.monotonic()
    done = envforge(
        *build_args("hangcheck", standin, wheelhouse, ca_bundle, "--json"),
        timeout=BUILD_TIMEOUT,
        extra_env={"ENVFORGE_RECIPE_PATH": str(recipes)},
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    assert "check:hang_forever.py" in done.stderr
    assert "Traceback" not in done.stderr
    data = parse_json(done)
    assert data["certified"] is False
    assert data["status"] == "fail"
    assert data["failing_step"].startswith("check:hang_forever.py (hang")
    # No certified tag for this recipe, and no container left behind.
    tags = [t for img in sdk.images.list() for t in img.tags]
    assert not [t for t in tags if t.startswith("envforge/hangcheck:")]
    assert all_containers() == before
    # Within the step deadline plus a few seconds: the wall time minus the build and
    # the steps that ran before the hang.
    cert = inspect_image(client, data["candidate"])
    assert cert is not None
    report_steps = _steps(envforge, data["certificate"])
    before_hang = sum(s["seconds"] for s in report_steps if s["status"] == "pass")
    hang = next(s for s in report_steps if s["status"] == "hang")
    assert hang["seconds"] <= STEP_TIMEOUT + 1.5
    overhead = elapsed - data["build_seconds"] - before_hang
    assert overhead <= STEP_TIMEOUT + SLACK, overhead


def _steps(envforge: Envforge, digest: str) -> list[dict[str, Any]]:

    path = envforge.home / "certificates" / (digest.split(":")[1] + ".json")
    data = json.loads(path.read_text())
    steps = data["report"]["steps"]
    assert isinstance(steps, list)
    return steps
