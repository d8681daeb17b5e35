"""Compare the compatibility table with what the package indexes list.

:func:`refresh` reads the torch and numpy project pages of each simple-API root
(``--index``), the per-variant torch pages of each PyTorch wheel root (``--pytorch-index``,
``ROOT/<variant>/torch/``) and the PEP 658 metadata of one Linux x86_64 wheel per torch
series (its CUDA pins name the default build). It reports what is new (a release, a
version, a variant the table lacks) or different (CPython range, default build, yanked
flags) as :class:`Finding` values, every index that did not answer as an
:class:`~envforge.knowledge.index.IndexProblem`, and proposes overlay rows (same schema
as ``compat.yaml``), each ``confidence: uncertain`` with the listing URL and date as its
source.

:func:`status` is the cheap check for CI: the newest release the table knows against the
newest the index lists, the releases missing, and the rows not checked for too long.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from packaging.version import Version

from envforge.errors import Unavailable
from envforge.knowledge.index import (
    IndexClient,
    IndexFile,
    IndexProblem,
    Listing,
    cuda_variant,
    requires_dist,
)
from envforge.knowledge.table import CompatTable, Release, Variant, series_of

#: rows whose ``checked`` date is older than this are reported by ``status``
STALE_DAYS = 90
#: wheels of one series whose PEP 658 metadata is tried before giving up
METADATA_TRIES = 4


@dataclass(frozen=True)
class Finding:
    """One difference between an index and the table.

    kind: new-release, missing-release, yanked, python-range, default-build,
    new-variant, missing-variant, numpy-new, numpy-python, numpy-yanked.
    ``new`` is True when the index lists something the table lacks.
    """

    kind: str
    subject: str
    message: str
    url: str
    new: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "message": self.message,
            "url": self.url,
            "new": self.new,
        }


@dataclass(frozen=True)
class RootSummary:
    root: str
    role: str  # "index" or "pytorch-index"
    asked: int
    answered: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "role": self.role,
            "asked": self.asked,
            "answered": self.answered,
        }


@dataclass(frozen=True)
class RefreshReport:
    date: str
    roots: tuple[RootSummary, ...]
    findings: tuple[Finding, ...]
    problems: tuple[IndexProblem, ...]
    #: notes that are no difference (e.g. a default build the metadata cannot tell)
    notes: tuple[str, ...]
    #: torch versions the package index(es) list, oldest first
    torch_versions: tuple[str, ...]
    proposed: tuple[dict[str, Any], ...]
    seconds: float
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def new(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.new)

    def to_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "roots": [r.to_dict() for r in self.roots],
            "findings": [f.to_dict() for f in self.findings],
            "problems": [
                {"url": p.url, "kind": p.kind, "reason": p.reason, "status": p.status}
                for p in self.problems
            ],
            "notes": list(self.notes),
            "torch_versions": list(self.torch_versions),
            "proposed": list(self.proposed),
            "seconds": round(self.seconds, 3),
            "requests": dict(self.requests),
        }

    def lines(self) -> list[str]:
        out = []
        for r in self.roots:
            what = "answered" if r.answered == r.asked else f"{r.answered} of {r.asked} answered"
            if r.answered == 0:
                what = "did not answer (skipped)"
            out.append(f"{r.role} {r.root}: {r.asked} listing(s), {what}")
        new = [f for f in self.findings if f.new]
        other = [f for f in self.findings if not f.new]
        if new:
            out.append("new on the index (not in the table):")
            out.extend(f"  {f.subject}: {f.message} ({f.url})" for f in new)
        if other:
            out.append("different from the table:")
            out.extend(f"  {f.subject}: {f.message} ({f.url})" for f in other)
        if not self.findings:
            out.append("the table matches every listing that answered")
        out.extend(f"note: {n}" for n in self.notes)
        out.extend(f"problem: {line}" for line in _problem_lines(self.problems))
        req = self.requests
        out.append(
            f"{len(self.torch_versions)} torch versions listed; {req.get('network', 0)} "
            f"request(s), {req.get('revalidated', 0)} revalidated, {req.get('cache', 0)} from "
            f"cache, {req.get('failed', 0)} failed; {self.seconds:.2f} s"
        )
        return out

    def overlay_yaml(self) -> str:
        head = (
            f"# envforge knowledge refresh {self.date}: proposed rows (review before use).\n"
            "# Every fact here comes from an index listing and is confidence: uncertain.\n"
        )
        body = {"schema": 1, "releases": list(self.proposed)}
        return head + yaml.safe_dump(body, sort_keys=False, width=100)


def _problem_lines(problems: Sequence[IndexProblem]) -> list[str]:
    """One line per problem; problems of one kind and reason under one root are merged."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for p in problems:
        root = p.url.rstrip("/").rsplit("/", 2)[0]
        groups.setdefault((root, p.kind, p.reason), []).append(p.url)
    out = []
    for (root, kind, reason), urls in groups.items():
        if len(urls) == 1:
            out.append(f"{urls[0]}: {kind}: {reason}")
        else:
            out.append(f"{root}/... ({len(urls)} listings): {kind}: {reason}")
    return out


# --------------------------------------------------------------------------- refresh


def refresh(
    table: CompatTable,
    client: IndexClient,
    indexes: Sequence[str],
    pytorch_indexes: Sequence[str] = (),
    *,
    today: datetime.date | None = None,
) -> RefreshReport:
    """Read the indexes and compare them with ``table``; raises Unavailable (exit 4)
    only when no listing at all answered."""
    started = time.monotonic()
    day = (today or datetime.datetime.now(datetime.timezone.utc).date()).isoformat()
    variant_names = _variant_names(table)
    jobs: list[tuple[str, str, str]] = []  # (role, root, project)
    for root in indexes:
        jobs += [("index", root.rstrip("/"), "torch"), ("index", root.rstrip("/"), "numpy")]
    for proot in pytorch_indexes:
        jobs += [("pytorch-index", f"{proot.rstrip('/')}/{v}", "torch") for v in variant_names]
    results = client.map(lambda job: client.listing(job[1], job[2]), jobs)

    problems: list[IndexProblem] = []
    findings: list[Finding] = []
    notes: list[str] = []
    summaries: dict[tuple[str, str], list[int]] = {}
    torch_pages: list[Listing] = []
    numpy_pages: list[Listing] = []
    variant_pages: list[tuple[str, Listing]] = []
    for (role, root, project), got in zip(jobs, results):
        key = (role, root if role == "index" else root.rsplit("/", 1)[0])
        counts = summaries.setdefault(key, [0, 0])
        counts[0] += 1
        if isinstance(got, IndexProblem):
            problems.append(got)
            continue
        counts[1] += 1
        if role == "pytorch-index":
            variant_pages.append((root.rsplit("/", 1)[1], got))
        elif project == "torch":
            torch_pages.append(got)
        else:
            numpy_pages.append(got)
    if not any(c[1] for c in summaries.values()):
        first = problems[0].one_line() if problems else "no index given"
        raise Unavailable(
            f"no index answered ({len(problems)} listing(s) failed; first: {first})",
            hint="check the network or pass --index URL",
        )

    listed: set[str] = set()
    for page in torch_pages:
        listed.update(page.versions())
        findings += _compare_torch(table, page)
    defaults = _default_builds(table, client, torch_pages, problems, notes)
    for series, (found, url) in sorted(defaults.items(), key=lambda i: Version(i[0])):
        release = table.series(series)
        if release is None or found is None:
            continue
        known = next((v.name for v in release.variants if v.pypi_default), None)
        if known != found:
            findings.append(
                Finding(
                    "default-build",
                    f"torch {series}",
                    f"the index's default build carries CUDA {found} (its metadata's CUDA "
                    f"pins); the table marks {known or 'no variant'} as pypi_default",
                    url,
                )
            )
    for page in numpy_pages:
        findings += _compare_numpy(table, page)
    for variant, page in variant_pages:
        findings += _compare_variant(table, variant, page)

    proposed = _propose(table, findings, torch_pages, variant_pages, defaults, day)
    stats = client.stats
    return RefreshReport(
        date=day,
        roots=tuple(RootSummary(k[1], k[0], c[0], c[1]) for k, c in summaries.items()),
        findings=tuple(_dedupe(findings)),
        problems=tuple(problems),
        notes=tuple(notes),
        torch_versions=tuple(sorted(listed, key=Version)),
        proposed=tuple(proposed),
        seconds=time.monotonic() - started,
        requests={
            "network": stats.network,
            "revalidated": stats.revalidated,
            "cache": stats.cache,
            "failed": stats.failed,
        },
    )


def _dedupe(findings: Sequence[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for f in findings:
        key = (f.kind, f.subject, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _variant_names(table: CompatTable) -> list[str]:
    names: list[str] = []
    for r in table.releases:
        for v in r.variants:
            if v.name not in names:
                names.append(v.name)
    return names


def _oldest(table: CompatTable) -> Version:
    return min(Version(v) for v in table.known_versions)


def _range(pythons: Sequence[str]) -> tuple[str, str] | None:
    if not pythons:
        return None
    ordered = sorted(set(pythons), key=lambda p: tuple(int(x) for x in p.split(".")))
    return ordered[0], ordered[-1]


def _linux_pythons(files: Sequence[IndexFile]) -> list[str]:
    return [py for f in files if f.linux_x86_64 and f.is_wheel for py in f.pythons]


def _default_variant(release: Release) -> Variant | None:
    return next((v for v in release.variants if v.pypi_default), None)


def _compare_torch(table: CompatTable, page: Listing) -> list[Finding]:
    out: list[Finding] = []
    listed = page.versions()
    known = set(table.known_versions)
    oldest = _oldest(table)
    for v in listed:
        if v not in known and Version(v) >= oldest:
            rng = _range(_linux_pythons(page.files_of(v)))
            extra = f", Linux x86_64 wheels for CPython {rng[0]}-{rng[1]}" if rng else ""
            out.append(
                Finding("new-release", f"torch {v}", f"listed{extra}; not in the table",
                        page.url, new=True)
            )
    for v in table.known_versions:
        if v not in listed:
            out.append(
                Finding("missing-release", f"torch {v}", "in the table but not listed", page.url)
            )
    for v in page.yanked_versions():
        if v in known:
            out.append(Finding("yanked", f"torch {v}", "every file is yanked on the index",
                               page.url))
    for release in table.releases:
        default = _default_variant(release)
        for v in release.versions:
            rng = _range(_linux_pythons(page.files_of(v)))
            if rng is None:
                continue
            want = default.python_range(v) if default else (release.python_min,
                                                            release.python_max)
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


def _compare_numpy(table: CompatTable, page: Listing) -> list[Finding]:
    out: list[Finding] = []
    if not table.numpy_releases:
        return out
    known = {v for n in table.numpy_releases for v in n.versions}
    oldest = min(Version(v) for v in known)
    by_series: dict[str, list[str]] = {}
    for v in page.versions():
        if Version(v) >= oldest:
            by_series.setdefault(".".join(v.split(".")[:2]), []).append(v)
    yanked_listed = set(page.yanked_versions())
    for series, versions in by_series.items():
        row = next((n for n in table.numpy_releases if n.series == series), None)
        for v in versions:
            if v not in known:
                out.append(Finding("numpy-new", f"numpy {v}", "listed; not in the table",
                                   page.url, new=True))
        if row is None:
            continue
        rng = _range([py for v in versions for py in _linux_pythons(page.files_of(v))])
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
        for v in sorted(set(versions) & yanked_listed - table_yanked, key=Version):
            out.append(Finding("numpy-yanked", f"numpy {v}",
                               "yanked on the index; the table lists it as ordinary", page.url))
        for v in sorted(table_yanked - yanked_listed, key=Version):
            if v in versions:
                out.append(Finding("numpy-yanked", f"numpy {v}",
                                   "the table marks it yanked; the index does not", page.url))
    return out


def _compare_variant(table: CompatTable, variant: str, page: Listing) -> list[Finding]:
    out: list[Finding] = []
    oldest = _oldest(table)
    versions = sorted(
        {
            f.version
            for f in page.files
            if f.local == variant and not Version(f.version).is_prerelease
        },
        key=Version,
    )
    for v in versions:
        release = table.release(v)
        if release is None:
            if Version(v) >= oldest:
                out.append(Finding("new-release", f"torch {v}",
                                   f"{variant} wheels listed; not in the table", page.url,
                                   new=True))
            continue
        row = release.variant(variant)
        if row is None:
            out.append(
                Finding("new-variant", f"torch {release.series} {variant}",
                        f"{v}+{variant} wheels listed; the table has no {variant} variant "
                        f"for torch {release.series}", page.url, new=True)
            )
            continue
        rng = _range(_linux_pythons(page.files_of(v, variant)))
        if rng is not None and rng != row.python_range(v):
            low, high = row.python_range(v)
            out.append(
                Finding("python-range", f"torch {v}+{variant}",
                        f"Linux x86_64 wheels for CPython {rng[0]}-{rng[1]}; the table says "
                        f"{low}-{high}", page.url)
            )
    for release in table.releases:
        if release.variant(variant) is None:
            continue
        for v in release.versions:
            if v not in versions:
                out.append(Finding("missing-variant", f"torch {v}+{variant}",
                                   "in the table but not listed", page.url))
    return out


# --------------------------------------------------------------------------- default build


def _default_builds(
    table: CompatTable,
    client: IndexClient,
    pages: Sequence[Listing],
    problems: list[IndexProblem],
    notes: list[str],
) -> dict[str, tuple[str | None, str]]:
    """series → (CUDA variant of the index's default build or None, source URL)."""
    if not pages:
        return {}
    page = pages[0]
    oldest = _oldest(table)
    series_versions: dict[str, list[str]] = {}
    for v in page.versions():
        if Version(v) >= oldest:
            series_versions.setdefault(series_of(v), []).append(v)

    def one(series: str) -> tuple[str, str | None, str, list[IndexProblem]]:
        failed: list[IndexProblem] = []
        per_version = [
            [
                f
                for f in page.files_of(v)
                if f.is_wheel and f.linux_x86_64 and f.pythons and f.has_metadata is not False
            ]
            for v in reversed(series_versions[series])
        ]
        # one wheel of each version first (newest first): missing metadata is per upload
        candidates = [
            files[i] for i in range(max(map(len, per_version), default=0))
            for files in per_version if i < len(files)
        ]
        for f in candidates[:METADATA_TRIES]:
            got = client.metadata(f)
            if isinstance(got, IndexProblem):
                failed.append(got)
                continue
            return series, cuda_variant(requires_dist(got)), f.url + ".metadata", []
        return series, None, "", failed

    results = client.map(one, list(series_versions))
    out: dict[str, tuple[str | None, str]] = {}
    newest = page.versions()[-1] if page.versions() else ""
    for series, found, url, failed in results:
        if url:
            out[series] = (found, url)
            if found is None:
                notes.append(
                    f"torch {series}: the default build's metadata has no CUDA pins (CUDA "
                    "bundled in the wheel, or a CPU build): pypi_default not checked"
                )
            continue
        fallback = _json_api_default(client, page.url, newest) if newest in series_versions[
            series] else None
        if fallback is not None:
            out[series] = fallback
            continue
        problems.extend(p for p in failed if p.status != 404)
        notes.append(f"torch {series}: no wheel metadata answered (PEP 658): default build "
                     "not checked")
    return out


def _json_api_default(
    client: IndexClient, listing_url: str, newest: str
) -> tuple[str | None, str] | None:
    """The default build of the newest release from the index's JSON API, for indexes
    whose simple root ends in ``/simple`` (the JSON API lives beside it)."""
    root = listing_url.rstrip("/").rsplit("/", 1)[0]
    if not root.endswith("/simple"):
        return None
    url = root[: -len("simple")] + "pypi/torch/json"
    data = client.json(url)
    if isinstance(data, IndexProblem) or not isinstance(data, dict):
        return None
    info = data.get("info")
    if not isinstance(info, dict) or info.get("version") != newest:
        return None
    reqs = info.get("requires_dist") or []
    if not isinstance(reqs, list):
        return None
    return cuda_variant(str(r) for r in reqs), url


# --------------------------------------------------------------------------- overlay rows


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


def _propose(  # noqa: PLR0917
    table: CompatTable,
    findings: Sequence[Finding],
    torch_pages: Sequence[Listing],
    variant_pages: Sequence[tuple[str, Listing]],
    defaults: dict[str, tuple[str | None, str]],
    day: str,
) -> list[dict[str, Any]]:
    new_versions: dict[str, set[str]] = {}
    for f in findings:
        if f.kind == "new-release":
            v = f.subject.split()[-1]
            new_versions.setdefault(series_of(v), set()).add(v)
    new_variants: dict[str, dict[str, str]] = {}  # series -> variant -> url
    for f in findings:
        if f.kind == "new-variant":
            _, series, name = f.subject.split()
            new_variants.setdefault(series, {})[name] = f.url
    for variant, page in variant_pages:
        for fi in page.files:
            if fi.local == variant and series_of(fi.version) in new_versions:
                new_variants.setdefault(series_of(fi.version), {})[variant] = page.url
    rows: list[dict[str, Any]] = []
    for series in sorted(set(new_versions) | set(new_variants), key=Version):
        known = table.series(series)
        versions = sorted(new_versions.get(series, set()), key=Version)
        if known is not None:
            row = _release_row(known)
            row["versions"] = sorted(set(row["versions"]) | set(versions), key=Version)
            row["checked"] = day
            if versions:
                url = next((f.url for f in findings if f.subject in
                            {f"torch {v}" for v in versions}), "")
                row["source"] = f"{row['source']}; {url} lists {', '.join(versions)} ({day}) [?]"
        else:
            row = _new_release_row(table, series, versions, torch_pages, day)
        present = {v["name"] for v in row["variants"]}
        for name, url in new_variants.get(series, {}).items():
            if name not in present:
                row["variants"].append(_new_variant_row(table, name, row, url, day))
        default_name, default_url = defaults.get(series, (None, ""))
        if known is None and default_name is not None:
            same = [v for v in row["variants"] if v["name"] == default_name]
            if same:
                same[0]["pypi_default"] = True
            else:
                added = _new_variant_row(table, default_name, row, default_url, day)
                added["pypi_default"] = True
                row["variants"].insert(0, added)
        if not row["variants"]:
            prev = _default_variant(table.releases[-1])
            assumed = prev.name if prev is not None else "cpu"
            guess = _new_variant_row(table, assumed, row, "", day)
            guess["source"] = f"assumed like torch {table.releases[-1].series} +{assumed} [?]"
            row["variants"].append(guess)
        rows.append(row)
    return rows


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
            found = _linux_pythons(page.files_of(v))
            if found:
                pythons += found
                url = url or page.url
    rng = _range(pythons) or (table.releases[-1].python_min, table.releases[-1].python_max)
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
            f"assumed like torch {tmpl.series} +{tmpl.name} [?]" if tmpl is not None
            else "unknown [?]"
        )
    return row


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class StatusReport:
    index: str
    date: str
    newest_known: str
    newest_listed: str
    #: releases the index lists and the table lacks (from the table's oldest on)
    missing: tuple[str, ...]
    #: (series, checked date or "never") of rows not checked for more than ``stale_days``
    stale: tuple[tuple[str, str], ...]
    stale_days: int

    @property
    def current(self) -> bool:
        return not self.missing

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "date": self.date,
            "current": self.current,
            "newest_known": self.newest_known,
            "newest_listed": self.newest_listed,
            "missing": list(self.missing),
            "stale": [{"series": s, "checked": c} for s, c in self.stale],
            "stale_days": self.stale_days,
        }

    def lines(self) -> list[str]:
        out = [
            f"index {self.index} ({self.date})",
            f"newest torch release: table {self.newest_known}, index {self.newest_listed}",
        ]
        if self.missing:
            out.append(f"missing from the table: {', '.join(self.missing)}")
        else:
            out.append("missing from the table: none")
        if self.stale:
            rows = ", ".join(f"{s} ({c})" for s, c in self.stale)
            out.append(f"rows not checked for more than {self.stale_days} days: {rows}")
        else:
            out.append(f"rows not checked for more than {self.stale_days} days: none")
        out.append("current" if self.current else
                   "NOT current: run `envforge knowledge refresh -o FILE` and review the rows")
        return out


def stale_rows(
    table: CompatTable, day: datetime.date, stale_days: int = STALE_DAYS
) -> tuple[tuple[str, str], ...]:
    """(series, checked date or "never") of the rows not checked for over ``stale_days``."""
    stale = []
    for r in table.releases:
        if not r.checked:
            stale.append((r.series, "never"))
        elif (day - datetime.date.fromisoformat(r.checked)).days > stale_days:
            stale.append((r.series, r.checked))
    return tuple(stale)


def status(
    table: CompatTable,
    client: IndexClient,
    index: str,
    *,
    today: datetime.date | None = None,
    stale_days: int = STALE_DAYS,
) -> StatusReport:
    """Compare the table's torch releases with ``index``; Unavailable (exit 4) when the
    index does not answer or its listing is malformed."""
    day = today or datetime.datetime.now(datetime.timezone.utc).date()
    got = client.listing(index, "torch")
    if isinstance(got, IndexProblem):
        raise Unavailable(f"the index did not answer: {got.one_line()}",
                          hint="check the network or pass --index URL")
    listed = got.versions()
    known = set(table.known_versions)
    oldest = _oldest(table)
    missing = tuple(v for v in listed if v not in known and Version(v) >= oldest)
    stale = stale_rows(table, day, stale_days)
    return StatusReport(
        index=index,
        date=day.isoformat(),
        newest_known=max(table.known_versions, key=Version),
        newest_listed=listed[-1] if listed else "(none)",
        missing=missing,
        stale=stale,
        stale_days=stale_days,
    )
