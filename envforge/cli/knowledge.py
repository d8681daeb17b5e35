"""``knowledge show``, ``refresh`` and ``status``: the compatibility table (with overlays)
and the table against the indexes."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click

from envforge.cli.common import OutputPath, echo_json, json_option
from envforge.core.fsutil import check_file_target, write_atomically
from envforge.core.net import (
    DEADLINE_ENV,
    DEFAULT_DEADLINE,
    Deadline,
    Policy,
    deadline_seconds,
    origin_of,
)
from envforge.errors import InvalidInput, Unavailable, printable
from envforge.knowledge import load_table
from envforge.knowledge.index import IndexClient, default_cache_dir, pip_index_url
from envforge.knowledge.refresh import STALE_DAYS, refresh, status
from envforge.knowledge.table import CudaToolkit


def register(group: click.Group) -> None:
    group.add_command(knowledge)


@click.group()
def knowledge() -> None:
    """The compatibility table: show it (with overlays), compare it with the indexes."""


@knowledge.command("show")
@json_option
def show_cmd(*, as_json: bool) -> None:
    """Print the merged table: the shipped table and the overlays from
    ENVFORGE_KNOWLEDGE_PATH and $XDG_CONFIG_HOME/envforge/knowledge/, each row with the
    file it came from."""
    table = load_table()
    if as_json:
        echo_json(dataclasses.asdict(table))
        return
    out = click.echo
    out("table files (a later one's rows replace an earlier one's):")
    for layer in table.layers:
        out(f"  {layer}")
    out(f"index root: {table.index_root}")
    for r in table.releases:
        checked = f", checked {r.checked}" if r.checked else ""
        out(f"torch {r.series}: {', '.join(r.versions)}  [{r.origin}]")
        out(
            f"  CPython {r.python_min}-{r.python_max}{checked}"
            + (f", NumPy breaks {r.numpy_breaks}" if r.numpy_breaks else "")
        )
        for v in r.variants:
            default = ", default build" if v.pypi_default else ""
            archs = f", archs {' '.join(v.archs)}" if v.archs else ""
            out(
                f"  {v.name:<10} py{v.python_min}-{v.python_max} {v.form} {v.index} "
                f"[{v.confidence}{default}]{archs}  [{v.origin}]"
            )
    sections = (
        ("numpy series", [(n.series, n.origin) for n in table.numpy_releases]),
        ("HSA overrides", [(o.arch, o.origin) for o in table.overrides]),
        ("base images", [(b.distro, b.origin) for b in table.base_images]),
        ("driver floors", [(f"CUDA {f.cuda_major}", f.origin) for f in table.driver_floors]),
        ("CUDA toolkits", [(_toolkit(k), k.origin) for k in table.cuda_toolkits]),
        ("archs", [(a.arch, a.origin) for a in (*table.amd_archs, *table.nvidia_archs)]),
    )
    for title, rows in sections:
        by_file: dict[str, list[str]] = {}
        for name, origin in rows:
            by_file.setdefault(origin, []).append(name)
        for origin, names in by_file.items():
            out(f"{title}: {', '.join(names)}  [{origin}]")


def _toolkit(kit: CudaToolkit) -> str:
    used = f"torch {'/'.join(kit.torch)}" if kit.torch else "no torch yet"
    return f"{kit.version} ({kit.released}, {used})"


def _client_options(func: Any) -> Any:
    func = click.option(
        "--deadline",
        type=click.FloatRange(min=0.1, max=86400),
        default=None,
        help=f"Seconds the whole command may spend on the network (default: "
        f"${DEADLINE_ENV}, else {DEFAULT_DEADLINE:g}); what did not answer by then is "
        "reported as not checked.",
    )(func)
    func = click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        help="Seconds to wait for each request (connect, and between bytes).",
    )(func)
    return click.option(
        "--max-age",
        type=click.FloatRange(min=0),
        default=600.0,
        show_default=True,
        help="Use a cached listing younger than this without asking the index "
        "(0: always revalidate with ETag / Last-Modified). Cache: $ENVFORGE_HOME/cache/index.",
    )(func)


def _client(urls: list[str], timeout: float, max_age: float, deadline: float | None) -> IndexClient:
    """The index client for ``urls``: their hosts only (and ENVFORGE_INDEX_MIRROR's,
    ENVFORGE_ALLOW_HOSTS'), one overall deadline starting now."""
    try:
        seconds = deadline_seconds(deadline)
    except ValueError as exc:
        raise InvalidInput(str(exc), hint=f"unset {DEADLINE_ENV} or pass --deadline") from None
    for url in urls:
        if origin_of(url) is None:
            raise InvalidInput(
                f"{url!r} is not an http(s) URL",
                hint="pass --index / --pytorch-index http(s)://HOST/PATH",
            )
    return IndexClient(
        cache_dir=default_cache_dir(),
        timeout=timeout,
        max_age=max_age,
        policy=Policy.for_urls(urls),
        deadline=Deadline.start(seconds),
    )


def _default_index() -> str:
    url = pip_index_url()
    if not url:
        raise InvalidInput(
            "no --index given and pip names no index", hint="pass --index URL (a simple-API root)"
        )
    return url


@knowledge.command("refresh")
@click.option(
    "--index",
    "indexes",
    multiple=True,
    metavar="URL",
    help="Simple-API root (repeatable; project pages URL/torch/, URL/numpy/). "
    "Default: the index pip is configured with.",
)
@click.option(
    "--pytorch-index",
    "pytorch_indexes",
    multiple=True,
    metavar="URL",
    help="PyTorch wheel root whose variant indexes are URL/<variant>/torch/ (repeatable). "
    "Default: the table's index_root.",
)
@click.option("--no-pytorch-index", is_flag=True, help="Read no PyTorch variant index.")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Exit 0 when some listings answered although others did not (scheduled jobs); "
    "without it, anything not checked is exit 4.",
)
@click.option(
    "-o",
    "--output",
    type=OutputPath(dir_okay=False),
    help="Write the proposed rows (confidence: uncertain) to this overlay file.",
)
@_client_options
@json_option
def refresh_cmd(
    *,
    indexes: tuple[str, ...],
    pytorch_indexes: tuple[str, ...],
    no_pytorch_index: bool,
    allow_partial: bool,
    output: Path | None,
    timeout: float,
    max_age: float,
    deadline: float | None,
    as_json: bool,
) -> None:
    """List what the indexes publish that the table lacks or states differently.

    Exit 4 when anything could not be checked (a listing or metadata file that did not
    answer in time, was refused, too large or malformed), naming it; with
    --allow-partial only when no listing answered.
    """
    if output is not None:  # before any request: a device, FIFO or folder is exit 2
        check_file_target(output, setting="-o")
    table = load_table()
    roots = list(indexes) or [_default_index()]
    proots = [] if no_pytorch_index else (list(pytorch_indexes) or [table.index_root])
    client = _client([*roots, *proots], timeout, max_age, deadline)
    report = refresh(table, client, roots, proots)
    if output is not None:
        write_atomically(output, report.overlay_yaml(), setting="-o")
    if as_json:
        data = report.to_dict()
        data["output"] = None if output is None else str(output)
        echo_json(data)
    else:
        for line in report.lines():
            click.echo(printable(line))
        if output is not None:
            click.echo(f"wrote {len(report.proposed)} proposed row(s) to {output}")
    if not report.complete and not allow_partial:
        sys.stdout.flush()
        raise Unavailable(
            report.summary(), hint="check the network and --deadline, or pass --allow-partial"
        )


@knowledge.command("status")
@click.option(
    "--index",
    metavar="URL",
    help="Simple-API root to compare with (default: the index pip is configured with).",
)
@click.option(
    "--stale-days",
    type=click.IntRange(min=0),
    default=STALE_DAYS,
    show_default=True,
    help="Report rows whose checked date is older than this.",
)
@_client_options
@json_option
def status_cmd(
    *,
    index: str | None,
    stale_days: int,
    timeout: float,
    max_age: float,
    deadline: float | None,
    as_json: bool,
) -> None:
    """Is the table current? Exit 0 when it knows every release the index lists, 1 when
    the index lists a release the table lacks (4: the index did not answer in time,
    was refused, too large or malformed: nothing was checked)."""
    table = load_table()
    root = index or _default_index()
    client = _client([root], timeout, max_age, deadline)
    report = status(table, client, root, stale_days=stale_days)
    if as_json:
        echo_json(report.to_dict())
    else:
        for line in report.lines():
            click.echo(printable(line))
    if not report.current:
        sys.stdout.flush()
        raise SystemExit(1)
