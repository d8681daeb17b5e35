"""``detect``, ``doctor`` and ``lock``: the host side of the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from envforge.cli.common import echo_json, json_option, root_option
from envforge.errors import EnvforgeError
from envforge.host.detect import detect
from envforge.solve.choose import choose, choose_each

if TYPE_CHECKING:
    from envforge.host.detect import HostInfo
    from envforge.solve.choose import ArchChoice, Choice


def _choice_or_error(host: HostInfo) -> tuple[Choice | None, str | None]:
    """What ``auto`` means on ``host`` (the resolver every command uses), or why none."""
    try:
        return choose(host), None
    except EnvforgeError as exc:
        return None, exc.one_line()


@click.command("detect")
@root_option
@json_option
def detect_cmd(root: Path, as_json: bool) -> None:
    """Report this host's GPUs (vendor, product, arch, driver, device nodes) and `auto`.

    Override variables for build machines without the GPU: ENVFORGE_GPU_ARCH (gfx1031,
    sm_90), ENVFORGE_GPU_VENDOR (amd, nvidia, none), ENVFORGE_GPU_COUNT,
    ENVFORGE_GPU_PRODUCT, ENVFORGE_DRIVER_VERSION.
    """
    host = detect(root=root)
    choice, problem = _choice_or_error(host)
    per_arch: tuple[ArchChoice, ...] = choose_each(host) if len(host.archs) > 1 else ()
    if as_json:
        data = host.to_dict()
        data["auto"] = choice.to_dict() if choice else None
        data["auto_error"] = problem
        data["per_arch"] = [a.to_dict() for a in per_arch]
        echo_json(data)
        return
    out = click.echo
    if not host.gpus:
        out("no GPU detected")
    else:
        out(f"{host.count} GPU(s):")
        for g in host.gpus:
            out(
                f"  {g.index}  {g.vendor:<6} {g.product:<28} {g.arch or '?':<8} "
                f"driver {g.driver_version or '?'}  {' '.join(g.device_nodes)}  [{g.source}]"
                + ("  integrated" if g.integrated else "")
            )
        if host.count > 1:
            out("  (select with --gpu INDEX[,INDEX]|all on build, certify, shell and probe)")
    out(
        f"kernel {host.kernel or '?'} ({host.machine}, {host.platform});"
        f" sources: {', '.join(host.sources) or 'none'}"
    )
    for note in host.notes:
        out(f"note: {note}")
    if choice is not None:
        out(f"auto -> {choice.recipe}: {choice.reason}")
    else:
        out(f"auto -> no recipe: {problem}")
    if per_arch:
        out("one recipe per arch:")
        for a in per_arch:
            which = "GPU" + ("s " if len(a.gpus) > 1 else " ") + ",".join(map(str, a.gpus))
            kind = ", integrated" if a.integrated else ""
            if a.choice is not None:
                out(f"  {a.arch} ({which}{kind}) -> {a.choice.recipe}: {a.choice.reason}")
            else:
                out(f"  {a.arch} ({which}{kind}) -> no recipe: {a.problem}")
