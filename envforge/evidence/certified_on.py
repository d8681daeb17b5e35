"""Where a recipe has passed, in one line: what ``show`` says under "Evidence".

:func:`certified_on` reads :class:`~envforge.evidence.records.Evidence` records;
:func:`describe` says the same from light :class:`PassRow` values (the evidence database
selects just these columns for one recipe: :mod:`envforge.evidence.evidence_db`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from envforge.evidence.records import Evidence

_VERSION = re.compile(r"\d+(?:\.\d+)+")
#: GPU products ``certified_on`` names (most hosts first); the rest are counted.
MAX_CLAUSES = 3


class PassRow(NamedTuple):
    """One passing run: GPU vendor, arch, product, driver, the host it counts as, and its
    time (ISO 8601, UTC: text order is time order)."""

    vendor: str
    arch: str
    product: str
    driver: str
    host: str
    created: str


def host_key(host: str, kernel: str, driver: str, product: str) -> str:
    """Distinct hosts: by anonymous host id; runs without one count by (kernel, driver,
    GPU) -- the best a report without a machine ID allows."""
    return host or f"{kernel}|{driver}|{product}"


def pass_row(r: Evidence) -> PassRow:
    return PassRow(
        r.gpu.vendor,
        r.gpu.arch,
        r.gpu.product,
        r.driver,
        host_key(r.host, r.kernel, r.driver, r.gpu.product),
        r.created.strftime("%Y-%m-%dT%H:%M:%S"),
    )


def _driver_version(driver: str) -> str:
    """``6.8.0`` from ``amdgpu (in-tree, kernel 6.8.0-45-generic)``, ``550.54.14`` from
    ``nvidia 550.54.14``: the first dotted version number, else the text."""
    found = _VERSION.search(driver)
    return found.group(0) if found else driver.strip()


def _version_key(text: str) -> tuple[int, ...]:
    return (
        tuple(int(p) for p in _VERSION.findall(text)[0].split(".")) if _VERSION.search(text) else ()
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _hosts(rows: Iterable[PassRow]) -> int:
    return len({r.host for r in rows})


def certified_on(
    records: Iterable[Evidence], recipe: str, *, gpu: bool = True, arch: str | None = None
) -> str:
    """Where ``recipe`` has passed, as ``show`` says it.

    ``certified on RX 6700 XT (gfx1031), driver 6.8.0, 3 hosts, newest 2026-11-20`` (one
    clause per GPU product, most hosts first, ``;``-separated); passes on hosts without a
    GPU only: ``certified on CPU only, 1 host, newest 2026-11-23 (not yet on any GPU)``;
    no pass: ``not yet certified on any GPU`` (and how many runs failed, if any).

    ``gpu`` False (a CPU recipe, ``gpu.vendor: none``): the hosts' GPUs do not matter, so
    every pass counts as ``certified on CPU only, N hosts, newest D``. ``arch`` (the
    recipe's GPU arch): GPUs of that arch are named first. At most :data:`MAX_CLAUSES`
    GPUs are named; the rest are counted (``and 2 more GPUs``).
    """
    runs = [r for r in records if r.recipe == recipe]
    passes = [pass_row(r) for r in runs if r.outcome == "pass"]
    return describe(len(runs), passes, gpu=gpu, arch=arch)


def describe(
    runs: int, passes: Sequence[PassRow], *, gpu: bool = True, arch: str | None = None
) -> str:
    """:func:`certified_on` from the number of runs and the passing ones."""
    if not passes:
        return "not yet certified on any GPU" + (
            f" ({_plural(runs, 'run')} on record, none passed)" if runs else ""
        )
    on_gpu = [r for r in passes if r.vendor != "none"] if gpu else []
    if not on_gpu:
        newest = max(r.created for r in passes)[:10]
        return f"certified on CPU only, {_plural(_hosts(passes), 'host')}, newest {newest}" + (
            " (not yet on any GPU)" if gpu else ""
        )
    groups: dict[tuple[str, str], list[PassRow]] = {}
    for r in on_gpu:
        groups.setdefault((r.product or r.vendor.upper() + " GPU", r.arch), []).append(r)
    clauses = []
    for (product, gpu_arch), group in sorted(
        groups.items(), key=lambda kv: (kv[0][1] != arch, -_hosts(kv[1]), kv[0])
    ):
        versions = sorted({_driver_version(r.driver) for r in group if r.driver}, key=_version_key)
        driver = ""
        if versions:
            driver = versions[0] if len(versions) == 1 else f"{versions[0]}–{versions[-1]}"
            driver = f", driver {driver}"
        newest = max(r.created for r in group)[:10]
        where = f"{product} ({gpu_arch})" if gpu_arch and gpu_arch != "unknown" else product
        clauses.append(f"{where}{driver}, {_plural(_hosts(group), 'host')}, newest {newest}")
    if len(clauses) > MAX_CLAUSES:
        rest = len(clauses) - MAX_CLAUSES
        clauses = [*clauses[:MAX_CLAUSES], f"and {_plural(rest, 'more GPU')}"]
    return "certified on " + "; ".join(clauses)
