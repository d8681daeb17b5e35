"""A project's requirement strings, its PEP 735 groups and its pins, checked.

* :func:`requirement`: one PEP 508 line; a direct reference only as an archive pinned by
  its sha256 (:mod:`envforge.core.archives`); never a VCS checkout or a local path.
* :func:`expand_group`: a dependency group with its ``include-group`` entries followed
  without recursion, loops named, depth and size bounded.
* :func:`check_contradictions`: two pins of one package that no version satisfies
  (``torchvision==0.28.0`` beside ``torchvision==0.29.0``).

Errors are one :class:`~envforge.errors.ProjectError` naming the file and the key (or
line); they never quote the line itself (a ``-r`` include could have been any file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envforge.core.archives import ARCHIVE_FORM, archive_problem
from envforge.core.yamlcheck import did_you_mean
from envforge.errors import ProjectError

#: ``include-group`` chains deeper than this are a mistake (PEP 735 examples nest 2-3).
MAX_GROUP_DEPTH = 64
#: Group entries read while expanding one group (every include counts its entries again).
MAX_GROUP_ENTRIES = 100_000


def requirement(text: str, source: str, key: str) -> str:
    """``text`` as a checked PEP 508 requirement (normalised), else one ProjectError."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        reason = (str(exc).splitlines() or ["invalid"])[0]
        raise ProjectError(
            source, key, f"is not a PEP 508 requirement ({reason})", hint="write it like name>=1.0"
        ) from None
    if req.url:
        problem = archive_problem(req.url)
        if problem is not None:
            raise ProjectError(
                source,
                key,
                f"requirement {req.name!r} is {problem}",
                hint=f"name a released version ({req.name}==VERSION) or an archive by its "
                f"hash: {ARCHIVE_FORM.replace('NAME', req.name)}",
            )
    return str(req)


# --------------------------------------------------------------------------- PEP 735 groups


def _items(table: Mapping[str, Any], group: str, path: Path) -> list[Any]:
    if group not in table:
        near = did_you_mean(group, table)
        raise ProjectError(
            str(path),
            "dependency-groups",
            f"has no group {group!r}",
            hint=f"did you mean {near!r}?"
            if near
            else f"known groups: {', '.join(sorted(table)) or 'none'}",
        )
    items = table[group]
    if not isinstance(items, list):
        raise ProjectError(
            str(path),
            f"dependency-groups.{group}",
            "must be a list",
            hint='write it as group = ["..."]',
        )
    return items


def _include(item: object, path: Path, key: str) -> str | None:
    """The group an ``{include-group = NAME}`` entry names; None for a requirement."""
    if isinstance(item, str):
        return None
    if isinstance(item, Mapping) and set(item) == {"include-group"}:
        target = item["include-group"]
        if isinstance(target, str):
            return target
        raise ProjectError(
            str(path),
            f"{key}.include-group",
            "must be a group name",
            hint='write it as {include-group = "NAME"}',
        )
    raise ProjectError(
        str(path),
        key,
        'must be a requirement string or {include-group = "NAME"}',
        hint="see PEP 735",
    )


def expand_group(table: Mapping[str, Any], group: str, path: Path) -> list[str]:
    """The requirements of ``group``, its includes followed in order (each group's list
    computed once, duplicates kept once), without recursion."""
    done: dict[str, list[str]] = {}
    found: dict[str, list[str]] = {}
    stack: list[tuple[str, int]] = []
    entries = 0

    def enter(name: str) -> None:
        if len(stack) >= MAX_GROUP_DEPTH:
            chain = " -> ".join([*(g for g, _ in stack[:3]), "...", name])
            raise ProjectError(
                str(path),
                f"dependency-groups.{name}",
                f"include-group chain is deeper than {MAX_GROUP_DEPTH} ({chain})",
                hint="list the requirements in fewer groups",
            )
        _items(table, name, path)
        stack.append((name, 0))
        found[name] = []

    enter(group)
    while stack:
        name, index = stack[-1]
        items = table[name]
        if index == len(items):
            stack.pop()
            done[name] = list(dict.fromkeys(found.pop(name)))
            if stack:
                found[stack[-1][0]] += done[name]
            continue
        stack[-1] = (name, index + 1)
        entries += 1
        if entries > MAX_GROUP_ENTRIES:
            raise ProjectError(
                str(path),
                f"dependency-groups.{group}",
                f"expands to more than {MAX_GROUP_ENTRIES} entries",
                hint="include each group once",
            )
        key = f"dependency-groups.{name}[{index}]"
        target = _include(items[index], path, key)
        if target is None:
            found[name].append(requirement(items[index], str(path), key))
        elif target in done:
            found[name] += done[target]
        elif target in found:
            chain = [g for g, _ in stack][[g for g, _ in stack].index(target) :]
            raise ProjectError(
                str(path),
                key,
                f"includes itself ({' -> '.join([*chain, target])})",
                hint="remove the include-group loop",
            )
        else:
            enter(target)
    return done[group]


# --------------------------------------------------------------------------- contradictions


def _pins(req: Requirement) -> list[Version]:
    found = []
    for spec in req.specifier:
        if spec.operator == "==" and not spec.version.endswith(".*"):
            try:
                found.append(Version(spec.version))
            except InvalidVersion:
                continue
    return found


def _contradiction(first: Requirement, second: Requirement) -> bool:
    """No version satisfies both: a pin of one that the other excludes."""
    for pinned, other in ((first, second), (second, first)):
        for version in _pins(pinned):
            if not other.specifier.contains(version, prereleases=True):
                return True
    return False


def check_contradictions(lines: Iterable[str], source: Path) -> None:
    """Refuse two requirements (or constraints) of one package whose pins exclude each
    other, where both apply together (the same environment marker, or one has none)."""
    seen: dict[str, list[Requirement]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        for earlier in seen.get(name, []):
            together = (
                earlier.marker is None
                or req.marker is None
                or (str(earlier.marker) == str(req.marker))
            )
            if together and _contradiction(earlier, req):
                raise ProjectError(
                    str(source),
                    name,
                    f"pins contradict each other ({name}"
                    f"{earlier.specifier} and {name}{req.specifier}): no release satisfies "
                    "both",
                    hint=f"keep one pin of {name} (for torch's family, the bare name "
                    "takes the release that pairs with the stack's torch)",
                )
        seen.setdefault(name, []).append(req)
