"""Helpers for the acceptance tests (the fixtures are in conftest.py): where things are,
running the real ``envforge`` CLI and the docker CLI, parsing what they print.

Nothing here is mocked.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image
from envforge.container.refs import CERTIFICATE_LABEL
from envforge.core.proc import Completed, run
from envforge.publish import referrers as rf

ROOT = Path(__file__).resolve().parents[2]


FIXTURES = Path(__file__).resolve().parent / "fixtures"


STATE = Path(os.environ.get("ENVFORGE_CI_STATE", "/tmp/envforge-ci-engine"))


DEFAULT_STANDIN = "envforge-standin/debian:bookworm-python3"


_TEST_LABELS = {"io.envforge.test": "1"}


#: Seconds one envforge build may take in these tests (a cold cpu build is ~2-4 minutes).
BUILD_TIMEOUT = 1200


def _ci_env() -> dict[str, str]:
    """``export K=V`` lines written by ci-engine.sh up (empty when it did not run)."""
    found: dict[str, str] = {}
    try:
        text = (STATE / "env").read_text(encoding="utf-8")
    except OSError:
        return found
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            found[key] = value
    return found


def setting(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or _ci_env().get(name) or default


def required() -> bool:
    return os.environ.get("ENVFORGE_REQUIRE_ENGINE") == "1"


def unavailable(reason: str) -> None:
    """Fail (CI: ENVFORGE_REQUIRE_ENGINE=1) or skip when the engine setup is missing."""
    if required():
        pytest.fail(f"ENVFORGE_REQUIRE_ENGINE=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Envforge:
    """Runs the real ``envforge`` CLI in a child process with the session's home."""

    home: Path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["ENVFORGE_HOME"] = str(self.home)
        env["PYTHONPATH"] = str(ROOT) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        env.update(extra or {})
        return env

    def __call__(
        self,
        *args: str,
        timeout: float = 300,
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Completed:
        return run(
            [sys.executable, "-m", "envforge", *args],
            timeout=timeout,
            env=self.env(extra_env),
            cwd=cwd,
        )


def docker_cli(*args: str, timeout: float = 300) -> Completed:
    """The plain docker CLI, as a user would run it."""
    return run(["docker", *args], timeout=timeout)


def all_containers() -> set[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc"], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def containers_mounting(folder: Path) -> set[str]:
    """The containers (any state) with a bind mount from ``folder`` or below it: those
    ``envforge shell`` made for a command run there (its working folder is mounted). Other
    tests' containers come and go meanwhile (and envforge sweeps those of a killed
    envforge): a test of its own command's leftovers counts only these."""
    ids = all_containers()
    if not ids:
        return set()
    out = subprocess.run(
        ["docker", "inspect", "--format", "{{.Id}}{{range .Mounts}} {{.Source}}{{end}}", *ids],
        capture_output=True,
        text=True,
        check=False,  # a container removed since the listing: the others still print
    ).stdout
    root = str(folder.resolve())
    found = set()
    for line in out.splitlines():
        cid, *sources = line.split(" ")
        if any(src == root or src.startswith(root + "/") for src in sources):
            found.add(cid)
    return found


def build_args(
    recipe: str, standin: str, wheelhouse: Path, ca_bundle: Path, *extra: str
) -> list[str]:
    return [
        "build",
        recipe,
        "--base-image",
        standin,
        "--wheelhouse",
        str(wheelhouse),
        "--ca-bundle",
        str(ca_bundle),
        *extra,
    ]


@dataclass(frozen=True)
class Built:
    completed: Completed
    data: dict[str, Any]
    report_dir: Path


def parse_json(completed: Completed) -> dict[str, Any]:
    try:
        data = json.loads(completed.stdout)
    except ValueError:
        pytest.fail(
            f"envforge printed no JSON (rc {completed.returncode}):\n"
            f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    assert isinstance(data, dict)
    return data


def cert_label(client: EngineClient, ref: str) -> dict[str, Any]:
    info = inspect_image(client, ref)
    assert info is not None, f"no image {ref}"
    label = info.labels.get(CERTIFICATE_LABEL)
    assert label, f"{ref} carries no certificate label"
    data = json.loads(label)
    assert isinstance(data, dict)
    return data


def words(seq: Sequence[str]) -> str:
    return " ".join(shlex.quote(s) for s in seq)


@functools.cache
def short_deadline() -> float:
    """A step deadline short enough to test a hang quickly and long enough for the quick
    level's ``import torch`` on this machine, loaded as it is (CI runs two test runs side by
    side on two cores): 3 s, or three times a fresh ``import torch`` here, in whole seconds."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", "import torch"], check=True, capture_output=True, timeout=300
    )
    return float(max(3, math.ceil(3 * (time.monotonic() - started))))


def certificate_view(venv: Path) -> dict[str, Any]:
    """A certified venv's ``certified.json`` as the venv backend reads it (format 3: its
    digest checked and its binding's fields at the top); fails the test when there is none."""
    from envforge.backends.venv.layout import read_certificate

    view = read_certificate(venv)
    assert view is not None, f"{venv} has no valid certificate"
    return view


def put_oci_image(
    addr: str, repo: str, tag: str, config: dict[str, Any], layers: Sequence[bytes]
) -> str:
    """``config`` (canonical JSON) and ``layers`` uploaded over the registry's HTTP API (no
    engine needed) and an OCI manifest naming them put as ``addr/repo:tag``; its digest."""
    reg = rf._Registry.open(f"{addr}/{repo}:{tag}")
    blob = rf.canonical(config)
    for layer in layers:
        reg.put_blob(layer)
    reg.put_blob(blob)
    manifest = rf.canonical(
        {
            "schemaVersion": 2,
            "mediaType": rf.OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": rf.sha256(blob),
                "size": len(blob),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": rf.sha256(layer),
                    "size": len(layer),
                }
                for layer in layers
            ],
        }
    )
    reg.put_manifest(tag, manifest, rf.OCI_MANIFEST)
    return rf.sha256(manifest)


def push_oci_image(
    addr: str, repo: str, labels: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """A one-layer OCI image as ``addr/repo:v1`` (:func:`put_oci_image`), with ``labels`` (a
    test label when None); returns its manifest digest and its config digest (the image ID)."""
    layer = b"not really a tarball, the registry does not look"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [rf.sha256(layer)]},
        "config": {"Labels": dict(labels if labels is not None else _TEST_LABELS)},
    }
    return put_oci_image(addr, repo, "v1", config, [layer]), rf.sha256(rf.canonical(config))
