"""The compiled-extension table (``data/extensions.yaml``): which torch each xformers
release's wheels require, and the known limits of flash-attn, bitsandbytes, ... on a GPU.

:func:`extension_checks` reads a recipe's ``packages`` against it: a pinned release that
requires another torch, or a limit marked ``refuse`` that holds for the recipe's GPU, is
a :class:`Refusal` (the stack raises it, exit 2); the other limits that hold are known
issues (``show`` lists them with their evidence).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge.core import datacache, pep508
from envforge.core.patterns import CONFIDENCES, SM_RE, Confidence
from envforge.core.resources import data_file
from envforge.recipe.model import KnownIssue, Recipe

DATA_FILE = "extensions.yaml"
VENDORS = ("nvidia", "amd", "any")

_TOP_KEYS = ("schema", "checked", "releases", "limits")
_RELEASE_KEYS = ("package", "version", "requires", "source", "checked", "confidence")
_LIMIT_KEYS = (
    "package",
    "versions",
    "vendor",
    "below",
    "refuse",
    "symptom",
    "workaround",
    "evidence",
    "checked",
    "confidence",
    "from_index",
)

if TYPE_CHECKING:
    from envforge.core import yamlcheck


@dataclass(frozen=True)
class Release:
    """A release whose wheels require ``requires`` of torch."""

    package: str
    version: str
    requires: str
    source: str
    checked: str
    confidence: Confidence = "verified"


@dataclass(frozen=True)
class Limit:
    """A known limit of ``package`` (the ``versions`` of it) on ``vendor``'s GPUs older
    than ``below`` (None: on every one)."""

    package: str
    versions: str
    vendor: str
    below: str | None
    refuse: bool
    issue: KnownIssue
    checked: str
    confidence: Confidence = "verified"
    #: The limit is one of the package as the default index serves it (not of a wheel
    #: named by URL, nor of a package from its own index).
    from_index: bool = False

    def holds(self, recipe: Recipe, version: str | None, from_index: bool = True) -> bool:
        if self.from_index and not from_index:
            return False
        if self.vendor not in ("any", recipe.gpu.vendor):
            return False
        if self.versions and (
            version is None
            or not SpecifierSet(self.versions).contains(Version(version).public, prereleases=True)
        ):
            return False
        if self.below is None:
            return True
        arch, below = _sm(recipe.gpu.arch), _sm(self.below)
        return arch is not None and below is not None and arch < below


@dataclass(frozen=True)
class ExtensionTable:
    releases: tuple[Release, ...]
    limits: tuple[Limit, ...]

    def fits(self, package: str, torch: str) -> Release | None:
        """The newest release of ``package`` whose wheels accept ``torch``."""
        fitting = [
            r
            for r in self.releases
            if r.package == package and SpecifierSet(r.requires).contains(torch, prereleases=True)
        ]
        return max(fitting, key=lambda r: Version(r.version), default=None)


@dataclass(frozen=True)
class Refusal:
    key: str
    rule: str
    message: str
    evidence: str
    hint: str


def _sm(arch: str | None) -> int | None:
    match = SM_RE.match(arch or "")
    return int(match.group(1)) if match else None


#: The modules whose code decides what ``extensions.yaml`` parses to.
PARSER_MODULES = (
    "knowledge/extensions.py",
    "recipe/model.py",
    "core/yamlcheck.py",
    "core/patterns.py",
    "core/datacache.py",
)


@lru_cache(maxsize=4)
def load_extensions(path: Path | None = None) -> ExtensionTable:
    """Parse and check ``extensions.yaml`` (or ``path``); :class:`TableError` when malformed.

    The shipped file is read from its compiled form when that is fresh
    (:mod:`envforge.core.datacache`), else parsed and compiled again."""
    if path is not None:
        return _load_file(path)
    where = data_file(DATA_FILE)
    return datacache.load(
        "extensions",
        [where],
        lambda: _load_file(where),
        ExtensionTable,
        (ExtensionTable, Release, Limit, KnownIssue),
        code=PARSER_MODULES,
    )


def _load_file(where: Path) -> ExtensionTable:
    data = datacache.read_yaml(where)
    return parse_extensions(data, where.name)


def parse_extensions(data: Any, source: str = DATA_FILE) -> ExtensionTable:
    r = datacache.yaml_reader(source)
    top = r.mapping(data, "", _TOP_KEYS, required=_TOP_KEYS)
    if top["schema"] != 1:
        raise r.fail("schema", f"{top['schema']!r} is not a schema this envforge reads", "1")
    checked = r.text(top["checked"], "checked")
    for key in ("releases", "limits"):
        if not isinstance(top[key], list):
            raise r.fail(key, "must be a list")
    return ExtensionTable(
        tuple(_release(r, i, item, checked) for i, item in enumerate(top["releases"])),
        tuple(_limit(r, i, item, checked) for i, item in enumerate(top["limits"])),
    )


def _common(r: yamlcheck.Reader, key: str, m: dict[str, Any], link: str) -> Confidence:
    name = r.text(m["package"], f"{key}.package")
    if pep508.canonical_name(name) != name:
        raise r.fail(
            f"{key}.package", "is not a canonical distribution name", pep508.canonical_name(name)
        )
    if not r.text(m[link], f"{key}.{link}").startswith("https://"):
        raise r.fail(f"{key}.{link}", "must be a URL a user can open", "https://...")
    confidence = m.get("confidence", "verified")
    if confidence not in CONFIDENCES:
        raise r.fail(
            f"{key}.confidence", f"{confidence!r} is not a confidence", ", ".join(CONFIDENCES)
        )
    return confidence  # type: ignore[no-any-return]


def _spec(r: yamlcheck.Reader, value: object, key: str) -> str:
    text = r.text(value, key, allow_empty=True)
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        raise r.fail(key, f"{text!r} is not a PEP 440 specifier") from None
    return text


def _release(r: yamlcheck.Reader, i: int, item: object, checked: str) -> Release:
    key = f"releases[{i}]"
    m = r.mapping(item, key, _RELEASE_KEYS, required=_RELEASE_KEYS[:4])
    confidence = _common(r, key, m, "source")
    try:
        Version(r.text(m["version"], f"{key}.version"))
    except InvalidVersion:
        raise r.fail(f"{key}.version", f"{m['version']!r} is not a version") from None
    return Release(
        m["package"],
        m["version"],
        _spec(r, m["requires"], f"{key}.requires"),
        m["source"],
        r.text(m.get("checked", checked), f"{key}.checked"),
        confidence,
    )


def _limit(r: yamlcheck.Reader, i: int, item: object, checked: str) -> Limit:
    key = f"limits[{i}]"
    m = r.mapping(
        item,
        key,
        _LIMIT_KEYS,
        required=("package", "versions", "vendor", "refuse", "symptom", "workaround", "evidence"),
    )
    confidence = _common(r, key, m, "evidence")
    vendor = r.choice(m["vendor"], f"{key}.vendor", VENDORS)
    below = None if m.get("below") is None else r.text(m["below"], f"{key}.below")
    if below is not None and _sm(below) is None:
        raise r.fail(f"{key}.below", f"{below!r} is not an NVIDIA arch", "e.g. sm_80")
    for flag in ("refuse", "from_index"):
        if not isinstance(m.get(flag, False), bool):
            raise r.fail(f"{key}.{flag}", "must be true or false")
    issue = KnownIssue(
        symptom=r.text(m["symptom"], f"{key}.symptom"),
        workaround=r.text(m["workaround"], f"{key}.workaround"),
        evidence=(m["evidence"],),
    )
    return Limit(
        m["package"],
        _spec(r, m["versions"], f"{key}.versions"),
        vendor,
        below,
        m["refuse"],
        issue,
        r.text(m.get("checked", checked), f"{key}.checked"),
        confidence,
        m.get("from_index", False),
    )


# --------------------------------------------------------------------------- recipes


def _entries(recipe: Recipe) -> Iterator[tuple[str, str, str | None, bool]]:
    """(key, canonical name, version or None, from the default index) of each
    ``packages`` entry: a ``==`` pin's version, or a wheel URL's version from its file
    name."""
    for i, entry in enumerate(recipe.packages):
        req = pep508.parse(entry)
        if req is None:
            continue
        version = next((s.version for s in req.specifier if s.operator in ("==", "===")), None)
        if req.url:
            version = pep508.wheel_version(req.url.split("#")[0].rsplit("/", 1)[-1])
        try:
            version = None if version is None else str(Version(version))
        except InvalidVersion:
            version = None
        from_index = not req.url and recipe.index_of(entry) is None
        yield f"packages[{i}]", pep508.canonical_name(req.name), version, from_index


def extension_checks(
    recipe: Recipe, torch: str, table: ExtensionTable | None = None
) -> tuple[tuple[Refusal, ...], tuple[KnownIssue, ...]]:
    """(what the table refuses in ``recipe``'s packages beside ``torch``, the known
    issues that hold for them on the recipe's GPU)."""
    table = load_extensions() if table is None else table
    refusals: list[Refusal] = []
    issues: list[KnownIssue] = []
    for key, name, version, from_index in _entries(recipe):
        # the releases' facts are of the default index's wheels: not of a wheel named by
        # URL or a build from another index (which can pair with another torch)
        release = next(
            (
                r
                for r in table.releases
                if from_index
                and r.package == name
                and version is not None
                and Version(r.version) == Version(Version(version).public)
            ),
            None,
        )
        if release is not None and not SpecifierSet(release.requires).contains(
            torch, prereleases=True
        ):
            fit = table.fits(name, torch)
            refusals.append(
                Refusal(
                    key,
                    "extension-torch",
                    f"{key}: {name}=={version} requires torch{release.requires} (its wheels' "
                    f"metadata); the stack's torch is {torch}",
                    release.source,
                    f"pin {name}=={fit.version} (requires torch{fit.requires})"
                    if fit
                    else f"no {name} release in the table fits torch {torch}: remove it, or name a "
                    "wheel built for this torch by its URL with #sha256=",
                )
            )
        for limit in table.limits:
            if limit.package == name and limit.holds(recipe, version, from_index):
                if limit.refuse:
                    arch = recipe.gpu.arch or recipe.gpu.vendor
                    refusals.append(
                        Refusal(
                            key,
                            "extension-arch",
                            f"{key}: {name} on {arch}: {limit.issue.symptom}",
                            limit.issue.evidence[0],
                            limit.issue.workaround,
                        )
                    )
                else:
                    issues.append(limit.issue)
    return tuple(refusals), tuple(dict.fromkeys(issues))
