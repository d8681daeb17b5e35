"""Light commands stay light: no docker SDK (nor torch) in commands that do not use them.

Each case runs in a fresh interpreter (this process has long imported everything) and
lists the modules loaded after the command ran. No engine and no torch are needed.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from envforge.cli import COMMANDS, SUMMARIES, cli
from tests.helpers import paths

ROOT = paths.ROOT
NO_GPU = ROOT / "tests" / "fixtures" / "sysfs" / "none"

#: Loaded after a command in a fresh interpreter: these must not be.
_REPORT = (
    "import json, sys\n"
    "from envforge.cli import main\n"
    "code = main({args!r})\n"
    "sys.stdout.flush()\n"
    "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('docker', 'requests', 'torch'))\n"
    "sys.stderr.write('\\nMODULES ' + json.dumps([code, heavy]) + '\\n')\n"
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    extra = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + extra if extra else "")
    env["ENVFORGE_HOME"] = "/nonexistent/envforge-home"
    for name in ("ENVFORGE_GPU_ARCH", "ENVFORGE_GPU_VENDOR", "ENVFORGE_RECIPE_PATH"):
        env.pop(name, None)
    return env


def _run(args: list[str], **extra_env: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT.format(args=args)],
        env={**_env(), **extra_env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    marker = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")]
    assert marker, f"the command did not finish (rc {done.returncode}):\n{done.stderr[-3000:]}"
    code, heavy = json.loads(marker[-1][len("MODULES ") :])
    return int(code), list(heavy)


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        (["--help"], 0),
        (["list"], 0),
        (["show", "cpu"], 0),
        (["validate", "cpu"], 0),
        (["render", "cpu"], 0),
        (["detect", "--root", str(NO_GPU)], 0),
        # The probe command's body runs; the missing interpreter ends it (exit 4).
        (["probe", "--recipe", "cpu", "--python", "/nonexistent/python"], 4),
        # verify reads the registry's HTTP API, no engine (nothing answers on port 9: 4)
        (["verify", "127.0.0.1:9/team/cpu:v1"], 4),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_light_commands_never_import_the_docker_sdk(args: list[str], exit_code: int) -> None:
    code, heavy = _run(args)
    assert code == exit_code
    assert heavy == [], f"envforge {' '.join(args)} imported {heavy}"


def test_a_docker_command_does_load_the_sdk() -> None:
    """The check above can fail: ``verify`` talks to the engine (none here: exit 4)."""
    code, heavy = _run(["verify", "--no-pull", "x:1"], DOCKER_HOST="unix:///nonexistent.sock")
    assert code == 4
    assert "docker" in heavy


def test_import_envforge_stays_light() -> None:
    code = (
        "import envforge, sys; print(sorted(m for m in sys.modules"
        " if m.startswith(('torch', 'envforge.probe', 'click', 'docker'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_import_envforge_cli_loads_no_sdk() -> None:
    code = (
        "import envforge.cli, sys; print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('docker', 'requests', 'urllib3', 'torch')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_help_overview_loads_no_command_module() -> None:
    code = (
        "import sys\nfrom envforge.cli import main\n"
        "rc = main(['--help'])\n"
        "mods = sorted(m for m in sys.modules if m.startswith('envforge.cli.')"
        " and m != 'envforge.cli.common')\n"
        "sys.stderr.write('\\nMODULES ' + repr((rc, mods)) + '\\n')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")][-1]
    assert line == "MODULES (0, [])", line


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_the_summary_of_its_help(name: str) -> None:
    """``--help`` shows SUMMARIES without loading commands: each must be its help's start."""
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    first = inspect.cleandoc(command.help or "").split("\n\n")[0]
    assert SUMMARIES.get(name) == first, (
        f"envforge/cli/__init__.py SUMMARIES[{name!r}] must be {first!r}"
    )


def test_show_reads_the_evidence_store_without_the_record_parser(tmp_path: Path) -> None:
    """``show`` reads the store's indexes: neither the record parser nor the probe's
    modules are imported (issue 21 §7, start-up of ``show``), unless new files are read."""
    script = (
        "import json, sys\n"
        "from envforge.cli import main\n"
        "code = main(['show', 'cpu'])\n"
        "sys.stdout.flush()\n"
        "seen = sorted(m for m in sys.modules if m.startswith(('envforge.evidence.records',"
        " 'envforge.probe', 'envforge.publish', 'email.parser')))\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps([code, seen]) + '\\n')\n"
    )
    env = {**_env(), "ENVFORGE_HOME": str(tmp_path / "home")}
    for _ in range(2):  # the store made on the first run, read on the second
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        marker = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")]
        assert marker, done.stderr[-3000:]
        assert json.loads(marker[-1][len("MODULES ") :]) == [0, []]
    assert (tmp_path / "home" / "evidence.sqlite").is_file()


#: The compatibility table's YAML parser: with a fresh compiled cache no command loads it.
_TABLE_PARSER = (
    "envforge.knowledge.parse",
    "envforge.knowledge.rows",
    "envforge.knowledge.release",
)
#: What reads a recipe's YAML: with a fresh compiled recipe no command loads it (issue 32
#: §1: PyYAML itself, the recipe checks, packaging's PEP 508 parser with packaging.tags).
_RECIPE_READER = (
    "envforge.recipe.load",
    "envforge.recipe.checks",
    "envforge.core.yamlcheck",
    "yaml",
    "packaging.requirements",
    "packaging.utils",
)
#: Each light command and what it prints nothing of, so must not load (warm caches).
_NOT_PRINTED: list[tuple[list[str], tuple[str, ...]]] = [
    (
        ["list"],
        (
            "envforge.knowledge",
            "envforge.stack",
            "envforge.recipe.load",
            "envforge.recipe.model",
            "envforge.core.yamlcheck",
            "envforge.core.fsutil",
            "packaging",
            "yaml",
            "jinja2",
            "tempfile",
            "shutil",
        ),
    ),
    (
        ["--help"],
        (
            "envforge.knowledge",
            "envforge.recipe",
            "envforge.core.fsutil",
            "packaging",
            "yaml",
            "jinja2",
        ),
    ),
    (
        ["validate", "cpu"],
        (
            *_TABLE_PARSER,
            *_RECIPE_READER,
            "envforge.solve",
            "envforge.evidence",
            "envforge.render",
            "envforge.knowledge.wheel_variants",
            "sqlite3",
            "zipfile",
            "jinja2",
            "tempfile",
        ),
    ),
    # a recipe without a GPU arch: nothing to solve beside it
    (
        ["show", "cpu"],
        (
            *_TABLE_PARSER,
            *_RECIPE_READER,
            "envforge.render",
            "envforge.solve",
            "envforge.knowledge.wheel_variants",  # a stack's variant is only its type
            "envforge.evidence.by_node",  # --by-node only
            "socket",  # this host's names: only to redact a new file read in
            "zipfile",
            "jinja2",
            "tempfile",
        ),
    ),
    (
        ["solve", "sm_89"],
        (
            *_TABLE_PARSER,
            *_RECIPE_READER,  # the curated sm_89 recipe beside the answer: compiled
            "envforge.render",
            "envforge.evidence",
            "envforge.stack",  # only --with prints pins
            "envforge.knowledge.companions",  # the same
            "envforge.knowledge.families",  # an arch with no row only (predictions)
            "envforge.knowledge.extensions",
            "envforge.knowledge.rules",  # strict_mode reads the environment only
            "sqlite3",
            "jinja2",
            "tempfile",
        ),
    ),
    (["render", "cpu"], (*_TABLE_PARSER, "envforge.evidence", "envforge.solve.solver", "sqlite3")),
    (
        ["detect", "--root", str(NO_GPU)],
        (*_TABLE_PARSER, "envforge.stack", "envforge.render", "envforge.evidence", "jinja2"),
    ),
]


@pytest.mark.parametrize(
    ("args", "unwanted"), _NOT_PRINTED, ids=[" ".join(a) for a, _ in _NOT_PRINTED]
)
def test_light_commands_load_only_what_they_print(
    args: list[str], unwanted: tuple[str, ...], tmp_path: Path
) -> None:
    """Issue 32 §1: with warm caches (the listing's rows, the compiled tables: a second run
    with the same ENVFORGE_HOME and ENVFORGE_CACHE_DIR), a light command loads neither
    the table's YAML parser nor the packages of what it does not print."""
    script = (
        "import json, sys\n"
        "from envforge.cli import main\n"
        f"code = main({args!r})\n"
        "sys.stdout.flush()\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps([code, sorted(sys.modules)]) + '\\n')\n"
    )
    env = {
        **_env(),
        "ENVFORGE_HOME": str(tmp_path / "home"),
        "ENVFORGE_CACHE_DIR": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    for _ in range(2):  # the caches written by the first run, read by the second
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        marker = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")]
        assert marker, done.stderr[-3000:]
    code, modules = json.loads(marker[-1][len("MODULES ") :])
    assert code == 0
    loaded = sorted(m for m in modules for u in unwanted if m == u or m.startswith(u + "."))
    assert loaded == [], f"envforge {' '.join(args)} loaded {loaded}"
