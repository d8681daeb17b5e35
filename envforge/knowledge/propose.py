"""Overlay rows proposed by ``knowledge refresh -o``: for each series with a new release
or variant, the table's row extended (or a new row), every new fact ``confidence:
uncertain`` with the listing URL and date as its source (same schema as compat.yaml)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packaging.version import Version

from envforge.knowledge.listing import IndexFile, Listing
from envforge.knowledge.report import Finding
from envforge.knowledge.table import CompatTable, Release, Variant, series_of


def range_of(pythons: Sequence[str]) -> tuple[str, str] | None:
    if not pythons:
        return None
    ordered = sorted(set(pythons), key=lambda p: tuple(int(x) for x in p.split(".")))
    return ordered[0], ordered[-1]


def linux_pythons(files: Sequence[IndexFile]) -> list[str]:
    return [py for f in files if f.linux_x86_64 and f.is_wheel for py in f.pythons]


def default_variant(release: Release) -> Variant | None:
    return next((v for v in release.variants if v.pypi_default), None)


def _variant_row(v: Variant) -> dict[str, Any]:
    row: dict[str, Any] = {"name": v.name}
    if v.form == "extra-index-url":
        row["form"] = v.form
    row["python"] = [v.python_min, v.python_max]
    row["python_source"] = v.python_source
    if v.pypi_default:
        row["pypi_default"] = True
    if v.kind == "cuda":
        row["sm"] = list(v.archs)
        row["sm_source"] = v.arch_source(v.archs[0]) if v.archs else v.source
        if v.archs_uncertain:
            row["sm_confidence"] = "uncertain"
        if v.ptx:
            row["ptx"] = v.ptx
    row["confidence"] = v.confidence
    row["source"] = v.source
    if v.note:
        row["note"] = v.note
    return row


def _release_row(r: Release) -> dict[str, Any]:
    row: dict[str, Any] = {
        "series": r.series,
        "versions": list(r.versions),
        "checked": r.checked or None,
        "python": [r.python_min, r.python_max],
        "python_source": "see the variants",
    }
    if r.numpy_breaks:
        row["numpy_breaks"] = r.numpy_breaks
    if r.numpy_source:
        row["numpy_source"] = r.numpy_source
    row["source"] = r.source
    if r.note:
        row["note"] = r.note
    row["variants"] = [_variant_row(v) for v in r.variants]
    return {k: v for k, v in row.items() if v is not None}


def _template(table: CompatTable, name: str) -> Variant | None:
    """The newest known variant of that name, else the newest of the same kind."""
    for r in reversed(table.releases):
        v = r.variant(name)
        if v is not None:
            return v
    kind = "rocm" if name.startswith("rocm") else "cuda" if name.startswith("cu") else "cpu"
    for r in reversed(table.releases):
        for v in reversed(r.variants):
            if v.kind == kind:
                return v
    return None


def propose(  # noqa: PLR0917
    table: CompatTable,
    findings: Sequence[Finding],
    torch_pages: Sequence[Listing],
    variant_pages: Sequence[tuple[str, Listing]],
    defaults: dict[str, tuple[str | None, str]],
    day: str,
) -> list[dict[str, Any]]:
    """One overlay row per series with a new release or variant."""
    new_versions = _new_versions(findings)
    new_variants = _new_variants(findings, variant_pages, new_versions)
    rows: list[dict[str, Any]] = []
    for series in sorted(set(new_versions) | set(new_variants), key=Version):
        known = table.series(series)
        versions = sorted(new_versions.get(series, set()), key=Version)
        if known is not None:
            row = _extended_row(known, versions, findings, day)
        else:
            row = _new_release_row(table, series, versions, torch_pages, day)
        present = {v["name"] for v in row["variants"]}
        for name, url in new_variants.get(series, {}).items():
            if name not in present:
                row["variants"].append(_new_variant_row(table, name, row, url, day))
        if known is None:
            _mark_default(table, row, defaults.get(series, (None, "")), day)
        rows.append(row)
    return rows


def _new_versions(findings: Sequence[Finding]) -> dict[str, set[str]]:
    """series -> the new torch versions the findings name."""
    out: dict[str, set[str]] = {}
    for f in findings:
        if f.kind == "new-release":
            v = f.subject.split()[-1]
            out.setdefault(series_of(v), set()).add(v)
    return out


def _new_variants(
    findings: Sequence[Finding],
    variant_pages: Sequence[tuple[str, Listing]],
    new_versions: dict[str, set[str]],
) -> dict[str, dict[str, str]]:
    """series -> variant -> the URL of the listing that shows it."""
    out: dict[str, dict[str, str]] = {}
    for f in findings:
        if f.kind == "new-variant":
            _, series, name = f.subject.split()
            out.setdefault(series, {})[name] = f.url
    for variant, page in variant_pages:
        for fi in page.files:
            if fi.local == variant and series_of(fi.version) in new_versions:
                out.setdefault(series_of(fi.version), {})[variant] = page.url
    return out


def _extended_row(
    known: Release, versions: Sequence[str], findings: Sequence[Finding], day: str
) -> dict[str, Any]:
    row = _release_row(known)
    row["versions"] = sorted(set(row["versions"]) | set(versions), key=Version)
    row["checked"] = day
    if versions:
        subjects = {f"torch {v}" for v in versions}
        url = next((f.url for f in findings if f.subject in subjects), "")
        row["source"] = f"{row['source']}; {url} lists {', '.join(versions)} ({day}) [?]"
    return row


def _mark_default(
    table: CompatTable, row: dict[str, Any], default: tuple[str | None, str], day: str
) -> None:
    """A new series: its default build as the metadata says, else assumed like the
    newest known series."""
    default_name, default_url = default
    if default_name is not None:
        same = [v for v in row["variants"] if v["name"] == default_name]
        if same:
            same[0]["pypi_default"] = True
        else:
            added = _new_variant_row(table, default_name, row, default_url, day)
            added["pypi_default"] = True
            row["variants"].insert(0, added)
    if not row["variants"]:
        prev = default_variant(table.releases[-1])
        assumed = prev.name if prev is not None else "cpu"
        guess = _new_variant_row(table, assumed, row, "", day)
        guess["source"] = f"assumed like torch {table.releases[-1].series} +{assumed} [?]"
        row["variants"].append(guess)


def _new_release_row(
    table: CompatTable,
    series: str,
    versions: Sequence[str],
    pages: Sequence[Listing],
    day: str,
) -> dict[str, Any]:
    pythons: list[str] = []
    url = ""
    for page in pages:
        for v in versions:
            found = linux_pythons(page.files_of(v))
            if found:
                pythons += found
                url = url or page.url
    rng = range_of(pythons) or (table.releases[-1].python_min, table.releases[-1].python_max)
    cite = f"{url or 'the PyTorch variant indexes'} (listed {day}) [?]"
    return {
        "series": series,
        "versions": list(versions),
        "checked": day,
        "python": [rng[0], rng[1]],
        "python_source": cite if pythons else f"assumed like torch {table.releases[-1].series} [?]",
        "source": cite,
        "variants": [],
    }


def _new_variant_row(
    table: CompatTable, name: str, release_row: dict[str, Any], url: str, day: str
) -> dict[str, Any]:
    cite = f"{url} (listed {day}) [?]" if url else f"{day} [?]"
    row: dict[str, Any] = {"name": name}
    if Version(release_row["series"]) < Version("2.0"):
        row["form"] = "extra-index-url"
    row["confidence"] = "uncertain"
    row["source"] = cite
    if name.startswith("cu"):
        tmpl = _template(table, name)
        row["sm"] = list(tmpl.archs) if tmpl is not None and tmpl.archs else ["sm_75"]
        row["sm_confidence"] = "uncertain"
        row["sm_source"] = (
            f"assumed like torch {tmpl.series} +{tmpl.name} [?]"
            if tmpl is not None
            else "unknown [?]"
        )
    return row
