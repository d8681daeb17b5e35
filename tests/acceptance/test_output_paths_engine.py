"""The certificate store in ENVFORGE_HOME on a wrong path or a read-only file system:
``envforge certify`` (real engine, real image) exits 2 or 4 with one line, and stores and
labels nothing (the store is written before the image is labelled)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import Built, Envforge
from .test_output_paths import assert_one_line_error, snapshot, tmpfs

pytestmark = pytest.mark.engine


def certify(envforge: Envforge, home: Path) -> tuple[int, str]:
    done = envforge("certify", "cpu", "--level", "quick", extra_env={"ENVFORGE_HOME": str(home)})
    return done.returncode, done.stderr


def test_certificate_store_under_a_file_is_exit_2(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("keep\n")
    before = snapshot(tmp_path)
    status, stderr = certify(envforge, tmp_path / "afile")
    line = assert_one_line_error(status, stderr, 2, tmp_path / "afile", "certificates")
    assert "ENVFORGE_HOME" in line
    assert snapshot(tmp_path) == before


def test_certificate_store_on_a_read_only_file_system_is_exit_4(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        before = snapshot(ro)
        status, stderr = certify(envforge, ro / "existing")
        line = assert_one_line_error(status, stderr, 4, ro / "existing", "read-only")
        assert "ENVFORGE_HOME" in line
        assert snapshot(ro) == before


def test_certificate_store_on_a_full_file_system_is_exit_4(
    built_cpu: Built, envforge: Envforge, tmp_path: Path
) -> None:
    from .test_output_paths import fill, temp_files

    with tmpfs(tmp_path / "full") as full:
        (full / "existing" / "certificates").mkdir()
        fill(full)
        before = snapshot(full)
        status, stderr = certify(envforge, full / "existing")
        assert_one_line_error(status, stderr, 4, full / "existing", "no space left")
        assert snapshot(full) == before
        assert temp_files(full) == []
