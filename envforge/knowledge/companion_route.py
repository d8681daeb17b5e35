"""Where a companion's build comes from when it is not the stack's variant's.

A PyTorch variant index carries only its own builds: torchaudio 2.11.0 was published with
torch 2.11 (cu126, cu128, cu130), so beside torch 2.15.0+cu132 its +cu130 build fits (the
same CUDA major; built on PyTorch's stable ABI, it works with every later torch) but the
cu132 index has none (pytorch/pytorch#193651, pytorch/audio#4194): it comes from the cu130
index. :func:`route` names that index and says why.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet

from envforge.knowledge.companions import Row
from envforge.knowledge.table import CompatTable


def sibling_index(index: str | None, own: str, tag: str) -> str | None:
    """The index beside ``index`` serving ``tag`` (``.../whl/cu132`` → ``.../whl/cu130``);
    None when ``index`` does not end with ``own``."""
    if index is None:
        return None
    head = index.rstrip("/")
    return head[: -len(own)] + tag if head.endswith(f"/{own}") else None


def route(
    row: Row,
    tag: str | None,
    *,
    own: str | None,
    index: str | None,
    compat: CompatTable,
    system: str = "",
) -> tuple[str, str, str | None]:
    """(reason, source, index) of a build of ``row`` tagged ``tag`` beside a stack whose
    builds carry ``own`` and come from ``index``: the index is None when the build is the
    stack's own variant's, else the index serving ``tag`` (beside the stack's, else the
    table's URL of that variant). ``system``: what the companion loads from the system
    (its package's ``system``), said in the reason."""
    reason, source, url = _route(row, tag, own=own, index=index, compat=compat)
    return (f"{reason}; it loads {system}" if system else reason), source, url


def _route(
    row: Row, tag: str | None, *, own: str | None, index: str | None, compat: CompatTable
) -> tuple[str, str, str | None]:
    if tag is None or own is None or tag == own or row.accepts is not None:
        return row.reason, row.source, None
    url = sibling_index(index, own, tag)
    if url is None:
        release = compat.release(row.torch)
        variant = release.variant(tag) if release is not None else None
        url = variant.index if variant is not None else None
    if url is None:
        return row.reason, row.source, None
    note = f" ({row.note})" if row.note else ""
    why = (
        f"the {own} index carries no {row.package} {row.version}"
        if own in row.missing
        else f"torch {row.torch} was published with no {own} build"
    )
    return (
        f"{row.reason}; {why}: the +{tag} build of the same CUDA major{note}, installed from {url}",
        row.source,
        url,
    )


def python_gap(row: Row, python: str) -> str | None:
    """Why ``row``'s wheels do not serve CPython ``python`` (its ``python`` specifier), or
    None when they do or the row does not say."""
    if row.python is None or SpecifierSet(row.python).contains(python, prereleases=True):
        return None
    return f"{row.package} {row.version} has wheels for CPython {row.python} only, not {python}"
