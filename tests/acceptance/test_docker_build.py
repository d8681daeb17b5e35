"""``envforge build cpu`` on the real engine: build, certify in the image, tag."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import docker
import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image
from envforge.core.paths import certificates_dir

from .helpers import (
    BUILD_TIMEOUT,
    Built,
    Envforge,
    build_args,
    cert_label,
    docker_cli,
    parse_json,
)

pytestmark = pytest.mark.engine

CPU_REF_PREFIX = "envforge/cpu:"
FULL_STEPS = {"conv2d", "autocast", "grad-checkpoint", "matmul", "device"}


def test_build_certifies_with_the_full_probe_and_tags(
    client: EngineClient, built_cpu: Built, envforge_home: Path
) -> None:
    data = built_cpu.data
    assert data["certified"] is True
    (ref, *_) = data["tags"]
    assert ref.startswith(CPU_REF_PREFIX)
    assert ref == "envforge/cpu:torch2.13.0-cpu-py3.11"
    info = inspect_image(client, ref)
    assert info is not None
    cert = cert_label(client, ref)
    assert cert["status"] == "pass"
    # (`envforge certify` may have relabelled the tag since; the build's own is by ID.)
    built = cert_label(client, data["image"])
    assert built["digest"] == data["certificate"]
    assert cert["report"]["level"] == "full"
    steps = {s["name"]: s["status"] for s in cert["report"]["steps"]}
    assert set(steps) >= FULL_STEPS
    assert set(steps.values()) == {"pass"}
    # Bound to the content: the certified image has the candidate's layers exactly.
    candidate = inspect_image(client, data["candidate"])
    assert candidate is not None
    assert cert["binding"]["layers"] == list(info.layers) == list(candidate.layers)
    # Stored locally, and reports written.
    stored = certificates_dir({"ENVFORGE_HOME": str(envforge_home)})
    assert (stored / (cert["digest"].split(":")[1] + ".json")).is_file()
    for name in ("probe.json", "probe.junit.xml", "certificate.json"):
        assert (built_cpu.report_dir / name).is_file()
    report = json.loads((built_cpu.report_dir / "probe.json").read_text())
    assert report["status"] == "pass"


def test_final_image_has_no_wheels_ca_bundle_or_pip_cache(
    client: EngineClient, sdk: docker.DockerClient, built_cpu_each: Built, standin: str
) -> None:
    """Every layer envforge added to the base, listed from ``docker save`` (both builders)."""
    ref = built_cpu_each.data["tags"][0]
    base = inspect_image(client, standin)
    assert base is not None
    image = sdk.images.get(ref)
    offending: list[str] = []
    with tempfile.TemporaryFile() as fh:
        for chunk in image.save(named=False):
            fh.write(chunk)
        fh.seek(0)
        with tarfile.open(fileobj=fh, mode="r:") as outer:
            manifest_file = outer.extractfile("manifest.json")
            assert manifest_file is not None
            (manifest,) = json.loads(manifest_file.read())
            config_file = outer.extractfile(manifest["Config"])
            assert config_file is not None
            diff_ids = json.loads(config_file.read())["rootfs"]["diff_ids"]
            assert diff_ids[: len(base.layers)] == list(base.layers)
            added = manifest["Layers"][len(base.layers) :]
            assert added, "envforge added no layer to the base image"
            for path in added:
                layer = outer.extractfile(path)
                assert layer is not None
                with tarfile.open(fileobj=io.BytesIO(layer.read()), mode="r:") as inner:
                    names = inner.getnames()
                    offending += [f"{path}: {name}" for name in names if _forbidden(name)]
    assert offending == []


def _forbidden(name: str) -> bool:
    lowered = "/" + name.lower().lstrip("./")
    return (
        lowered.endswith(".whl")
        or "/wheelhouse" in lowered
        or lowered.endswith("ca-bundle.pem")
        or "/.cache/pip" in lowered
        or "/root/.cache" in lowered
        or "/.cache/uv" in lowered
        or "envforge-uv" in lowered
    )


def test_torch_imports_with_plain_docker_run(built_cpu: Built) -> None:
    ref = built_cpu.data["tags"][0]
    done = docker_cli(
        "run",
        "--rm",
        "--network",
        "none",
        ref,
        "python",
        "-c",
        "import torch, sys; print(torch.__version__, sys.executable)",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2.13.0")


def test_second_build_reuses_every_layer(
    built_cpu: Built, envforge: Envforge, standin: str, wheelhouse: Path, ca_bundle: Path
) -> None:
    again = envforge(
        *build_args("cpu", standin, wheelhouse, ca_bundle, "--no-certify", "--json"),
        timeout=BUILD_TIMEOUT,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    data = parse_json(again)
    assert data["steps_rebuilt"] == 0
    assert data["candidate"] == built_cpu.data["candidate"]
