"""Issue 22 class 8 with real processes: the hostile corpus (tests/fixtures/hostile/)
through ``python -m envforge``: registry documents from a real HTTP registry on
127.0.0.1, evidence files, FIFOs and /dev/zero as evidence, signing keys and trust
files, and index pages with a 5,000-digit version and an ESC in a URL.

Each run: no traceback, the documented exit code, one line per problem, no hang (every
process has a deadline far above what it needs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import hostile_registry
from tests.helpers.httpserver import Handler, serving

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "tests" / "fixtures" / "hostile" / "evidence"


def envforge(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env["ENVFORGE_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "envforge", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_every_hostile_registry_image_is_skipped_in_one_line(tmp_path: Path) -> None:
    with hostile_registry.serving() as registry:
        refs = [registry.ref(n) for n in sorted(p.name for p in hostile_registry.CORPUS.iterdir())]
        done = envforge("evidence", "import", *refs, home=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 4, done.stderr  # nothing read; registries gave unusable answers
    skipped = [ln for ln in done.stderr.splitlines() if ln.startswith("envforge: skipped")]
    assert len(skipped) == len(refs), done.stderr
    for ref in refs:
        assert sum(ref + ":" in ln or ln.endswith(ref) for ln in skipped) == 1, ref
    assert "\x1b" not in done.stderr


def test_every_hostile_evidence_file_is_skipped_in_one_line(tmp_path: Path) -> None:
    done = envforge("evidence", "import", str(EVIDENCE), home=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    for path in EVIDENCE.iterdir():
        assert f"skipped {path}" in done.stderr, path.name


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "special.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    "command",
    [
        ("evidence", "import", "{P}"),
        ("certify", "cpu", "--signing-key", "{P}"),
        ("verify", "127.0.0.1:9/x/y:z", "--no-pull", "--trust", "{P}"),
        ("matrix", "--evidence", "{T}", "--trust", "{P}", "-o", "{T}/site"),
    ],
    ids=["evidence-import", "signing-key", "verify-trust", "matrix-trust"],
)
def test_a_fifo_or_dev_zero_as_input_is_exit_2_at_once(
    tmp_path: Path, fifo: Path, special: str, command: tuple[str, ...]
) -> None:
    path = str(fifo) if special == "fifo" else special  # /dev/zero: opened, never read
    args = [a.replace("{P}", path).replace("{T}", str(tmp_path)) for a in command]
    started = time.monotonic()
    done = envforge(*args, home=tmp_path / "home", timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr
    assert time.monotonic() - started < 30  # measured: ~1 s (the interpreter's start)


WHEEL = "-cp311-cp311-manylinux_2_28_x86_64.whl"
HOSTILE_PAGE = (
    "<!DOCTYPE html><html><body>\n"
    f'<a href="/f/torch-{{digits}}{WHEEL}">torch-{{digits}}{WHEEL}</a>\n'
    f'<a href="/f/\x1b[2Jtorch-2.99.0{WHEEL}">torch-2.99.0{WHEEL}</a>\n'
    '<a href="/f/{project}-1.0.0-py3-none-any.whl">{project}-1.0.0-py3-none-any.whl</a>\n'
    "</body></html>\n"
)


@pytest.fixture
def hostile_index() -> Iterator[str]:
    class Hostile(Handler):
        def do_GET(self) -> None:
            project = self.path.strip("/").split("/")[-1] or "x"
            body = HOSTILE_PAGE.format(digits="1" * 5000, project=project).encode()
            self.send(200, body, {"Content-Type": "text/html"})

    with serving(Hostile) as server:
        yield f"{server.url}/simple/"


def test_an_index_with_a_5000_digit_version_and_an_esc_in_a_url(
    tmp_path: Path, hostile_index: str
) -> None:
    done = envforge(
        "knowledge",
        "refresh",
        "--index",
        hostile_index,
        "--no-pytorch-index",
        "--json",
        home=tmp_path,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr  # an answer, not a crash
    assert "\x1b" not in done.stdout + done.stderr
    assert "2.99.0" not in done.stdout  # the file behind the ESC URL was not taken
    assert "1" * 100 not in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--partition", "gpu\n#SBATCH --wrap=id"),
        ("--time", "$(touch pwned)"),
        ("--arch", "../../../x"),
        ("--nodes", "100000000"),
    ],
    ids=["partition-newline", "time-command", "arch-path", "nodes-huge"],
)
def test_fleet_plan_refuses_hostile_values_at_once(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Issue 27 classes 2 and 7: one line, exit 2, nothing written, no hang."""
    started = time.monotonic()
    done = envforge(
        "fleet",
        "plan",
        "--engine",
        "slurm",
        "--recipe",
        "cpu",
        *args,
        "-o",
        str(tmp_path / "plan"),
        home=tmp_path / "home",
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert args[0] in done.stderr
    assert not (tmp_path / "plan").exists()
    assert time.monotonic() - started < 30


def test_fleet_status_wait_refuses_a_nan_timeout_while_a_task_runs(tmp_path: Path) -> None:
    """Issue 27 class 7: ``--timeout nan`` waited forever on a running task."""
    home = tmp_path / "home"
    plan = tmp_path / "plan"
    assert (
        envforge(
            "fleet", "plan", "--engine", "slurm", "--recipe", "cpu", "-o", str(plan), home=home
        ).returncode
        == 0
    )
    (plan / "submitted.json").write_text('{"jobs": ["7"]}')
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "squeue").write_text("#!/bin/sh\necho '7_0|RUNNING|None'\n")
    (fake / "squeue").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env.update(ENVFORGE_HOME=str(home), PYTHONPATH=str(ROOT), PATH=f"{fake}:{env['PATH']}")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envforge",
            "fleet",
            "status",
            str(plan),
            "--wait",
            "--timeout",
            "nan",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--timeout nan" in done.stderr


# --------------------------------------------------------------------------- issue 27: projects
# Classes 5, 7 and 8 through `python -m envforge` on real project folders: one line,
# exit 2, no traceback, and nothing of the hostile input runs or leaks.

ZEROS = "0" * 64


def _one_line_exit_2(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize("scheme", ["git+file://", "hg+file://", "svn+file://", "file://"])
@pytest.mark.parametrize("command", ["show", "lock", "build"])
def test_a_vcs_or_path_requirement_with_a_fake_sha256_never_runs(
    tmp_path: Path, scheme: str, command: str
) -> None:
    """A git checkout whose setup.py would leave a marker: refused before anything runs."""
    repo = tmp_path / "x"
    repo.mkdir()
    marker = tmp_path / "setup-py-ran"
    (repo / "setup.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from setuptools import setup\nsetup(name='x', version='1')\n"
    )
    for git in (
        ["init", "-q"],
        ["add", "setup.py"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *git], check=False, capture_output=True)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "requirements.txt").write_text(f"x @ {scheme}{repo}#sha256={ZEROS}\n")
    args = {
        "show": ("show", "cpu"),
        "lock": ("lock", "cpu"),
        "build": ("build", "cpu", "--backend", "venv"),
    }[command]
    done = envforge(*args, "--project", str(proj), home=tmp_path / "home", timeout=60)
    err = _one_line_exit_2(done)
    assert "requirements.txt: line 1: requirement 'x' is" in err
    assert not marker.exists()


def test_a_5000_group_chain_is_one_line(tmp_path: Path) -> None:
    lines = ["[dependency-groups]"]
    lines += [f'g{i} = [{{include-group = "g{i + 1}"}}]' for i in range(4999)]
    lines += ['g4999 = ["six"]', "[tool.envforge]", 'groups = ["g0"]']
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    err = _one_line_exit_2(
        envforge("show", "cpu", "--project", str(tmp_path), home=tmp_path / "home")
    )
    assert "deeper than 64" in err


def test_init_after_an_inline_tool_table_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    import tomllib

    text = 'tool = {black = {line-length = 88}}\n[project]\nname = "p"\n'
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    _one_line_exit_2(envforge("init", str(tmp_path), home=tmp_path / "home"))
    assert path.read_text() == text
    tomllib.loads(path.read_text())


@pytest.mark.parametrize("target", ["/proc/self/environ", "/etc/passwd", "LINK"])
def test_an_include_outside_the_project_is_never_read_or_echoed(
    tmp_path: Path, target: str
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("ENVFORGE_TEST_SECRET=hunter2\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "link.txt").symlink_to(secret)
    include = "link.txt" if target == "LINK" else target
    (proj / "requirements.txt").write_text(f"numpy\n-r {include}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFORGE_")}
    env.update(
        ENVFORGE_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), ENVFORGE_TEST_SECRET="hunter2"
    )
    done = subprocess.run(
        [sys.executable, "-m", "envforge", "show", "cpu", "--project", str(proj)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    err = _one_line_exit_2(done)
    assert "outside the project folder" in err
    assert "hunter2" not in err
    assert "root:" not in err


def test_contradictory_companion_pins_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torchvision==0.28.0\ntorchvision==0.29.0\n")
    err = _one_line_exit_2(
        envforge("show", "cpu", "--project", str(tmp_path), home=tmp_path / "home")
    )
    assert "torchvision" in err


def test_fleet_status_shows_task_json_escapes_escaped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plan = tmp_path / "plan"
    assert (
        envforge(
            "fleet", "plan", "--engine", "github", "--recipe", "cpu", "-o", str(plan), home=home
        ).returncode
        == 0
    )
    task = plan / "reports" / "000"
    task.mkdir(parents=True, exist_ok=True)
    (task / "task.json").write_text(
        json.dumps({"exit": "\x1b[2J", "node": "\x1b]0;x\x07", "granted": {"gpus": "\x9b31m"}})
    )
    for command in ("status", "collect"):
        done = envforge("fleet", command, str(plan), home=home)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        for ch in ("\x1b", "\x07", "\x9b"):
            assert ch not in done.stdout + done.stderr
        assert "\\x1b" in done.stdout
