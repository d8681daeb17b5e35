"""Compare the compatibility table with what the package indexes list.

:func:`refresh` reads the torch and numpy project pages of each simple-API root
(``--index``), the per-variant torch pages of each PyTorch wheel root (``--pytorch-index``,
``ROOT/<variant>/torch/``) and the PEP 658 metadata of one Linux x86_64 wheel per torch
series (its CUDA pins name the default build). It reports what is new (a release, a
version, a variant the table lacks) or different (CPython range, default build, yanked
flags) as :class:`Finding` values, every request that did not answer (what could not be
checked) as an :class:`~envforge.knowledge.index.IndexProblem`, and proposes overlay rows
(:mod:`envforge.knowledge.propose`). The comparisons of one listing with the table are
:mod:`envforge.knowledge.compare` (pure); this module reads the listings. Every request
goes through the client's policy and overall deadline (:mod:`envforge.core.net`).

:func:`status` is the cheap check for CI: the newest release the table knows against the
newest the index lists, the releases missing, and the rows not checked for too long.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from envforge.core.net import ALLOW_ENV, origin_of
from envforge.errors import Unavailable
from envforge.knowledge.companion_refresh import (
    check_companions,
    check_pinned,
    listed_companions,
)
from envforge.knowledge.companions import CompanionTable, load_companions
from envforge.knowledge.compare import (
    compare_defaults,
    compare_numpy,
    compare_torch,
    compare_variant,
    dedupe,
    oldest_known,
)
from envforge.knowledge.extensions import ExtensionTable, load_extensions
from envforge.knowledge.index import (
    IndexClient,
    IndexFile,
    IndexProblem,
    Listing,
    cuda_variant,
    listing_url,
    requires_dist,
)
from envforge.knowledge.listing import version_key
from envforge.knowledge.propose import propose
from envforge.knowledge.report import (
    Finding,
    RefreshReport,
    RootSummary,
    StatusReport,
    problem_lines,
)
from envforge.knowledge.table import CompatTable, series_of
from envforge.knowledge.watch import (
    watch,
    watch_findings,
    watch_problems,
    watched_packages,
    watched_toolkit,
)

__all__ = [
    "STALE_DAYS",
    "Finding",
    "RefreshReport",
    "StatusReport",
    "problem_lines",
    "refresh",
    "stale_rows",
    "status",
]

#: rows whose ``checked`` date is older than this are reported by ``status``
STALE_DAYS = 90
#: wheels of one series whose PEP 658 metadata is tried before giving up
METADATA_TRIES = 4

Job = tuple[str, str, str]  # (role, root, project)


@dataclass
class _Pages:
    """The listings that answered, sorted by what they are, and the per-root counts."""

    torch: list[Listing] = field(default_factory=list)
    numpy: list[Listing] = field(default_factory=list)
    companions: list[Listing] = field(default_factory=list)
    variants: list[tuple[str, Listing]] = field(default_factory=list)
    problems: list[IndexProblem] = field(default_factory=list)
    counts: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def add(self, job: Job, got: Listing | IndexProblem) -> None:
        role, root, project = job
        key = (role, root if role == "index" else root.rsplit("/", 1)[0])
        counts = self.counts.setdefault(key, [0, 0])
        counts[0] += 1
        if isinstance(got, IndexProblem):
            self.problems.append(got)
            return
        counts[1] += 1
        if role == "pytorch-index" and project == "torch":
            self.variants.append((root.rsplit("/", 1)[1], got))
        elif project == "torch":
            self.torch.append(got)
        elif project == "numpy":
            self.numpy.append(got)
        else:
            self.companions.append(got)


# --------------------------------------------------------------------------- refresh


def refresh(
    table: CompatTable,
    client: IndexClient,
    indexes: Sequence[str],
    pytorch_indexes: Sequence[str] = (),
    *,
    today: datetime.date | None = None,
    companions: CompanionTable | None = None,
) -> RefreshReport:
    """Read the indexes and compare them with ``table`` (and ``companions``, default the
    shipped companion table); raises Unavailable (exit 4) only when no listing at all
    answered (a partial check is the caller's to judge: :attr:`RefreshReport.complete`)."""
    started = time.monotonic()
    day = (today or datetime.datetime.now(datetime.timezone.utc).date()).isoformat()
    jobs: list[Job] = []
    for root in indexes:
        jobs += [("index", root.rstrip("/"), "torch"), ("index", root.rstrip("/"), "numpy")]
    for proot in pytorch_indexes:
        jobs += [
            ("pytorch-index", f"{proot.rstrip('/')}/{v}", "torch") for v in _variant_names(table)
        ]
    pages = _Pages()
    results = client.map(
        lambda job: client.listing(job[1], job[2]),
        jobs,
        late=lambda job: client.late(listing_url(job[1], job[2])),
    )
    for job, got in zip(jobs, results):
        pages.add(job, got)
    notes: list[str] = []
    companion_table = load_companions() if companions is None else companions
    _read_companion_pages(client, pages, companion_table, table, notes)
    if not any(c[1] for c in pages.counts.values()):
        lines = problem_lines(pages.problems)
        raise Unavailable(
            f"no index gave a usable answer ({len(pages.problems)} listing(s) could not be "
            f"checked: {'; '.join(lines[:3])})",
            hint=_fix(pages.problems[0] if pages.problems else None),
        )
    listed: set[str] = set()
    findings: list[Finding] = []
    for page in pages.torch:
        listed.update(page.versions())
        findings += compare_torch(table, page)
    defaults = _default_builds(table, client, pages.torch, pages.problems, notes)
    findings += compare_defaults(table, defaults)
    for page in pages.numpy:
        findings += compare_numpy(table, page)
    for variant, vpage in pages.variants:
        findings += compare_variant(table, variant, vpage)
    found = check_companions(companion_table, client, pages.companions, pages.torch, day)
    pinned = check_pinned(
        companion_table, client, [*((None, p) for p in pages.torch), *pages.variants], day
    )
    findings += found.findings
    notes += found.notes + pinned.notes
    pages.problems += found.problems + pinned.problems
    others = watched_packages(
        companion_table, load_extensions(), skip=listed_companions(companion_table)
    ) + watched_toolkit(table)
    watched = [
        w
        for page in pages.torch
        for w in watch(client, page.url.rstrip("/").rsplit("/", 1)[0], others)
    ]
    findings += watch_findings(watched)
    pages.problems += watch_problems(watched)
    stats = client.stats
    return RefreshReport(
        date=day,
        roots=tuple(RootSummary(k[1], k[0], c[0], c[1]) for k, c in pages.counts.items()),
        findings=tuple(dedupe(findings)),
        problems=tuple(pages.problems),
        notes=tuple(notes),
        torch_versions=tuple(sorted(listed, key=version_key)),
        proposed=tuple(propose(table, findings, pages.torch, pages.variants, defaults, day)),
        companions=found.rows + pinned.rows,
        seconds=time.monotonic() - started,
        requests={
            "network": stats.network,
            "revalidated": stats.revalidated,
            "cache": stats.cache,
            "failed": stats.failed,
        },
    )


def _read_companion_pages(
    client: IndexClient,
    pages: _Pages,
    companions: CompanionTable,
    table: CompatTable,
    notes: list[str],
) -> None:
    """The companions' project pages of each index root whose torch page answered, and
    of the variant indexes of the table's newest series whose torch page answered (a root
    that did not answer is not asked again). When the deadline has passed already, the
    check is partial anyway: one note instead of a timeout per page."""
    newest = {v.name for v in table.releases[-1].variants} if table.releases else set()
    roots = [("index", p.url) for p in pages.torch]
    roots += [("pytorch-index", p.url) for v, p in pages.variants if v in newest]
    names = listed_companions(companions)
    jobs: list[Job] = [
        (role, url.rstrip("/").rsplit("/", 1)[0], name) for role, url in roots for name in names
    ]
    if jobs and client.deadline.left() <= 0 and pages.problems:
        notes.append(f"{', '.join(names)}: not read ({client.deadline.reason()})")
        return
    results = client.map(
        lambda job: client.listing(job[1], job[2]),
        jobs,
        late=lambda job: client.late(listing_url(job[1], job[2])),
    )
    for job, got in zip(jobs, results):
        pages.add(job, got)


def _variant_names(table: CompatTable) -> list[str]:
    names: list[str] = []
    for r in table.releases:
        for v in r.variants:
            if v.name not in names:
                names.append(v.name)
    return names


# --------------------------------------------------------------------------- default build

#: series newer than the table's newest whose default build is read (the newest ones)
NEW_SERIES_CHECKED = 3

_Found = tuple[str, "str | None", str, list[IndexProblem], list[str]]


def _series_to_check(table: CompatTable, page: Listing) -> dict[str, list[str]]:
    """series -> its listed versions: the series the table knows, and the newest few
    it does not (a hostile listing of 10^5 versions costs no more requests)."""
    oldest = version_key(min(table.known_versions, key=version_key))
    known = {r.series for r in table.releases}
    found: dict[str, list[str]] = {}
    for v in page.versions():
        if version_key(v) >= oldest:
            found.setdefault(series_of(v), []).append(v)
    unknown = [s for s in found if s not in known][-NEW_SERIES_CHECKED:]
    return {s: vs for s, vs in found.items() if s in known or s in unknown}


def _candidates(page: Listing, versions: Sequence[str]) -> list[IndexFile]:
    """Linux x86_64 CPython wheels that may have metadata, one of each version first
    (newest first): missing metadata is per upload."""
    per_version = [
        [
            f
            for f in page.files_of(v)
            if f.is_wheel and f.linux_x86_64 and f.pythons and f.has_metadata is not False
        ]
        for v in reversed(versions)
    ]
    return [
        files[i]
        for i in range(max(map(len, per_version), default=0))
        for files in per_version
        if i < len(files)
    ]


def _one_default(
    client: IndexClient, page: Listing, series: str, versions: Sequence[str]
) -> _Found:
    """(series, CUDA variant or None, metadata URL or "", problems, refused hosts)."""
    failed: list[IndexProblem] = []
    hosts: list[str] = []
    tried = 0
    for f in _candidates(page, versions):
        if tried >= METADATA_TRIES:
            break
        refusal = client.refusal(f.url + ".metadata")
        if refusal is not None and origin_of(f.url) is not None:
            hosts.append(origin_of(f.url)[1])  # type: ignore[index]
            continue  # a file host the user did not configure: a note, not a problem
        tried += 1
        got = client.metadata(f)
        if isinstance(got, IndexProblem):
            failed.append(got)
            continue
        return series, cuda_variant(requires_dist(got)), f.url + ".metadata", [], hosts
    return series, None, "", failed, hosts


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
    series_versions = _series_to_check(table, page)
    results = client.map(
        lambda s: _one_default(client, page, s, series_versions[s]),
        list(series_versions),
        late=lambda s: (s, None, "", [client.late(f"{page.url} (torch {s} metadata)")], []),
    )
    out: dict[str, tuple[str | None, str]] = {}
    listed = page.versions()
    newest = listed[-1] if listed else ""
    elsewhere: dict[str, list[str]] = {}  # file host -> series whose wheels are there
    for series, found, url, failed, hosts in results:
        if url:
            out[series] = (found, url)
            if found is None:
                notes.append(
                    f"torch {series}: the default build's metadata has no CUDA pins (CUDA "
                    "bundled in the wheel, or a CPU build): pypi_default not checked"
                )
            continue
        fallback = (
            _json_api_default(client, page.url, newest)
            if newest in series_versions[series]
            else None
        )
        if fallback is not None:
            out[series] = fallback
            continue
        problems.extend(p for p in failed if p.status != 404)
        if hosts and not failed:
            elsewhere.setdefault(sorted(hosts)[0], []).append(series)
        else:
            notes.append(
                f"torch {series}: no wheel metadata answered (PEP 658): default build not checked"
            )
    notes.extend(
        f"torch {', '.join(series)}: the wheels are on {host}, not a configured host: "
        f"default build not checked (allow it with {ALLOW_ENV}={host})"
        for host, series in elsewhere.items()
    )
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


# --------------------------------------------------------------------------- status


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


def _fix(problem: IndexProblem | None) -> str:
    """The hint for an index that gave no usable answer (``problem``)."""
    if problem is not None and problem.kind == "refused":
        if "not a configured host" in problem.reason:
            return (
                f"the index sent envforge to another host; allow one you trust with "
                f"{ALLOW_ENV}, or use another --index"
            )
        return "the index sent envforge to a URL that is not http(s); use another --index"
    return "check the network, --index URL and --deadline"


def status(
    table: CompatTable,
    client: IndexClient,
    index: str,
    *,
    today: datetime.date | None = None,
    stale_days: int = STALE_DAYS,
    companions: CompanionTable | None = None,
    extensions: ExtensionTable | None = None,
) -> StatusReport:
    """Compare the table's torch releases with ``index``, and the newest rows of the
    companions and extensions with their pages there (:mod:`envforge.knowledge.watch`);
    Unavailable (exit 4) when the torch page does not answer or is malformed."""
    day = today or datetime.datetime.now(datetime.timezone.utc).date()
    got = client.map(
        lambda root: client.listing(root, "torch"),
        [index],
        late=lambda root: client.late(listing_url(root, "torch")),
    )[0]
    if isinstance(got, IndexProblem):
        said = (
            "did not answer" if got.kind in ("timeout", "unreachable") else "gave no usable answer"
        )
        raise Unavailable(
            f"the index {said}, nothing was checked: {got.one_line()}", hint=_fix(got)
        )
    listed = got.versions()
    known = set(table.known_versions)
    oldest = oldest_known(table)
    missing = tuple(v for v in listed if v not in known and version_key(v) >= oldest)
    stale = stale_rows(table, day, stale_days)
    return StatusReport(
        index=index,
        date=day.isoformat(),
        newest_known=max(table.known_versions, key=version_key),
        newest_listed=listed[-1] if listed else "(none)",
        missing=missing,
        stale=stale,
        stale_days=stale_days,
        packages=watch(
            client,
            index,
            watched_packages(
                load_companions() if companions is None else companions,
                load_extensions() if extensions is None else extensions,
            )
            + watched_toolkit(table),
        ),
    )
