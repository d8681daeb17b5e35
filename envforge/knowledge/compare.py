"""The compatibility table against one index listing: what is new or different, as
:class:`~envforge.knowledge.report.Finding` values. Pure: the listings were read already
(:mod:`envforge.knowledge.refresh` reads them and calls these), nothing is fetched here.

:func:`compare_torch` (a torch project page: releases, versions, CPython ranges, yanked
flags), :func:`compare_numpy` (numpy against the releases' breaks), :func:`compare_variant`
(one PyTorch wheel root's torch page), :func:`compare_defaults` (the default build found
in the wheels' metadata); :func:`dedupe` keeps each finding once.
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from envforge.knowledge.index import Listing
from envforge.knowledge.listing import VersionKey, version_key
from envforge.knowledge.propose import default_variant, linux_pythons, range_of
from envforge.knowledge.report import Finding
from envforge.knowledge.table import CompatTable


def compare_defaults(
    table: CompatTable, defaults: dict[str, tuple[str | None, str]]
) -> list[Finding]:
    out = []
    for series, (found, url) in sorted(defaults.items(), key=lambda i: Version(i[0])):
        release = table.series(series)
        if release is None or found is None:
            continue
        known = next((v.name for v in release.variants if v.pypi_default), None)
        if known != found:
            out.append(
                Finding(
                    "default-build",
                    f"torch {series}",
                    f"the index's default build carries CUDA {found} (its metadata's CUDA "
                    f"pins); the table marks {known or 'no variant'} as pypi_default",
                    url,
                )
            )
    return out


def dedupe(findings: Sequence[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for f in findings:
        key = (f.kind, f.subject, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def oldest_known(table: CompatTable) -> VersionKey:
    return min(version_key(v) for v in table.known_versions)


def compare_torch(table: CompatTable, page: Listing) -> list[Finding]:
    out: list[Finding] = []
    listed = page.versions()
    known = set(table.known_versions)
    oldest = oldest_known(table)
    for v in listed:
        if v not in known and version_key(v) >= oldest:
            rng = range_of(linux_pythons(page.files_of(v)))
            extra = f", Linux x86_64 wheels for CPython {rng[0]}-{rng[1]}" if rng else ""
            out.append(
                Finding(
                    "new-release",
                    f"torch {v}",
                    f"listed{extra}; not in the table",
                    page.url,
                    new=True,
                )
            )
    for v in table.known_versions:
        if v not in listed:
            out.append(
                Finding("missing-release", f"torch {v}", "in the table but not listed", page.url)
            )
    for v in page.yanked_versions():
        if v in known:
            out.append(
                Finding("yanked", f"torch {v}", "every file is yanked on the index", page.url)
            )
    for release in table.releases:
        default = default_variant(release)
        for v in release.versions:
            rng = range_of(linux_pythons(page.files_of(v)))
            if rng is None:
                continue
            want = default.python_range(v) if default else (release.python_min, release.python_max)
            if rng != want:
                which = f"+{default.name} (the default build)" if default else ""
                out.append(
                    Finding(
                        "python-range",
                        f"torch {v}",
                        f"Linux x86_64 wheels for CPython {rng[0]}-{rng[1]}; the table says "
                        f"{want[0]}-{want[1]} for {v}{which}",
                        page.url,
                    )
                )
    return out


def compare_numpy(table: CompatTable, page: Listing) -> list[Finding]:
    out: list[Finding] = []
    if not table.numpy_releases:
        return out
    known = {v for n in table.numpy_releases for v in n.versions}
    oldest = min(version_key(v) for v in known)
    by_series: dict[str, list[str]] = {}
    for v in page.versions():
        if version_key(v) >= oldest:
            by_series.setdefault(".".join(v.split(".")[:2]), []).append(v)
    yanked_listed = set(page.yanked_versions())
    for series, versions in by_series.items():
        row = next((n for n in table.numpy_releases if n.series == series), None)
        for v in versions:
            if v not in known:
                out.append(
                    Finding(
                        "numpy-new", f"numpy {v}", "listed; not in the table", page.url, new=True
                    )
                )
        if row is None:
            continue
        rng = range_of([py for v in versions for py in linux_pythons(page.files_of(v))])
        if rng is not None and rng != (row.python_min, row.python_max):
            out.append(
                Finding(
                    "numpy-python",
                    f"numpy {series}",
                    f"Linux x86_64 wheels for CPython {rng[0]}-{rng[1]}; the table says "
                    f"{row.python_min}-{row.python_max}",
                    page.url,
                )
            )
        table_yanked = {v for v, _ in row.yanked}
        for v in sorted(set(versions) & yanked_listed - table_yanked, key=version_key):
            out.append(
                Finding(
                    "numpy-yanked",
                    f"numpy {v}",
                    "yanked on the index; the table lists it as ordinary",
                    page.url,
                )
            )
        for v in sorted(table_yanked - yanked_listed, key=version_key):
            if v in versions:
                out.append(
                    Finding(
                        "numpy-yanked",
                        f"numpy {v}",
                        "the table marks it yanked; the index does not",
                        page.url,
                    )
                )
    return out


def compare_variant(table: CompatTable, variant: str, page: Listing) -> list[Finding]:
    out: list[Finding] = []
    oldest = oldest_known(table)
    versions = sorted(
        {f.version for f in page.files if f.local == variant and not version_key(f.version)[-1]},
        key=version_key,
    )
    for v in versions:
        release = table.release(v)
        if release is None:
            if version_key(v) >= oldest:
                out.append(
                    Finding(
                        "new-release",
                        f"torch {v}",
                        f"{variant} wheels listed; not in the table",
                        page.url,
                        new=True,
                    )
                )
            continue
        row = release.variant(variant)
        if row is None:
            out.append(
                Finding(
                    "new-variant",
                    f"torch {release.series} {variant}",
                    f"{v}+{variant} wheels listed; the table has no {variant} variant "
                    f"for torch {release.series}",
                    page.url,
                    new=True,
                )
            )
            continue
        rng = range_of(linux_pythons(page.files_of(v, variant)))
        if rng is not None and rng != row.python_range(v):
            low, high = row.python_range(v)
            out.append(
                Finding(
                    "python-range",
                    f"torch {v}+{variant}",
                    f"Linux x86_64 wheels for CPython {rng[0]}-{rng[1]}; the table says "
                    f"{low}-{high}",
                    page.url,
                )
            )
    for release in table.releases:
        if release.variant(variant) is None:
            continue
        for v in release.versions:
            if v not in versions:
                out.append(
                    Finding(
                        "missing-variant",
                        f"torch {v}+{variant}",
                        "in the table but not listed",
                        page.url,
                    )
                )
    return out
