"""``envforge audit``: check any Python environment's shared objects and packages."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from envforge.audit.collect import collect_python, venv_python
from envforge.audit.image import collect_image
from envforge.audit.render import text_lines
from envforge.audit.run import check_arch, host_arch, judge
from envforge.backends.docker.audit_target import image_targets
from envforge.cli.common import echo_json, json_option, python_option
from envforge.errors import CertificationFailed, InvalidInput, printable
from envforge.knowledge import load_table
from envforge.knowledge.gpu_names import arch_for_name

if TYPE_CHECKING:
    from envforge.audit.model import Collected


@click.command()
@click.argument("target", required=False, metavar="[VENV_DIR|IMAGE]")
@python_option("Audit this interpreter's environment.")
@click.option(
    "--arch",
    "arch",
    metavar="ARCH|GPU",
    default=None,
    help="GPU arch (sm_90, gfx1030) or GPU by name (MI300X, 'RTX 4090') to check GPU "
    "code against (default: this host's GPU; none: GPU code is skipped).",
)
@json_option
def audit(target: str | None, python: str | None, arch: str | None, as_json: bool) -> None:
    """Check an environment: GPU code, duplicate libraries, extensions, companions.

    TARGET is a virtualenv folder or a Docker image (run inside it, no GPU needed);
    --python PATH audits that interpreter's environment. Exit 0 when clean, 1 when a
    check finds a problem, 2 for bad input, 4 when the interpreter or engine is missing.
    """
    started = time.monotonic()
    if (target is None) == (python is None):
        raise InvalidInput(
            "audit needs one of VENV_DIR, IMAGE or --python PATH",
            hint="envforge audit .venv, envforge audit --python /usr/bin/python3",
        )
    if arch is not None and check_arch(arch):  # a GPU by name (--arch MI300X), else exit 2
        named = arch_for_name(arch, load_table(), what="--arch")
        click.echo(f"envforge: --arch {arch} -> {named}", err=True)
        arch = named
    collected = _collect(target, python)
    chosen: str | None = arch
    source, reason = "--arch", ""
    if arch is None:
        chosen, reason = host_arch()
        source = "detected" if chosen else "none"
    report = judge(collected, chosen, arch_source=source, skip_reason=reason, started=started)
    if as_json:
        echo_json(report.to_dict())
    else:
        for line in text_lines(report):
            click.echo(line)
    if not report.ok:
        failed = ", ".join(c.name for c in report.checks if c.status == "fail")
        raise CertificationFailed(
            f"audit found problems ({failed})", hint="see the FAIL lines above"
        )


def _collect(target: str | None, python: str | None) -> Collected:
    if python is not None:
        return collect_python(python)
    assert target is not None
    path = Path(target)
    if path.is_dir():
        exe = venv_python(path)
        return collect_python(str(exe), f"venv {printable(str(path))}")
    if path.exists():
        raise InvalidInput(
            f"{printable(target)} is a file, not a virtualenv folder",
            hint=f"envforge audit --python {printable(target)}",
        )
    if target.startswith(("/", ".", "~")):
        raise InvalidInput(
            f"{printable(target)} does not exist",
            hint="pass a virtualenv folder, --python PATH, or an image reference",
        )

    return collect_image(target, image_targets(target))
