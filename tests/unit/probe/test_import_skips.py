"""Imports a user can steer (issue 26 §4): modules of extras not installed, ``skip_imports``,
and failure messages that keep the underlying cause and name no folder that is gone.

The worker runs against real distribution folders on a real ``sys.path`` entry; the real
black wheel (``blackd`` needs aiohttp, only under ``black[d]``) is tested in a real venv
by the last test when the package index can serve it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envforge.errors import ProjectError, clip
from envforge.probe.bundle import worker_source
from envforge.probe.report import ProbeReport, ReportHost, StepResult
from envforge.probe.spec import ProbeSpec, requested_extras
from envforge.project.read import load_project
from envforge.publish.certificate import issue
from tests.unit.probe.worker.test_probe_worker import _load_worker

W = _load_worker()

BLACKISH = (
    "Metadata-Version: 2.1\nName: blackish\nVersion: 1.0\n"
    "Requires-Dist: click>=8\n"
    "Requires-Dist: absent-base-dep; python_version >= '3'\n"
    "Requires-Dist: absent-http>=3.10; extra == 'd'\n"
    "Requires-Dist: absent-loop; (sys_platform != 'win32') and extra == \"uvloop\"\n\n"
)


def _dist(site: Path, name: str, metadata: str, files: dict[str, str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata)
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in files))
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)


def _ctx(**spec: Any) -> Any:
    return W.Context({"vendor": "none", **spec})


# blackd's own pattern: the ModuleNotFoundError caught and re-raised "from None"
_SERVER = (
    "try:\n    import absent_http\nexcept ImportError as ie:\n"
    "    raise ImportError(f'absent_http is not installed: {ie}. pip install blackish[d]')"
    " from None\n"
)


def _blackish(site: Path, server: str = _SERVER) -> None:
    _dist(
        site,
        "blackish",
        BLACKISH,
        {"blackish/__init__.py": "X = 1\n", "blackishd/__init__.py": server},
    )


def test_a_module_needing_an_extra_not_installed_is_skipped_naming_the_extra(site: Path) -> None:
    _blackish(site)
    detail, data = W.make_import_step("blackish")(_ctx())
    assert detail == (
        "blackish 1.0: imported blackish; skipped blackishd (needs absent_http, "
        "required only by blackish[d], not installed)"
    )
    assert data["modules"] == ["blackish"]
    assert data["skipped"] == [
        {
            "module": "blackishd",
            "reason": ("needs absent_http, required only by blackish[d], not installed"),
        }
    ]


def test_a_plain_module_not_found_under_an_extra_is_skipped_too(site: Path) -> None:
    _blackish(site, "import absent_loop.sub\n")
    detail, _ = W.make_import_step("blackish")(_ctx())
    assert "skipped blackishd (needs absent_loop, required only by blackish[uvloop]" in detail


def test_the_extra_asked_for_must_import(site: Path) -> None:
    _blackish(site)
    with pytest.raises(W.StepFailed, match="import blackishd: ImportError: absent_http is not"):
        W.make_import_step("blackish")(_ctx(extras={"blackish": ["d"]}))


@pytest.mark.parametrize(
    "server",
    [
        "import absent_base_dep\n",  # required without an extra: the environment is broken
        "import not_required_anywhere\n",  # no extra names it
        "raise ImportError('cannot import name x from y')\n",  # names no missing module
        "import json\nraise RuntimeError('boom')\n",
    ],
)
def test_other_failures_stay_failures(site: Path, server: str) -> None:
    _blackish(site, server)
    with pytest.raises(W.StepFailed, match="import blackishd"):
        W.make_import_step("blackish")(_ctx())


def test_skip_imports_leaves_the_module_out_and_says_why(site: Path) -> None:
    _blackish(site, "raise SystemExit('imported although skipped')\n")
    detail, _data = W.make_import_step("blackish")(
        _ctx(skip_imports={"blackishd": "we never run the server"})
    )
    assert detail.endswith("skipped blackishd (skip_imports: we never run the server)")
    assert "blackishd" not in sys.modules


def test_requires_by_extra_reads_the_markers(tmp_path: Path) -> None:
    (tmp_path / "METADATA").write_text(BLACKISH)
    base, extras = W.requires_by_extra(str(tmp_path))
    assert base == {"click", "absent-base-dep"}
    assert extras == {"d": {"absent-http"}, "uvloop": {"absent-loop"}}


# --------------------------------------------------------------------------- messages

_LOADER = (
    "try:\n    raise OSError('{path}: libtorch_cuda.so: cannot open shared object file: "
    "No such file or directory')\n"
    "except Exception as e:\n"
    "    raise OSError('Could not load this library: {path}') from e\n"
)


def test_an_import_failure_keeps_the_first_line_of_its_cause(site: Path) -> None:
    path = "/home/u/.envforge/venvs/cpu/" + "x" * 150 + "/site-packages/ta/lib/libta.so"
    _dist(
        site,
        "ta",
        "Metadata-Version: 2.1\nName: ta\nVersion: 1.0\n\n",
        {"ta/__init__.py": _LOADER.format(path=path)},
    )
    with pytest.raises(W.StepFailed) as failed:
        W.make_import_step("ta")(_ctx())
    message = W.short(str(failed.value))  # what run_step reports
    assert message.startswith("ta 1.0: import ta: OSError: Could not load this library")
    assert message.endswith(
        "libtorch_cuda.so: cannot open shared object file: No such file or directory)"
    )
    assert len(message) <= W.DETAIL_MAX


def test_a_check_failure_names_its_cause() -> None:
    try:
        try:
            raise FileNotFoundError("weights.pt is missing")
        except OSError as exc:
            raise RuntimeError("loading the model failed") from exc
    except RuntimeError as exc:
        text = W.describe(exc)
    assert text.startswith("RuntimeError: loading the model failed (at ")
    assert text.endswith("(cause: FileNotFoundError: weights.pt is missing)")


def test_host_side_messages_are_cut_in_the_middle() -> None:
    text = "import torchaudio: OSError: " + "p/" * 200 + "libtorch_cuda.so: cannot open shared"
    assert clip(text, 120).endswith("libtorch_cuda.so: cannot open shared")
    assert len(clip(text, 120)) == 120
    assert clip("short\n text", 120) == "short text"


def test_a_report_of_a_venv_built_aside_names_where_it_goes() -> None:
    from envforge.backends.venv.certifying import moved_report

    aside, final = Path("/h/venvs/cpu/.p.tmp-u-ab12"), Path("/h/venvs/cpu/p-1234")
    report = ProbeReport(
        steps=(
            StepResult(
                "import:ta",
                "fail",
                0.1,
                f"import ta: OSError: {aside}/lib/libta.so: libtorch_cuda.so",
            ),
        ),
        level="full",
        target=f"{aside}/bin/python",
        host=ReportHost("6.1", "x86_64"),
        envforge_version="0",
        created="2026-01-01T00:00:00Z",
        snapshot={"executable": f"{aside}/bin/python", "n": 1},
    )
    moved = moved_report(report, aside, final)
    text = moved.to_json()
    assert str(aside) not in text
    assert moved.steps[0].detail == f"import ta: OSError: {final}/lib/libta.so: libtorch_cuda.so"
    assert moved.target == f"{final}/bin/python"
    assert moved.snapshot == {"executable": f"{final}/bin/python", "n": 1}


# --------------------------------------------------------------------------- spec


def test_the_spec_sends_skips_and_requested_extras_only_when_there_are_some() -> None:
    plain = ProbeSpec().worker_dict()
    assert "skip_imports" not in plain
    assert "extras" not in plain
    spec = ProbeSpec(skip_imports=(("blackd", "not used"),), extras=(("black", ("d",)),))
    data = spec.worker_dict()
    assert data["skip_imports"] == {"blackd": "not used"}
    assert data["extras"] == {"black": ["d"]}


def test_requested_extras_come_from_the_requirement_lines() -> None:
    lines = ["torch==2.13.0+cpu", "Black[D,jupyter]>=24", "black[uvloop]", "not a requirement"]
    assert requested_extras(lines) == (("black", ("d", "jupyter", "uvloop")),)


# --------------------------------------------------------------------------- settings


def _project(tmp_path: Path, table: str, *, toml: bool = False) -> Path:
    if toml:
        (tmp_path / "requirements.txt").write_text("black\n")
        (tmp_path / "envforge.toml").write_text(table)
    else:
        (tmp_path / "pyproject.toml").write_text(
            '[project]\nname = "fmt"\ndependencies = ["black"]\n\n[tool.envforge]\n' + table
        )
    return tmp_path


@pytest.mark.parametrize("toml", [False, True])
def test_skip_imports_are_read(tmp_path: Path, toml: bool) -> None:
    folder = _project(
        tmp_path, 'skip_imports = [{module = "blackd", reason = "no server  here"}]\n', toml=toml
    )
    assert load_project(folder).skip_imports == (("blackd", "no server here"),)


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ('skip_imports = "blackd"\n', "skip_imports", "must be a list of tables"),
        ('skip_imports = ["blackd"]\n', "skip_imports[0]", "must be a table"),
        (
            'skip_imports = [{module = "blackd", reason = "x", why = "y"}]\n',
            "skip_imports[0].why",
            "is not a key of skip_imports",
        ),
        (
            'skip_imports = [{module = "black.d", reason = "x"}]\n',
            "skip_imports[0].module",
            "'black.d' is not a top-level module name",
        ),
        ('skip_imports = [{reason = "x"}]\n', "skip_imports[0].module", "is missing"),
        ('skip_imports = [{module = "blackd"}]\n', "skip_imports[0].reason", "must say why"),
        (
            'skip_imports = [{module = "blackd", reason = " "}]\n',
            "skip_imports[0].reason",
            "must say why",
        ),
        (
            'skip_imports = [{module = "a", reason = "x"}, {module = "a", reason = "y"}]\n',
            "skip_imports[1]",
            "skips a twice",
        ),
    ],
)
def test_bad_skip_imports_are_one_line_naming_file_key_and_fix(
    tmp_path: Path, table: str, key: str, says: str
) -> None:
    folder = _project(tmp_path, table)
    with pytest.raises(ProjectError) as err:
        load_project(folder)
    line = err.value.one_line()
    assert f"pyproject.toml: tool.envforge.{key}: {says}" in line
    assert "(fix: " in line
    assert "\n" not in line


def test_the_certificates_record_the_skips() -> None:
    cert = issue(
        report={"status": "pass", "steps": []},
        recipe_name="cpu",
        recipe_hash="h",
        stack_tag="t",
        layers=[],
        config={},
        candidate_id="c",
        skip_imports=(("blackd", "no server"),),
    )
    assert cert.data["skip_imports"] == [{"module": "blackd", "reason": "no server"}]
    plain = issue(
        report={"status": "pass", "steps": []},
        recipe_name="cpu",
        recipe_hash="h",
        stack_tag="t",
        layers=[],
        config={},
        candidate_id="c",
    )
    assert "skip_imports" not in plain.data


# --------------------------------------------------------------------------- real black


def _real_black_venv(tmp_path: Path) -> Path | None:
    """A real venv with the real black wheel (no aiohttp), or None when none can be had."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--disable-pip-version-check",
            "black",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return python if done.returncode == 0 else None


@pytest.mark.skipif(shutil.which("true") is None, reason="POSIX only")
def test_the_real_blackd_is_skipped_for_black_d_and_fails_when_d_was_asked_for(
    tmp_path: Path,
) -> None:
    python = _real_black_venv(tmp_path)
    if python is None:
        pytest.skip("the black wheel cannot be installed here (no package index)")

    def run(spec: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run(
            [
                str(python),
                "-c",
                worker_source(),
                json.dumps({"vendor": "none", "steps": ["import:black"], **spec}),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": ""},
        )
        return next(json.loads(line) for line in done.stdout.splitlines() if '"end"' in line)

    skipped = run({})
    assert skipped["status"] == "pass"
    assert (
        "skipped blackd (needs aiohttp, required only by black[d], not installed)"
        in (skipped["detail"])
    )
    assert "black" in skipped["data"]["modules"]
    asked = run({"extras": {"black": ["d"]}})
    assert asked["status"] == "fail"
    assert "import blackd: ImportError: aiohttp dependency is not installed" in asked["detail"]
    told = run({"skip_imports": {"blackd": "the server is not used"}})
    assert told["status"] == "pass"
    assert told["detail"].endswith("skipped blackd (skip_imports: the server is not used)")
