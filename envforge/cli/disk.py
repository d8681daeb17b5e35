"""``envforge du`` and ``envforge gc``: what envforge keeps on disk, and reclaiming it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click

from envforge.backends.venv import disk, share
from envforge.core import paths
from envforge.core.diskuse import folder_bytes, human
from envforge.errors import EnvforgeError
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.load import load_recipe_file


def _current_hashes() -> dict[str, str]:
    """Recipe name → its hash now, for every catalogue recipe that loads."""
    out: dict[str, str] = {}
    for name, path in Catalogue.default().files().items():
        try:
            out[name] = load_recipe_file(path).hash
        except EnvforgeError:
            continue  # a recipe that does not load has no current build
    return out


def _uv_cache() -> Path:
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "uv"


def _venvs(older_than: float | None) -> tuple[list[disk.VenvDisk], int]:
    root = paths.venvs_dir()
    found = disk.list_venvs(root)
    measured, total = disk.measure(found)
    running = disk.running_under(v.path for v in measured)
    judged = disk.judge(measured, _current_hashes(), running, time.time(), older_than)
    return judged, total


def _store() -> Path:
    return share.store_dir(paths.state_dir())


def _uv_entry() -> dict[str, Any]:
    return {
        "what": "uv's cache (wheels the venv builds downloaded)",
        "path": str(_uv_cache()),
        "reclaim": "uv cache prune (shared with other uv use; builds download again)",
    }


def _others(uv_cache: bool) -> list[dict[str, Any]]:
    """What else envforge keeps, each with its bytes; uv's cache only with ``uv_cache``
    (measuring it walks every file in it, often hundreds of thousands)."""
    state = paths.state_dir()
    uv = [{**_uv_entry(), "bytes": folder_bytes(_uv_cache())}] if uv_cache else []
    return [
        {
            "what": "shared files no venv links any more",
            "path": str(_store()),
            "bytes": sum(n for _p, n in share.unused(_store())),
            "reclaim": "envforge gc (the files venvs share are counted with the venvs)",
        },
        {
            "what": "evidence (reports and the evidence store)",
            "path": str(paths.reports_dir()),
            "bytes": folder_bytes(paths.reports_dir()) + folder_bytes(state / "evidence.sqlite"),
            "reclaim": "envforge evidence export keeps what matters; the store is yours to keep",
        },
        {
            "what": "envforge's cache (compiled tables)",
            "path": str(paths.cache_dir()),
            "bytes": folder_bytes(paths.cache_dir()),
            "reclaim": "safe to delete: envforge remakes it",
        },
        *uv,
    ]


def _venv_line(v: disk.VenvDisk) -> str:
    shared = f" ({human(v.size - v.own)} shared)" if v.size != v.own else ""
    cert = "certified" if v.certified else "not certified"
    return f"  {v.recipe}/{v.path.name}: {human(v.size)}{shared}, {cert}; {v.verdict}: {v.why}"


@click.command("du")
@click.option(
    "--uv-cache",
    is_flag=True,
    help="Count uv's cache too (it reads every file in it: slow on a large cache).",
)
@click.option("--json", "as_json", is_flag=True, help="Print data as JSON.")
def du_cmd(uv_cache: bool, as_json: bool) -> None:
    """Show what envforge keeps on disk: venvs, caches and evidence, with what reclaims it.

    Files that hard links share between venvs (a project's rebuild keeps the stack's
    files) count once in the total. uv's cache is named but counted only with --uv-cache.
    Images are the engine's: `docker system df`.
    """
    venvs, total = _venvs(older_than=None)
    others = _others(uv_cache)
    skipped = [] if uv_cache else [{**_uv_entry(), "count_with": "envforge du --uv-cache"}]
    free = [v for v in venvs if disk.removable(v)]
    everything = total + sum(o["bytes"] for o in others)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "venvs": [v.to_dict() for v in venvs],
                    "venvs_bytes": total,
                    "others": others,
                    "not_counted": skipped,
                    "total_bytes": everything,
                    "gc_bytes": sum(v.own for v in free),
                },
                indent=2,
            )
        )
        return
    click.echo(f"venvs in {paths.venvs_dir()}: {len(venvs)}, {human(total)} on disk")
    for v in venvs:
        click.echo(_venv_line(v))
    for o in others:
        click.echo(f"{o['what']} in {o['path']}: {human(o['bytes'])} ({o['reclaim']})")
    for o in skipped:
        click.echo(f"{o['what']} in {o['path']}: not counted ({o['count_with']} counts it)")
    click.echo(f"total: {human(everything)}" + (" (uv's cache not counted)" if skipped else ""))
    if free:
        click.echo(
            f"envforge gc removes {len(free)} venv(s), {human(sum(v.own for v in free))} "
            "(--dry-run to see them first)"
        )


@click.command("gc")
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    metavar="DAYS",
    help="Also remove venvs no catalogue recipe builds now, last built or certified "
    "more than DAYS ago.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print data as JSON.")
def gc_cmd(older_than: float | None, dry_run: bool, as_json: bool) -> None:
    """Remove venvs no project or recipe uses: superseded builds, projects gone.

    A venv a running process uses is never removed. Leftovers of killed builds are swept.
    """
    venvs, _total = _venvs(older_than)
    gone = [v for v in venvs if disk.removable(v)]
    swept: list[Path] = []
    if not dry_run:
        for v in gone:
            disk.remove(v)
        swept = disk.sweep(paths.venvs_dir())
    orphans = share.unused(_store())
    if not dry_run:
        for path, _n in orphans:
            path.unlink(missing_ok=True)
        share.prune_memo(_store())
    if as_json:
        click.echo(
            json.dumps(
                {
                    "removed" if not dry_run else "would_remove": [v.to_dict() for v in gone],
                    "kept": [v.to_dict() for v in venvs if not disk.removable(v)],
                    "swept": [str(p) for p in swept],
                    "store_files": len(orphans),
                    "bytes": sum(v.own for v in gone) + sum(n for _p, n in orphans),
                },
                indent=2,
            )
        )
        return
    verb = "would remove" if dry_run else "removed"
    for v in gone:
        click.echo(f"{verb} {v.path} ({human(v.own)}): {v.verdict}: {v.why}")
    for p in swept:
        click.echo(f"swept {p} (left by a killed envforge)")
    if orphans:
        click.echo(
            f"{verb} {len(orphans)} shared file(s) no venv links, "
            f"{human(sum(n for _p, n in orphans))} ({_store()})"
        )
    kept = len(venvs) - len(gone)
    click.echo(f"{verb} {len(gone)} venv(s), {human(sum(v.own for v in gone))}; kept {kept} in use")
