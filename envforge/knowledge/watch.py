"""Releases newer than the table of the packages it pairs with torch (issue 30 §2).

``knowledge status`` and ``knowledge refresh`` watch torch and NumPy; this watches the
rest of what the table pins: the companions the package index serves (torchvision,
torchaudio and triton: the ``packages`` of ``companions.yaml`` with a cpu or cuda family;
the ROCm Triton packages live on the PyTorch rocm indexes, where refresh reads them
through torch's own metadata) and the compiled extensions with release rows in
``extensions.yaml`` (xformers), and the CUDA toolkit (``cuda-toolkit``, against the
newest ``cuda_toolkits`` row of ``compat.yaml``: a torch built with a newer CUDA needs a
variant row the table lacks). For each, the index's project page gives the final
releases newer than the newest row. A page the index does not have (HTTP 404) is an
answer (nothing listed); any other failure is a problem (the check is partial).
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from envforge.knowledge.companions import CompanionTable
from envforge.knowledge.extensions import ExtensionTable
from envforge.knowledge.index import IndexClient, IndexProblem, Listing, listing_url
from envforge.knowledge.report import Finding, Watched
from envforge.knowledge.table import CompatTable

#: the families whose builds the package index serves
INDEX_FAMILIES = ("cpu", "cuda")
#: the package the ``cuda_toolkits`` rows describe
TOOLKIT = "cuda-toolkit"
#: what to do about a newer release, per package (default: pair it with torch)
_ADVICE = {
    TOOLKIT: "add a cuda_toolkits row; a torch built with it needs its own variant row",
}


def watched_packages(
    companions: CompanionTable, extensions: ExtensionTable, skip: Sequence[str] = ()
) -> tuple[tuple[str, str], ...]:
    """(package, the newest release the table has a row for) of each watched package,
    less ``skip`` (what the caller reads otherwise)."""
    newest: dict[str, Version] = {}
    names = [p.name for p in companions.packages if any(f in INDEX_FAMILIES for f in p.families)]
    for name in names:
        for row in companions.rows_of(name):
            newest[name] = max(newest.get(name, Version(row.version)), Version(row.version))
    for release in extensions.releases:
        v = Version(release.version)
        newest[release.package] = max(newest.get(release.package, v), v)
    return tuple((name, str(v)) for name, v in newest.items() if name not in skip)


def watched_toolkit(table: CompatTable) -> tuple[tuple[str, str], ...]:
    """(``cuda-toolkit``, the newest release the table's ``cuda_toolkits`` rows name)."""
    kits = table.cuda_toolkits
    return ((TOOLKIT, max((k.version for k in kits), key=Version)),) if kits else ()


def watch(
    client: IndexClient, root: str, packages: Sequence[tuple[str, str]]
) -> tuple[Watched, ...]:
    """Read each package's page on ``root`` and compare it with the table's newest row."""
    base = root.rstrip("/")
    pages = client.map(
        lambda item: client.listing(base, item[0]),
        packages,
        late=lambda item: client.late(listing_url(base, item[0])),
    )
    return tuple(
        _compare(name, known, listing_url(base, name), page)
        for (name, known), page in zip(packages, pages)
    )


def _compare(name: str, known: str, url: str, page: Listing | IndexProblem) -> Watched:
    if isinstance(page, IndexProblem):
        if page.status == 404:  # the index has no such project: nothing newer listed
            return Watched(name, known, "", (), url)
        return Watched(name, known, "", (), url, problem=page)
    listed = page.versions()
    newer = tuple(v for v in listed if Version(v) > Version(known))
    return Watched(name, known, listed[-1] if listed else "", newer, url)


def watch_findings(items: Sequence[Watched]) -> list[Finding]:
    """A ``package-new`` finding per release newer than the table's rows."""
    return [
        Finding(
            "package-new",
            f"{w.package} {v}",
            f"{w.package} {v} is newer than the table's newest row ({w.known}): "
            + _ADVICE.get(
                w.package,
                "pair it with torch (knowledge refresh proposes companion rows from its metadata)",
            ),
            w.url,
            new=True,
        )
        for w in items
        for v in w.newer
    ]


def watch_problems(items: Sequence[Watched]) -> list[IndexProblem]:
    """The pages that gave no usable answer, as refresh reports them."""
    return [w.problem for w in items if w.problem is not None]
