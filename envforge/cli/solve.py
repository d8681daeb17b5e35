"""``envforge solve ARCH|auto``: a stack for any GPU arch, derived from the table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envforge.cli.common import (
    OutputPath,
    detect_host,
    echo_json,
    json_option,
    platform_option,
    say,
    strict_mode,
    strict_option,
)
from envforge.core.fsutil import check_file_target, write_atomically
from envforge.core.pep508 import canonical_name
from envforge.errors import InvalidInput
from envforge.knowledge import load_table
from envforge.knowledge.gpu_names import arch_for_name
from envforge.knowledge.platforms import solve_default
from envforge.knowledge.table import CompatTable
from envforge.recipe import compiled
from envforge.solve.beside import Beside, for_solution
from envforge.solve.solver import Solution, SolveRequest, solve

if TYPE_CHECKING:
    from envforge.stack import Pin


def register(group: click.Group) -> None:
    group.add_command(solve_cmd)


@click.command("solve")
@click.argument("arch", metavar="ARCH|GPU|auto")
@click.option("--torch", "torch_version", metavar="VERSION", help="Solve for this torch release.")
@click.option("--python", metavar="X.Y", help="Use this CPython (with a base image that ships it).")
@click.option("--base-image", metavar="REF", help="Use this base image (its Python).")
@click.option(
    "--driver", metavar="VERSION", help="NVIDIA driver version (default: the detected one)."
)
@click.option(
    "--conservative",
    is_flag=True,
    help="The stack with the most evidence (an older release, the package-index default build).",
)
@click.option(
    "--latest",
    is_flag=True,
    help="The newest stack, uncertain choices allowed (default: the newest stack whose every "
    "choice is verified).",
)
@strict_option
@platform_option
@click.option(
    "--write",
    "write",
    type=OutputPath(dir_okay=False),
    metavar="FILE",
    help="Write the stack as a recipe YAML (named after the arch) that validate accepts.",
)
@click.option(
    "--with",
    "with_names",
    metavar="NAMES",
    help="Pin these companions (comma-separated: torchvision,torchaudio) to the solved torch.",
)
@json_option
def solve_cmd(
    *,
    arch: str,
    torch_version: str | None,
    python: str | None,
    base_image: str | None,
    driver: str | None,
    conservative: bool,
    latest: bool,
    platform: str | None,
    write: Path | None,
    with_names: str | None,
    as_json: bool,
) -> None:
    """Derive the stack for a GPU arch (or the detected one) from the compatibility table.

    ARCH is an arch (gfx1100, sm_89) or a GPU as the table names it ("RX 7900 XTX",
    "RTX 4090", H200, MI300X, "Strix Halo"; case and vendor words ignored).

    The newest torch whose every choice is verified and whose wheel has code for the arch
    (--latest: the newest, uncertain choices allowed; --conservative: the most evidence),
    the newest Python a known base image ships, the NumPy bound and env vars; each choice
    with its reason and source, plus the runner-up stacks. --platform picks the wheels'
    platform (default: the arch's own for Jetson/GB10/Thor, else this host's).

    An arch the table has no row for (sm_122, gfx1154) is predicted from its ISA family
    (same-major SASS or PTX JIT; LLVM's generic AMDGPU targets): confidence "predicted,
    not verified", a warning on stderr; --strict (or ENVFORGE_STRICT=1) refuses it (exit 2).
    """
    if write is not None:  # before any work: a device, FIFO or folder is exit 2
        check_file_target(write, setting="--write")
    detected = ""
    if arch == "auto":
        host = detect_host()
        gpu = host.primary
        if gpu is None or gpu.arch is None:
            raise InvalidInput(
                "no GPU with a known arch detected",
                hint="name the arch (envforge solve gfx1100), or set ENVFORGE_GPU_ARCH",
            )
        arch = gpu.arch
        detected = f"detected {gpu.product} ({gpu.arch}, GPU {gpu.index})"
        if driver is None and gpu.vendor == "nvidia" and gpu.driver_version:
            driver = gpu.driver_version
    table = load_table()
    if not detected:
        arch = named_arch(arch, table)
    request = SolveRequest(
        arch=arch,
        torch=torch_version,
        python=python,
        base_image=base_image,
        driver=driver,
        conservative=conservative,
        latest=latest,
        platform=platform or solve_default(),
        strict=strict_mode(),
    )
    solution = solve(request, table)
    if solution.prediction:
        say(predicted_warning(solution))
    data, pins = _with_companions(solution, with_names)
    beside = for_solution(solution)  # the curated recipe for the arch, when it differs: why
    if write is not None:
        text = "# Solved by `envforge solve`; review before curating.\n"
        text += compiled.recipe_yaml(data)
        write_atomically(write, text, setting="--write")
        click.echo(f"wrote {write} (recipe {solution.arch})", err=True)
    if as_json:
        out = solution.to_dict()
        if detected:
            out["detected"] = detected
        out["companions"] = [p.to_dict() for p in pins]
        out["curated"] = beside.to_dict() if beside is not None else None
        echo_json(out)
        return
    _print(solution, detected, pins, beside)


def predicted_warning(solution: Solution) -> str:
    """The one-line stderr warning for an answer predicted from the arch's ISA family."""
    s = solution.stack
    return (
        f"warning: {solution.arch} has no row in the compatibility table: torch {s.torch}+"
        f"{s.variant} ({s.via} {s.runs}) is predicted, not verified, from its ISA family "
        "(--strict refuses it)"
    )


def named_arch(text: str, table: CompatTable) -> str:
    """The arch ``text`` names (an arch, or a GPU by the table's names); a GPU name's arch
    is said on stderr in one line. Exit 2 listing the candidates for an inexact name."""
    arch = arch_for_name(text, table)
    if arch != text.strip().lower():
        say(f"{text} -> {arch}")
    return arch


def _with_companions(
    solution: Solution, names: str | None
) -> tuple[dict[str, Any], tuple[Pin, ...]]:
    """The solution's recipe data with ``packages`` pinning the companions ``names`` asks
    for (the pairing releases, as the stack pins them), and those pins."""
    data = solution.recipe_dict()
    wanted = [n.strip() for n in (names or "").split(",") if n.strip()]
    if not wanted:
        return data, ()
    from envforge.knowledge.companions import companion_names  # noqa: PLC0415 - --with only

    known = companion_names()
    for name in wanted:
        if canonical_name(name) not in known:
            raise InvalidInput(
                f"--with: {name!r} is not a companion envforge pins",
                hint="one or more of " + ", ".join(sorted(known)),
            )
    from envforge.stack import stack_of  # noqa: PLC0415 - --with only: the plain solve prints no pin

    recipe = compiled.parse_recipe({**data, "packages": wanted}, "envforge solve --with")
    pins = stack_of(recipe).companions
    data["packages"] = [p.requirement for p in pins]
    return data, pins


def _print(
    solution: Solution, detected: str, pins: tuple[Pin, ...], beside: Beside | None = None
) -> None:
    out = click.echo
    s = solution.stack
    if detected:
        out(detected)
    products = ", ".join(solution.products) or "-"
    out(f"{solution.arch}: {solution.family} ({products})")
    out(
        f"  stack      torch {s.torch}+{s.variant} py{s.python} on {s.base_image} "
        f"({solution.mode}, {s.platform}, "
        f"{'predicted, not verified' if solution.prediction else s.confidence})"
    )
    for line in beside.solve_lines() if beside is not None else ():
        out(line)
    out("\nChoices:")
    for p in solution.picks:
        out(f"  {p.key} = {p.value}  ({p.confidence})")
        out(f"      why: {p.reason}")
        out(f"      source: {p.source}")
    for c in pins:
        out(f"  {c.requirement}")
        out(f"      why: {c.reason}")
        out(f"      source: {c.source}")
    if s.doubts:
        out("\nUncertain:")
        for d in s.doubts:
            out(f"  - {d}")
    if solution.runner_ups:
        out("\nRunner-ups:")
        for r in solution.runner_ups:
            out(f"  - {r.label} on {r.base_image} ({r.via} {r.runs}, {r.confidence})")
    for note in solution.notes:
        out(f"\nnote: {note}")
