"""Companion rows proposed by ``knowledge refresh`` (issue 18 §1).

For each companion the index lists with its own torch requirement (torchvision,
torchaudio: the ``packages`` of ``companions.yaml`` that torch does not pin), the releases
newer than the table's rows are read from the index's project page; for each, the PEP 658
metadata of one wheel (``<wheel URL>.metadata``, never the wheel) gives its ``Requires-Dist:
torch...`` line, which :func:`envforge.knowledge.companions.propose_row` turns into a row: ``==X``
pairs it with X; another specifier, or none (torchaudio 2.11.0), is paired with the torch
release uploaded last before it (PEP 700 upload times of the torch listing). Every request
goes through the refresh's client (host policy, size limits, the one deadline).

The Triton packages name no torch: torch's metadata pins them (``Requires-Dist:
triton==3.7.1``), so :func:`check_pinned` reads the metadata of each torch release newer
than their rows, on the package index (CUDA builds: ``triton``) and on the variant indexes
the refresh read (``+rocm``: ``pytorch-triton-rocm`` / ``triton-rocm``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envforge.core.net import ALLOW_ENV, origin_of
from envforge.knowledge.companions import CompanionTable, Family, Row, family_of, propose_row
from envforge.knowledge.index import IndexClient, IndexFile, IndexProblem, Listing, requires_dist
from envforge.knowledge.report import Finding

#: new releases of one companion whose metadata is read (the newest ones)
NEW_RELEASES_CHECKED = 6
#: wheels of one release whose PEP 658 metadata is tried before giving up
METADATA_TRIES = 4


@dataclass(frozen=True)
class CompanionCheck:
    """What the companion pages gave: proposed rows, findings, notes, problems."""

    rows: tuple[Row, ...] = ()
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    problems: tuple[IndexProblem, ...] = ()


def listed_companions(companions: CompanionTable) -> tuple[str, ...]:
    """The companions whose own metadata names the torch they need (not the Triton
    packages: torch's metadata pins those)."""
    return tuple(p.name for p in companions.packages if not p.pinned_by_torch)


def new_releases(companions: CompanionTable, page: Listing) -> list[str]:
    """The listed final releases newer than every row of the page's project (the newest
    :data:`NEW_RELEASES_CHECKED`), oldest first."""
    rows = companions.rows_of(page.project)
    newest = max((Version(r.version) for r in rows), default=None)
    listed = [
        v for v in page.versions() if own_files(page, v) and (newest is None or Version(v) > newest)
    ]
    return listed[-NEW_RELEASES_CHECKED:]


def own_files(page: Listing, version: str) -> list[IndexFile]:
    """The files of a release whose name is the page's project (a page may list others)."""
    return [
        f
        for f in page.files_of_version(version)
        if canonicalize_name(f.filename.split("-", 1)[0]) == page.project
    ]


def first_uploads(pages: Sequence[Listing]) -> dict[str, str]:
    """version -> its first upload time (``YYYY-MM-DDTHH:MM:SS``) over ``pages``."""
    out: dict[str, str] = {}
    for page in pages:
        for f in page.files:
            if f.upload_time and (f.version not in out or f.upload_time < out[f.version]):
                out[f.version] = f.upload_time
    return out


def released_with(torch_uploads: dict[str, str], uploaded: str) -> str | None:
    """The torch release uploaded last before ``uploaded`` (a companion is published
    minutes after its torch); None without upload times."""
    if not uploaded:
        return None
    before = [v for v, t in torch_uploads.items() if t <= uploaded]
    return max(before, key=Version) if before else None


def candidates(pages: Sequence[Listing], version: str) -> list[IndexFile]:
    """The wheels of a release that may have metadata, on every page that lists it (the
    package index first): Linux x86_64 first (the table's rows were read from those),
    then the others, the listings' order within each."""
    wheels = [
        f
        for page in pages
        for f in own_files(page, version)
        if f.is_wheel and f.has_metadata is not False and not f.yanked
    ]
    return [f for f in wheels if f.linux_x86_64] + [f for f in wheels if not f.linux_x86_64]


#: (version, metadata text or "", its URL, failures, hosts the policy refused)
_Read = tuple[str, str, str, list[IndexProblem], list[str]]


def _read_one(client: IndexClient, pages: Sequence[Listing], version: str) -> _Read:
    failed: list[IndexProblem] = []
    hosts: list[str] = []
    tried = 0
    for f in candidates(pages, version):
        if tried >= METADATA_TRIES:
            break
        url = f.url + ".metadata"
        if client.refusal(url) is not None:
            origin = origin_of(url)
            hosts.append(origin[1] if origin is not None else url.split(":", 1)[0] + " URLs")
            continue  # a file host the user did not configure: a note, not a problem
        tried += 1
        got = client.metadata(f)
        if isinstance(got, IndexProblem):
            failed.append(got)
            continue
        return version, got, url, [], []
    for page in pages:
        found = json_api_metadata(client, page, version)
        if found is not None:
            return version, found[0], found[1], [], []
    return version, "", "", failed, hosts


def json_api_metadata(client: IndexClient, page: Listing, version: str) -> tuple[str, str] | None:
    """(metadata text, URL) of the page's newest release from the index's JSON API
    (``.../simple/<p>/`` -> ``.../pypi/<p>/json``: ``info`` describes the newest
    release), for uploads whose PEP 658 file the index does not serve; None otherwise."""
    root = page.url.rstrip("/").rsplit("/", 1)[0]
    listed = page.versions()
    if not root.endswith("/simple") or not listed or listed[-1] != version:
        return None
    url = f"{root[: -len('simple')]}pypi/{page.project}/json"
    data = client.json(url)
    info = data.get("info") if isinstance(data, dict) else None
    if not isinstance(info, dict) or info.get("version") != version:
        return None
    reqs = info.get("requires_dist") or []
    if not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs):
        return None
    lines = [
        f"Name: {page.project}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in reqs if "\n" not in r),
    ]
    return "\n".join(lines) + "\n\n", url


def check_companions(
    companions: CompanionTable,
    client: IndexClient,
    pages: Sequence[Listing],
    torch_pages: Sequence[Listing],
    day: str,
) -> CompanionCheck:
    """Read the metadata of every new companion release on ``pages`` (the package index's
    and the variant indexes' project pages: one release is read once, from any page that
    lists it) and propose rows."""
    by_release: dict[tuple[str, str], list[Listing]] = {}
    for page in pages:
        for v in new_releases(companions, page):
            by_release.setdefault((page.project, v), []).append(page)
    if not by_release:
        return CompanionCheck()
    jobs = list(by_release.items())
    results = client.map(
        lambda job: _read_one(client, job[1], job[0][1]),
        jobs,
        late=lambda job: (
            job[0][1],
            "",
            "",
            [client.late(f"{job[1][0].url} ({job[0][1]} metadata)")],
            [],
        ),
    )
    torch_uploads = first_uploads(torch_pages)
    rows: list[Row] = []
    findings: list[Finding] = []
    notes: list[str] = []
    problems: list[IndexProblem] = []
    for ((project, version), listed), (_, metadata, url, failed, hosts) in zip(jobs, results):
        subject = f"{project} {version}"
        findings.append(
            Finding(
                "companion-new",
                subject,
                "listed; not in the companion table",
                listed[0].url,
                new=True,
            )
        )
        if not metadata:
            problems.extend(p for p in failed if p.status != 404)
            notes.append(f"{subject}: {_why_none(failed, hosts)}: no row proposed")
            continue
        row, note = _row(
            listed, version, metadata=metadata, url=url, torch_uploads=torch_uploads, day=day
        )
        if row is not None:
            rows.append(row)
        if note:
            notes.append(f"{subject}: {note}")
    return CompanionCheck(tuple(rows), tuple(findings), tuple(notes), tuple(problems))


def _why_none(failed: Sequence[IndexProblem], hosts: Sequence[str]) -> str:
    if hosts and not failed:
        host = sorted(hosts)[0]
        return f"its wheels are on {host}, not a configured host (allow it with {ALLOW_ENV}={host})"
    return "no wheel metadata answered (PEP 658)"


def _row(
    pages: Sequence[Listing],
    version: str,
    *,
    metadata: str,
    url: str,
    torch_uploads: dict[str, str],
    day: str,
) -> tuple[Row | None, str]:
    uploaded = min(
        (f.upload_time for page in pages for f in own_files(page, version) if f.upload_time),
        default="",
    )
    torch = released_with(torch_uploads, uploaded)
    row = propose_row(metadata, torch=torch, source=url, checked=day)
    if row is None:
        return None, (
            "its metadata names no release, or no torch requirement and no upload "
            "time tells which torch it was released with: no row proposed"
        )
    if (row.package, Version(row.version)) != (pages[0].project, Version(version)):
        return None, (f"its metadata ({url}) names {row.package} {row.version}: no row proposed")
    if row.confidence != "verified":
        return row, f"proposed {row.confidence}: {row.note}"
    return row, ""


# --------------------------------------------------------------------------- Triton


def pinned_by_family(companions: CompanionTable) -> dict[Family, tuple[str, ...]]:
    """family -> the companions torch's own metadata pins there (triton for CUDA builds,
    pytorch-triton-rocm / triton-rocm for ROCm builds)."""
    out: dict[Family, tuple[str, ...]] = {}
    for p in companions.packages:
        if p.pinned_by_torch:
            for fam in p.families:
                out[fam] = (*out.get(fam, ()), p.name)
    return out


def new_torch_releases(
    companions: CompanionTable, names: Sequence[str], page: Listing
) -> list[str]:
    """Torch releases on ``page`` newer than every row of ``names`` that is not only
    ``uncertain`` (those are read again, to be confirmed; the newest
    :data:`NEW_RELEASES_CHECKED`), oldest first."""
    known = [
        Version(r.torch)
        for n in names
        for r in companions.rows_of(n)
        if r.confidence != "uncertain"
    ]
    newest = max(known, default=None)
    listed = [v for v in page.versions() if newest is None or Version(v) > newest]
    return listed[-NEW_RELEASES_CHECKED:]


def pinned_rows(
    metadata: str, names: Sequence[str], torch: str, source: str, day: str
) -> list[Row]:
    """The rows torch's metadata gives for the pinned companions ``names``
    (``Requires-Dist: triton==3.7.1; platform_system == "Linux"``; ``~=3.9.0`` becomes
    ``accepts``)."""
    rows = []
    for line in requires_dist(metadata):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        specs = list(req.specifier)
        if name not in names or len(specs) != 1 or "extra" in str(req.marker or ""):
            continue
        spec = specs[0]
        version = spec.version.split("+", 1)[0]
        try:
            Version(version)
        except InvalidVersion:
            continue
        exact = spec.operator in ("==", "===")
        rows.append(
            Row(
                package=name,
                version=version,
                torch=torch,
                requires=f"=={torch}",
                source=source,
                checked=day,
                confidence="verified",
                accepts=None if exact else str(spec),
            )
        )
    return rows


def check_pinned(
    companions: CompanionTable,
    client: IndexClient,
    torch_pages: Sequence[tuple[str | None, Listing]],
    day: str,
) -> CompanionCheck:
    """Rows for the Triton packages from the metadata of each torch release newer than
    their rows: ``torch_pages`` are (variant, listing), None for the package index (its
    default build is a CUDA build). A release is read once per family, from any page of
    the family that lists it (the package index first): ~30 variant indexes cost no more
    requests than one."""
    families = pinned_by_family(companions)
    by_release: dict[tuple[tuple[str, ...], str], list[Listing]] = {}
    for variant, page in torch_pages:
        names = families.get("cuda" if variant is None else family_of(variant), ())
        for v in new_torch_releases(companions, names, page) if names else ():
            by_release.setdefault((names, v), []).append(page)
    if not by_release:
        return CompanionCheck()
    jobs = list(by_release.items())
    results = client.map(
        lambda job: _read_one(client, job[1], job[0][1]),
        jobs,
        late=lambda job: (
            job[0][1],
            "",
            "",
            [client.late(f"{job[1][0].url} ({job[0][1]} metadata)")],
            [],
        ),
    )
    rows: dict[tuple[str, str, str], Row] = {}
    notes: list[str] = []
    problems: list[IndexProblem] = []
    for ((names, version), listed), (_, metadata, url, failed, hosts) in zip(jobs, results):
        subject = f"{' / '.join(names)} for torch {version} ({listed[0].url})"
        if not metadata:
            problems.extend(p for p in failed if p.status != 404)
            notes.append(f"{subject}: {_why_none(failed, hosts)}: no row proposed")
            continue
        found = pinned_rows(metadata, names, version, url, day)
        if not found:
            notes.append(f"{subject}: its metadata pins none of them: no row proposed")
        for row in found:
            rows.setdefault((row.package, row.version, row.torch), row)
    return CompanionCheck(rows=tuple(rows.values()), notes=tuple(notes), problems=tuple(problems))
