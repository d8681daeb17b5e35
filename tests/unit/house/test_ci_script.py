"""scripts/test's parts that run before any engine: the one list of Debian packages
(scripts/ci-packages.txt read by scripts/ci-apt.sh) and the per-file times plugin."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import paths

ROOT = paths.ROOT


def _ci_apt(listing: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENVFORGE_CI_PACKAGES": str(listing)}
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "ci-apt.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_package_line_names_a_package_and_what_proves_it_present() -> None:
    lines = (ROOT / "scripts" / "ci-packages.txt").read_text(encoding="utf-8").splitlines()
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    assert len(rows) >= 10
    for row in rows:
        assert len(row) >= 2, row
        assert row[2:] == [] or row[2] == "#", row  # anything after the probe is a comment
    names = [row[0] for row in rows]
    assert len(names) == len(set(names))
    assert {"docker.io", "podman", "chromium"} <= set(names)


def test_nothing_is_installed_when_every_probe_is_present(tmp_path: Path) -> None:
    present = tmp_path / "present-file"
    present.write_text("", encoding="utf-8")
    listing = tmp_path / "packages.txt"
    listing.write_text(
        f"# comment\n\nbash  bash   # a command\nsome-pkg  {present}   # a file\n",
        encoding="utf-8",
    )
    done = _ci_apt(listing)
    assert done.returncode == 0, done.stderr
    assert "is present" in done.stdout
    assert "installing" not in done.stdout
