"""``envforge certify`` on existing images: reports, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image

from .helpers import FIXTURES, Built, Envforge, all_containers, cert_label

pytestmark = pytest.mark.engine


def test_certify_recipe_recertifies_and_writes_reports(
    client: EngineClient, built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    ref = built_cpu.data["tags"][0]
    layers = inspect_image(client, ref)
    assert layers is not None
    report = tmp_path / "report"
    done = envforge("certify", "cpu", "--report", str(report))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("pass  cpu  sha256:")
    for name in ("probe.json", "probe.junit.xml", "certificate.json"):
        assert (report / name).is_file()
    assert "<testsuite" in (report / "probe.junit.xml").read_text()
    stored = json.loads((report / "certificate.json").read_text())
    # The tag now carries the new certificate, on the same content.
    label = cert_label(client, ref)
    assert label["digest"] == stored["digest"]
    assert label["report"]["level"] == "full"
    after = inspect_image(client, ref)
    assert after is not None
    assert after.layers == layers.layers


def test_ctrl_c_during_certification_leaves_no_container(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    hang = FIXTURES / "hang_forever.py"
    before = all_containers()
    argv = [
        sys.executable,
        "-m",
        "envforge",
        "certify",
        "cpu",
        "--level",
        "quick",
        "--set",
        f"certify.extra_checks=[{json.dumps(str(hang))}]",
        "--set",
        "certify.step_timeout=120",
    ]
    seen: list[str] = []
    with subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=envforge.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                seen.append(line)
                if line.strip().startswith("transfer-back"):
                    break  # the last built-in quick step: the hanging check runs now
            time.sleep(1.0)
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
            stopped_in = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 130, "".join(seen)
    assert stopped_in < 15
    assert all_containers() == before
