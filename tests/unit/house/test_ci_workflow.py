"""docs/ci/github-actions.yml: the jobs issue 12 asks for, and every envforge command line
in it is one the CLI accepts (actionlint, run by scripts/test, checks the Actions side)."""

from __future__ import annotations

import shlex
from typing import Any

import click
import yaml

from envforge.cli import cli
from tests.helpers import paths

ROOT = paths.ROOT
WORKFLOW = ROOT / "docs" / "ci" / "github-actions.yml"


def _workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job["steps"]
    assert isinstance(steps, list)
    return steps


def _envforge_lines(data: dict[str, Any]) -> list[list[str]]:
    lines: list[list[str]] = []
    for job in data["jobs"].values():
        for step in _steps(job):
            script = str(step.get("run", "")).replace("\\\n", " ")
            for line in script.splitlines():
                if "envforge " not in line or line.strip().startswith("#"):
                    continue
                words = shlex.split(line.split("envforge ", 1)[1].split(")")[0])
                lines.append(words)
    return lines


def test_the_jobs_build_certify_publish_and_check_the_knowledge() -> None:
    data = _workflow()
    jobs = data["jobs"]
    assert jobs["build"]["runs-on"] == "ubuntu-latest"
    assert jobs["certify"]["runs-on"] == ["self-hosted", "gpu", "gfx1031"]
    assert jobs["certify"]["needs"] == "build"
    certify = _steps(jobs["certify"])
    runs = [str(s.get("run", "")) for s in certify]
    assert any("envforge certify" in r and "--summary" in r for r in runs)
    publish = next(s for s in certify if "envforge publish" in str(s.get("run", "")))
    assert "--require-signed" in publish["run"]
    assert "success()" in publish["if"]
    upload = next(
        s for s in certify if str(s.get("uses", "")).startswith("actions/upload-artifact")
    )
    assert upload["if"] == "always()"
    assert "report/" in upload["with"]["path"]
    assert "summary.md" in upload["with"]["path"]
    # "on" is YAML 1.1's True for PyYAML.
    raw: dict[Any, Any] = data
    triggers = raw.get("on") or raw[True]
    assert triggers["schedule"][0]["cron"]
    knowledge = " ".join(str(s.get("run", "")) for s in _steps(jobs["knowledge"]))
    assert "envforge knowledge status" in knowledge
    assert "schedule" in jobs["knowledge"]["if"]


def test_every_envforge_command_line_exists() -> None:
    lines = _envforge_lines(_workflow())
    assert len(lines) >= 5
    ctx = click.Context(cli)
    for words in lines:
        command: click.Command | None = cli.get_command(ctx, words[0])
        rest = words[1:]
        if isinstance(command, click.Group):
            command = command.get_command(ctx, rest[0])
            rest = rest[1:]
        assert command is not None, words
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for word in rest:
            if word.startswith("--"):
                assert word.split("=", 1)[0] in known, (words, word)
