"""A rendered devcontainer.json runs on the real engine as the devcontainer CLI would run it.

The document's runArgs, mounts (``${localEnv:USER}`` substituted), containerEnv and
workspaceMount become one ``docker run`` against the certified cpu image; the caches and
the workspace must be where ``envforge shell`` puts them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .helpers import Built, Envforge, all_containers, docker_cli

pytestmark = pytest.mark.engine


def test_rendered_devcontainer_runs_on_the_engine(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = envforge("render", "cpu", "--format", "devcontainer", "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "cpu" / ".devcontainer" / "devcontainer.json").read_text())
    assert doc["image"] == built_cpu.data["tags"][0]

    user = os.environ.get("USER") or "root"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    argv = ["run", "--rm", "--name", "envforge-test-devcontainer", *doc["runArgs"]]
    volumes = []
    for mount in doc["mounts"]:
        source = mount["source"].replace("${localEnv:USER}", user)
        volumes.append(source)
        argv += ["--mount", f"type={mount['type']},source={source},target={mount['target']}"]
    for key, value in doc["containerEnv"].items():
        argv += ["--env", f"{key}={value}"]
    argv += ["--mount", doc["workspaceMount"].replace("${localWorkspaceFolder}", str(workspace))]
    argv += ["--workdir", doc["workspaceFolder"], doc["image"]]
    script = " && ".join(
        [
            " ".join(doc["postCreateCommand"]),
            'touch "$MIOPEN_USER_DB_PATH/ok" "$TRITON_CACHE_DIR/ok" "$TORCHINDUCTOR_CACHE_DIR/ok"',
            "python -c 'import torch; print(torch.__version__)' > made.txt",
        ]
    )
    before = all_containers()
    try:
        ran = docker_cli(*argv, "sh", "-c", script)
        assert ran.returncode == 0, ran.stderr
        assert (workspace / "made.txt").read_text().startswith("2.13.0")
    finally:
        docker_cli("rm", "-f", "envforge-test-devcontainer")
        for volume in volumes:
            docker_cli("volume", "rm", "-f", volume)
    assert all_containers() == before
