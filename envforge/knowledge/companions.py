"""Companion knowledge: which torchvision, torchaudio and Triton pair with each torch.

The data is ``envforge/data/companions.yaml`` (see its header); :func:`load_companions`
parses and checks it (compiled once: :mod:`envforge.core.datacache`).
:class:`CompanionTable` answers the questions the stack asks: which release of a
companion pairs with a torch release (:meth:`pairing`), whether a pinned release fits
(:meth:`row`, :meth:`fits`), and :func:`propose_row` turns a companion wheel's metadata
into a row for ``knowledge refresh``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envforge.core import datacache, pep508
from envforge.core.patterns import CONFIDENCES, Confidence
from envforge.core.resources import data_file

Family = Literal["cpu", "cuda", "rocm"]
FAMILIES: tuple[Family, ...] = ("cpu", "cuda", "rocm")
DATA_FILE = "companions.yaml"

if TYPE_CHECKING:
    from envforge.core import yamlcheck


def family_of(accelerator: str) -> Family:
    """``cpu`` / ``cuda`` / ``rocm`` for a wheel variant name (``cu126`` → ``cuda``)."""
    if accelerator.startswith("rocm"):
        return "rocm"
    if accelerator.startswith("cu"):
        return "cuda"
    return "cpu"


@dataclass(frozen=True)
class Package:
    name: str
    families: tuple[Family, ...]
    #: Its builds carry the variant's local tag (``+cpu``, ``+cu126``).
    local_tag: bool
    #: torch's own metadata pins it (envforge checks a pin, adds nothing).
    pinned_by_torch: bool
    #: A build without a local tag (the package index's) serves every family (torchao's
    #: py3 wheel): the audit does not judge its family by what it links.
    plain_build_fits: bool = False
    #: What it loads from the system at run time (torchcodec: FFmpeg's libraries), "" none.
    system: str = ""


@dataclass(frozen=True)
class Row:
    """One companion release and the torch it pairs with (see the data file's header)."""

    package: str
    version: str
    torch: str
    requires: str
    source: str
    checked: str
    confidence: Confidence
    accepts: str | None = None
    note: str = ""
    #: The CPython versions its wheels are built for, a PEP 440 specifier (``>=3.10,<3.15``:
    #: cp310 to cp314); None: those of the torch it pairs with.
    python: str | None = None
    #: Variant indexes known not to carry this release (``("cu129",)``).
    missing: tuple[str, ...] = ()

    def admits(self, torch: str) -> bool:
        """The companion's metadata allows this torch release (local tags ignored)."""
        return SpecifierSet(self.requires).contains(_base(torch), prereleases=True)

    def matches(self, version: str) -> bool:
        """``version`` (local tag ignored) is this row's release, or one torch accepts."""
        base = _base(version)
        if self.accepts is not None:
            return SpecifierSet(self.accepts).contains(base, prereleases=True)
        return Version(base) == Version(self.version)

    @property
    def reason(self) -> str:
        exact = self.requires.strip() == f"=={self.torch}"
        rel = f"requires torch{self.requires}" + ("" if exact else f", released with {self.torch}")
        return f"{self.package} {self.version} {rel} ({self.confidence}, checked {self.checked})"


@dataclass(frozen=True)
class CompanionTable:
    packages: tuple[Package, ...]
    rows: tuple[Row, ...]

    def package(self, name: str) -> Package | None:
        key = pep508.canonical_name(name)
        return next((p for p in self.packages if p.name == key), None)

    def rows_of(self, name: str) -> tuple[Row, ...]:
        key = pep508.canonical_name(name)
        return tuple(r for r in self.rows if r.package == key)

    def pairing(self, name: str, torch: str) -> Row | None:
        """The release of ``name`` that pairs with ``torch``: the one released with it,
        else the newest earlier release whose metadata admits it (torchaudio 2.11 for
        torch 2.13); rows that are only ``uncertain`` come last. None when there is none."""
        base = Version(_base(torch))
        rows = [
            r
            for r in self.rows_of(name)
            if Version(r.torch) == base or (Version(r.torch) <= base and r.admits(torch))
        ]
        if not rows:
            return None
        return max(
            rows,
            key=lambda r: (
                r.confidence != "uncertain",
                Version(r.torch) == base,
                Version(r.version),
            ),
        )

    def row(self, name: str, version: str) -> Row | None:
        """The row for a release of ``name`` (for triton: one whose ``accepts`` covers it)."""
        return next((r for r in self.rows_of(name) if r.matches(version)), None)

    def covers(self, name: str, version: str) -> bool:
        """``version`` is not older than the oldest release the table lists for ``name``:
        a release the table does not list from there on was not published (as of the
        rows' ``checked`` dates)."""
        rows = self.rows_of(name)
        return bool(rows) and Version(_base(version)) >= min(Version(r.version) for r in rows)

    def fits(self, name: str, version: str, torch: str) -> bool:
        """A release of ``name`` pinned at ``version`` works with ``torch``."""
        rows = [r for r in self.rows_of(name) if r.matches(version)]
        package = self.package(name)
        if package is not None and package.pinned_by_torch:
            return any(Version(r.torch) == Version(_base(torch)) for r in rows)
        return any(r.admits(torch) for r in rows)


def _base(version: str) -> str:
    return version.split("+", 1)[0]


# --------------------------------------------------------------------------- parsing


_TOP_KEYS = ("schema", "checked", "packages", "rows")
_PACKAGE_KEYS = ("families", "local_tag", "pinned_by_torch", "plain_build_fits", "system")
_ROW_KEYS = (
    "package",
    "version",
    "torch",
    "requires",
    "source",
    "accepts",
    "checked",
    "confidence",
    "note",
    "python",
    "missing",
)


#: The modules whose code decides what ``companions.yaml`` parses to.
PARSER_MODULES = (
    "knowledge/companions.py",
    "core/yamlcheck.py",
    "core/patterns.py",
    "core/datacache.py",
)


def load_companions(path: Path | None = None) -> CompanionTable:
    """Parse and check ``companions.yaml`` (or ``path``); :class:`TableError` when malformed.

    The shipped file is read from its compiled form when that is fresh
    (:mod:`envforge.core.datacache`), else parsed and compiled again."""
    if path is not None:
        return _load_file(path)
    where = data_file(DATA_FILE)
    return datacache.load(
        "companions",
        [where],
        lambda: _load_file(where),
        CompanionTable,
        (CompanionTable, Package, Row),
        code=PARSER_MODULES,
    )


def _load_file(where: Path) -> CompanionTable:
    data = datacache.read_yaml(where)
    return parse_companions(data, where.name)


def parse_companions(data: Any, source: str = DATA_FILE) -> CompanionTable:
    r = datacache.yaml_reader(source)
    top = r.mapping(data, "", _TOP_KEYS, required=_TOP_KEYS)
    if top["schema"] != 1:
        raise r.fail("schema", f"{top['schema']!r} is not a schema this envforge reads", "1")
    checked = r.text(top["checked"], "checked")
    if not isinstance(top["packages"], dict):
        raise r.fail("packages", "expected a mapping of distribution names")
    packages = tuple(_package(r, name, spec) for name, spec in top["packages"].items())
    names = {p.name for p in packages}
    rows_data = top["rows"]
    if not isinstance(rows_data, list):
        raise r.fail("rows", "must be a list of rows")
    rows = tuple(_row(r, i, item, names, checked) for i, item in enumerate(rows_data))
    return CompanionTable(packages, rows)


def _package(r: yamlcheck.Reader, name: object, spec: object) -> Package:
    key = f"packages.{name}"
    text = r.text(name, key)
    if pep508.canonical_name(text) != text:
        raise r.fail(key, "is not a canonical distribution name", pep508.canonical_name(text))
    m = r.mapping(spec, key, _PACKAGE_KEYS, required=("families", "local_tag"))
    families = r.texts(m["families"], f"{key}.families", non_empty=True)
    for fam in families:
        if fam not in FAMILIES:
            raise r.fail(f"{key}.families", f"{fam!r} is not a wheel family", "cpu, cuda, rocm")
    flags = {k: m.get(k, False) for k in ("local_tag", "pinned_by_torch", "plain_build_fits")}
    for k, v in flags.items():
        if not isinstance(v, bool):
            raise r.fail(f"{key}.{k}", "must be true or false")
    system = r.text(m["system"], f"{key}.system") if m.get("system") is not None else ""
    return Package(
        text,
        families,  # type: ignore[arg-type]
        flags["local_tag"],
        flags["pinned_by_torch"],
        flags["plain_build_fits"],
        system,
    )


def _row(r: yamlcheck.Reader, i: int, item: object, names: set[str], checked: str) -> Row:
    key = f"rows[{i}]"
    m = r.mapping(item, key, _ROW_KEYS, required=_ROW_KEYS[:5])
    package = r.text(m["package"], f"{key}.package")
    if package not in names:
        raise r.fail(f"{key}.package", f"{package!r} is not listed under packages")
    for field in ("version", "torch"):
        try:
            Version(r.text(m[field], f"{key}.{field}"))
        except InvalidVersion:
            raise r.fail(f"{key}.{field}", f"{m[field]!r} is not a version") from None
    for field in ("requires", "accepts", "python"):
        if m.get(field) is not None:
            try:
                SpecifierSet(r.text(m[field], f"{key}.{field}"))
            except InvalidSpecifier:
                raise r.fail(f"{key}.{field}", f"{m[field]!r} is not a PEP 440 specifier") from None
    source = r.text(m["source"], f"{key}.source")
    if not source.startswith("https://"):
        raise r.fail(f"{key}.source", "must be a URL a user can open", "https://...")
    confidence = m.get("confidence", "verified")
    if confidence not in CONFIDENCES:
        raise r.fail(
            f"{key}.confidence", f"{confidence!r} is not a confidence", ", ".join(CONFIDENCES)
        )
    return Row(
        package=package,
        version=str(m["version"]),
        torch=str(m["torch"]),
        requires=str(m["requires"]),
        source=source,
        checked=r.text(m.get("checked", checked), f"{key}.checked"),
        confidence=confidence,
        accepts=None if m.get("accepts") is None else str(m["accepts"]),
        note=str(m.get("note", "")),
        python=None if m.get("python") is None else str(m["python"]),
        missing=_missing(r, key, m.get("missing")),
    )


def _missing(r: yamlcheck.Reader, key: str, raw: object) -> tuple[str, ...]:
    """A row's ``missing``: variant names (``cu129``, ``cpu``, ``rocm7.2``)."""
    if raw is None:
        return ()
    names = r.texts(raw, f"{key}.missing", non_empty=True)
    for name in names:
        if not re.fullmatch(r"cpu|cu\d{3}|rocm\d+(\.\d+)*", name):
            raise r.fail(f"{key}.missing", f"{name!r} is not a variant index", "cu129, cpu")
    return tuple(names)


def companion_names(path: Path | None = None) -> frozenset[str]:
    """The distributions the companion table knows (a bare name in ``packages`` is pinned)."""
    return frozenset(p.name for p in load_companions(path).packages)


# --------------------------------------------------------------------------- refresh


def torch_requirement(metadata: str) -> tuple[str, str, str | None]:
    """(Name, Version, what it requires of torch) from a wheel's METADATA text (PEP 658):
    the specifier of its unconditional ``Requires-Dist: torch...`` line (``==2.13.0``,
    ``>=2.14.0``), None when it names none (torchaudio 2.11.0). Name and Version are ""
    when missing."""
    from email.parser import HeaderParser  # noqa: PLC0415 - 9 ms, for wheels' METADATA only

    msg = HeaderParser().parsestr(metadata)
    name, version = str(msg.get("Name") or "").strip(), str(msg.get("Version") or "").strip()
    for line in msg.get_all("Requires-Dist") or []:
        req = pep508.parse(str(line))
        if req is None:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue  # an optional extra is no requirement of torch
        if pep508.canonical_name(req.name) == "torch" and str(req.specifier):
            return name, version, str(req.specifier)
    return name, version, None


def propose_row(metadata: str, *, torch: str | None, source: str, checked: str) -> Row | None:
    """A row for a companion release from its wheel's METADATA text (PEP 658).

    ``torch`` is the torch release it was published with as far as ``knowledge refresh``
    can tell (upload dates), None when unknown; ``source`` the metadata file's URL;
    ``checked`` today's date. ``requires ==X`` pairs it with X (verified); another
    specifier keeps ``torch`` when it admits it (verified; ``uncertain`` otherwise); no torch
    requirement (torchaudio 2.11.0) is proposed ``==torch``, ``uncertain``, and says so.
    None when the metadata names no release or nothing says which torch it pairs with.
    """
    name, version, requires = torch_requirement(metadata)
    try:
        Version(version)
    except InvalidVersion:
        return None
    if not name:
        return None
    base = Row(
        package=pep508.canonical_name(name),
        version=Version(version).public,
        torch="",
        requires="",
        source=source,
        checked=checked,
        confidence="verified",
    )
    if requires is not None:
        spec = SpecifierSet(requires)
        pins = [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]
        if len(pins) == 1:  # a variant index's build may pin torch==2.13.0+cpu
            pin = _base(pins[0])
            return replace(base, torch=pin, requires=f"=={pin}" if pin != pins[0] else requires)
        if torch is None:
            return None
        if spec.contains(_base(torch), prereleases=True):
            return replace(
                base,
                torch=torch,
                requires=requires,
                note=f"released with torch {torch} (upload dates)",
            )
        return replace(
            base,
            torch=torch,
            requires=requires,
            confidence="uncertain",
            note=f"torch {torch} (upload dates) is outside its requirement: check",
        )
    if torch is None:
        return None
    return replace(
        base,
        torch=torch,
        requires=f"=={torch}",
        confidence="uncertain",
        note=f"the wheel's METADATA names no torch requirement: paired with torch {torch} "
        "by upload date, assumed ==; check the release notes",
    )


def row_yaml(row: Row) -> str:
    """One ``rows:`` entry as the data file writes it (for refresh's proposals)."""
    q = json.dumps  # a JSON string is a YAML double-quoted scalar
    fields = [
        f"package: {row.package}",
        f"version: {q(row.version)}",
        f"torch: {q(row.torch)}",
        f"requires: {q(row.requires)}",
        f"source: {q(row.source)}",
        f"checked: {q(row.checked)}",
    ]
    if row.confidence != "verified":
        fields.append(f"confidence: {row.confidence}")
    if row.note:
        fields.append(f"note: {q(row.note)}")
    return "  - {" + ", ".join(fields) + "}"
