"""A certified venv under hostile edits (issue 27, classes 1, 4 and 9), on real files:
whatever is added, forged or edited in a certified venv makes it not certified, the
file named; a change of a project's checks makes its certificate not hold; a relative
ENVFORGE_HOME is absolute. (tests/acceptance/test_venv_tamper.py does the same to a
real cpu venv through ``envforge shell`` and ``build``.)"""

from __future__ import annotations

import json
import os
import py_compile
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from envforge.backends import venv, venvscan
from envforge.backends.venv import MARKER_DIR, VenvOptions, fingerprint, venv_location
from envforge.backends.venv.certifying import CONTENT_FORMAT, _cert_json, valid_certificate
from envforge.backends.venv.layout import project_binding
from envforge.core import paths
from envforge.errors import CertificationFailed
from envforge.project.checks import checks_digest
from envforge.project.model import Project
from envforge.publish.certificate import Certificate, VenvBinding
from tests.helpers.matrix_synth import Spec, make_report
from tests.helpers.recipes import make_recipe
from tests.unit.backends.test_venvfs import SP, make_venv

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
PYC = f"pkg/__pycache__/core.{sys.implementation.cache_tag}.pyc"


def certify(target: Path, recipe_hash: str, project: Project | None = None) -> None:
    """Write the markers a passing build writes (content, certified list, checks)."""
    markers = target / MARKER_DIR
    markers.mkdir(exist_ok=True)
    fp, content = fingerprint(target), venvscan.content_digests(target)
    built = {"fingerprint": fp, "content": content, "content_format": CONTENT_FORMAT}
    (markers / "build.json").write_text(json.dumps(built))
    cert = {
        **built,
        "recipe_hash": recipe_hash,
        "level": "full",
        "project": project_binding(project),
        "checks": checks_digest(project),
    }
    (markers / "certified.json").write_text(json.dumps(cert))
    (markers / venvscan.CERTIFIED_LIST).write_bytes(venvscan.certified_list(target))


@pytest.fixture
def certified(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A certified venv with bytecode compiled at certification (``pkg/core.py``'s)."""
    home = {"ENVFORGE_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")}
    recipe = make_recipe(python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    target = make_venv(venv_location(recipe, home))
    py_compile.compile(str(target / SP / "pkg/core.py"), str(target / SP / PYC))
    certify(target, recipe.hash)
    assert venv.state(recipe, home).certified
    return target, home


def _shadow(sp: Path) -> str:
    (sp / "six.py").write_text("x = 1\n")  # as if certified: listed below
    (sp / "six").mkdir()
    (sp / "six" / "__init__.py").write_text("import os\n")
    return "six/__init__.py"


def _forged_pyc(sp: Path) -> str:
    pyc = sp / PYC
    st = pyc.stat()
    data = bytearray(pyc.read_bytes())
    data[-1] ^= 0xFF  # same size
    pyc.write_bytes(bytes(data))
    os.utime(pyc, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    return PYC


def _same_size_same_mtime(sp: Path) -> str:
    core = sp / "pkg" / "core.py"
    st = core.stat()
    core.write_bytes(core.read_bytes().replace(b"return 2", b"return 3"))
    os.utime(core, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert core.stat().st_size == st.st_size
    return "pkg/core.py"


def _pth(sp: Path) -> str:
    (sp / "zz-evil.pth").write_text("import os; os.system('true')\n")
    return "zz-evil.pth"


def _so(sp: Path) -> str:
    (sp / "pkg" / "_fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF" + b"\0" * 60)
    return "pkg/_fast.cpython-311-x86_64-linux-gnu.so"


def _unlisted_pyc(sp: Path) -> str:
    (sp / "__pycache__").mkdir()
    (sp / "__pycache__" / "evil.cpython-311.pyc").write_bytes(b"\0" * 32)
    return "__pycache__/evil.cpython-311.pyc"


def _fifo(sp: Path) -> str:
    os.mkfifo(sp / "pkg" / "pipe.py")  # never opened: no hang
    return "pkg/pipe.py"


def _symlink(sp: Path) -> str:
    os.symlink("/etc/passwd", sp / "pkg" / "data.py")
    return "pkg/data.py"


def _record_rewritten(sp: Path) -> str:
    """The file edited and its RECORD line made to match (RECORD is certified too)."""
    core = sp / "pkg" / "core.py"
    core.write_bytes(b"import os\n")
    record = sp / "pkg-1.0.dist-info" / "RECORD"
    lines = [ln for ln in record.read_text().splitlines() if not ln.startswith("pkg/core.py,")]
    record.write_text("\n".join([*lines, "pkg/core.py,,"]) + "\n")
    return "pkg/core.py"


def _metadata(sp: Path) -> str:
    (sp / "pkg-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nx=os:f\n")
    return "pkg-1.0.dist-info/entry_points.txt"


TAMPERS: dict[str, Callable[[Path], str]] = {
    "shadow-package-folder": _shadow,
    "forged-pyc-same-size-and-mtime": _forged_pyc,
    "edit-same-size-mtime-restored": _same_size_same_mtime,
    "pth-file": _pth,
    "unlisted-so": _so,
    "pyc-without-certified-source": _unlisted_pyc,
    "fifo": _fifo,
    "symlink-out": _symlink,
    "record-rewritten-to-match": _record_rewritten,
    "dist-info-file-added": _metadata,
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_certified_venv_is_refused_naming_the_file(
    certified: tuple[Path, dict[str, str]], tamper: str
) -> None:
    target, home = certified
    recipe = make_recipe(python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    sp = target / SP
    if tamper == "shadow-package-folder":  # six.py itself certified first
        (sp / "six.py").write_text("x = 1\n")
        certify(target, recipe.hash)
        (sp / "six.py").unlink()
    named = TAMPERS[tamper](sp)
    now = venv.state(recipe, home)
    assert not now.certified
    assert now.changed is not None
    assert f"{SP}/{named}" in now.changed, now.changed
    with pytest.raises(CertificationFailed) as caught:
        venv.ensure(recipe, VenvOptions(environ=home))
    line = caught.value.one_line()
    assert caught.value.exit_code == 1
    assert f"{SP}/{named}" in line
    assert "envforge build" in line
    assert "\n" not in line


def test_a_touched_file_is_read_again_and_still_certified(
    certified: tuple[Path, dict[str, str]],
) -> None:
    target, home = certified
    recipe = make_recipe(python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    core = target / SP / "pkg" / "core.py"
    os.utime(core, ns=(10**9, 10**9))  # mtime and ctime moved, the bytes the same
    assert venvscan.scan(target).hashed == 1
    assert venv.state(recipe, home).certified
    assert venvscan.scan(target).hashed == 0  # the memo was brought up to date


def test_a_forged_memo_entry_cannot_hide_an_edit_without_the_ctime(
    certified: tuple[Path, dict[str, str]],
) -> None:
    """The memo's stat data include st_ctime: an edit moves it, whatever utime does."""
    target, _home = certified
    before = venvscan.content_digests(target)
    _same_size_same_mtime(target / SP)
    assert venvscan.scan(target).hashed == 1
    assert venvscan.content_digests(target) != before


# --------------------------------------------------------------------------- class 4


def project(root: Path, checks: tuple[str, ...]) -> Project:
    return Project(root=root, source=root / "pyproject.toml", name="demo", checks=checks)


def test_the_checks_are_bound_by_list_file_content_and_command(tmp_path: Path) -> None:
    (tmp_path / "check_gpu.py").write_text("print('ok')\n")
    first = checks_digest(project(tmp_path, ("check_gpu.py",)))
    assert first == checks_digest(project(tmp_path, ("check_gpu.py",)))
    assert checks_digest(None) is None
    (tmp_path / "check_gpu.py").write_text("raise SystemExit(1)\n")
    edited = checks_digest(project(tmp_path, ("check_gpu.py",)))
    added = checks_digest(project(tmp_path, ("check_gpu.py", "pytest -q")))
    command = checks_digest(project(tmp_path, ("check_gpu.py", "pytest -x")))
    assert len({first, edited, added, command}) == 4


def test_a_changed_check_makes_the_certificate_not_hold(tmp_path: Path) -> None:
    home = {"ENVFORGE_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")}
    recipe = make_recipe(python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    root = tmp_path / "proj"
    root.mkdir()
    was = project(root, ("python -c pass",))
    target = make_venv(venv_location(recipe, home, was))
    certify(target, recipe.hash, was)
    assert valid_certificate(recipe, target, None, was) is not None
    assert venv.state(recipe, home, was).certified
    now = project(root, ("python -c pass", "python -c 'raise SystemExit(1)'"))
    assert valid_certificate(recipe, target, None, now) is None
    state = venv.state(recipe, home, now)
    assert (state.certified, state.changed) == (False, None)  # certify again, no reinstall
    assert state.problem == "the project's checks changed since it was certified"


# --------------------------------------------------------------------------- class 9


def test_a_relative_envforge_home_is_absolute_where_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert paths.state_dir({"ENVFORGE_HOME": "state"}) == tmp_path / "state"
    assert paths.venvs_dir({"ENVFORGE_HOME": "./a/../state"}) == tmp_path / "state" / "venvs"
    assert paths.state_dir({"XDG_DATA_HOME": "data"}) == tmp_path / "data" / "envforge"
    monkeypatch.chdir("/")
    assert paths.state_dir({"ENVFORGE_HOME": str(tmp_path)}) == tmp_path


@pytest.mark.parametrize("shape", ["format-3", "before-format-3"])
def test_a_certificate_in_either_shape_holds_and_an_altered_one_does_not(
    tmp_path: Path, shape: str
) -> None:
    """What ``build`` writes now (a format 3 certificate, venv binding) and what venvs
    certified before it carry (no schema) are both read; an edited format 3 one is not."""
    home = {"ENVFORGE_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "")}
    recipe = make_recipe(python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    root = tmp_path / "proj"
    root.mkdir()
    was = project(root, ("python -c pass",))
    target = make_venv(venv_location(recipe, home, was))
    certify(target, recipe.hash, was)  # the markers in the shape before format 3
    cert_file = target / MARKER_DIR / "certified.json"
    if shape == "format-3":
        spec = Spec("none", None, "", "", recipe.name, "torch2.13.0-cpu-py3.11", "pass", NOW)
        content = venvscan.content_digests(target)
        text = _cert_json(recipe, make_report(spec), fingerprint(target), content, was)
        cert_file.write_text(text)
        cert = Certificate.from_json(text)
        assert cert.data["schema"] == "envforge.certificate/3"
        assert isinstance(cert.binding, VenvBinding)
        assert cert.binding.content == content
        assert cert.binding.checks == checks_digest(was)
    assert valid_certificate(recipe, target, None, was) is not None
    assert venv.state(recipe, home, was).certified
    if shape == "format-3":
        data = json.loads(cert_file.read_text())
        data["binding"]["checks"] = None  # altered: its digest no longer matches
        cert_file.write_text(json.dumps(data))
        assert valid_certificate(recipe, target, None, was) is None
        assert not venv.state(recipe, home, was).certified
