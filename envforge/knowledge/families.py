"""ISA family rules (``envforge/data/families.yaml``): how ``envforge solve`` predicts an
answer for a GPU arch the compatibility table has no row for (issue 30, section 4).

Pure values and a parser; :func:`load_families` reads the shipped file. The rules are data
with sources: NVIDIA's same-major SASS and PTX JIT rules (which the solver's coverage already
applies to the wheels' arch lists) and LLVM's generic AMDGPU targets with their members.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envforge.core import datacache
from envforge.core.resources import data_file
from envforge.knowledge.arch import parse_gfx, parse_sm

if TYPE_CHECKING:
    from envforge.core import yamlcheck

DATA_FILE = "families.yaml"


@dataclass(frozen=True)
class Rule:
    """One NVIDIA compatibility rule: what it says and where it is written."""

    rule: str
    source: str


@dataclass(frozen=True)
class GenericTarget:
    """An LLVM generic AMDGPU target: the processors its code runs on."""

    name: str
    members: tuple[str, ...]
    #: gfx name prefixes of the same ISA generation (unlisted processors match less surely).
    prefixes: tuple[str, ...]
    source: str
    #: Where no wheel carries a member: the same-major generic target used instead.
    fallback: str = ""
    fallback_source: str = ""

    def matches(self, arch: str) -> bool:
        return arch in self.members or any(arch.startswith(p) for p in self.prefixes)


@dataclass(frozen=True)
class Families:
    """The family rules of ``families.yaml``."""

    same_major: Rule
    ptx: Rule
    amd_generic: tuple[GenericTarget, ...]

    def generic_for(self, arch: str) -> GenericTarget | None:
        """The generic target listing ``arch``, else the one whose generation prefix it has."""
        listed = [g for g in self.amd_generic if arch in g.members]
        if listed:
            return listed[0]
        by_prefix = [g for g in self.amd_generic if g.matches(arch)]
        return max(by_prefix, key=lambda g: max(len(p) for p in g.prefixes)) if by_prefix else None

    def named(self, name: str) -> GenericTarget | None:
        return next((g for g in self.amd_generic if g.name == name), None)

    def predictable(self, arch: str) -> bool:
        """``arch`` is a plain SM or a gfx target a family rule can speak for."""
        if parse_sm(arch) is not None:
            return True
        return parse_gfx(arch) is not None and self.generic_for(arch) is not None


def load_families(path: Path | None = None) -> Families:
    """Parse ``families.yaml`` (or ``path``); :class:`TableError` when malformed."""
    where = path or data_file(DATA_FILE)
    return parse_families(datacache.read_yaml(where), where.name)


def parse_families(data: Any, source: str = DATA_FILE) -> Families:
    r = datacache.yaml_reader(source)
    keys = ("schema", "nvidia", "amd_generic")
    top = r.mapping(data, "", keys, required=keys)
    if top["schema"] != 1:
        raise r.fail("schema", f"{top['schema']!r} is not a schema this envforge reads", "1")
    nvidia = r.mapping(top["nvidia"], "nvidia", ("same_major", "ptx"), ("same_major", "ptx"))
    rules = {k: _rule(r, nvidia[k], f"nvidia.{k}") for k in ("same_major", "ptx")}
    items = top["amd_generic"]
    if not isinstance(items, list) or not items:
        raise r.fail("amd_generic", "must be a non-empty list of generic targets")
    generic = tuple(_generic(r, item, f"amd_generic[{i}]") for i, item in enumerate(items))
    names = {g.name for g in generic}
    for i, g in enumerate(generic):
        if g.fallback and g.fallback not in names:
            raise r.fail(f"amd_generic[{i}].fallback", f"{g.fallback!r} is not a generic target")
    return Families(rules["same_major"], rules["ptx"], generic)


def _rule(r: yamlcheck.Reader, raw: object, path: str) -> Rule:
    m = r.mapping(raw, path, ("rule", "source"), ("rule", "source"))
    return Rule(r.text(m["rule"], f"{path}.rule"), r.text(m["source"], f"{path}.source"))


def _generic(r: yamlcheck.Reader, raw: object, path: str) -> GenericTarget:
    keys = ("name", "members", "prefixes", "source")
    m = r.mapping(raw, path, (*keys, "fallback", "fallback_source"), keys)
    fallback = r.opt_text(m.get("fallback"), f"{path}.fallback") or ""
    fallback_source = r.opt_text(m.get("fallback_source"), f"{path}.fallback_source") or ""
    if bool(fallback) != bool(fallback_source):
        raise r.fail(f"{path}.fallback", "fallback and fallback_source go together")
    members = r.texts(m["members"], f"{path}.members", non_empty=True)
    bad = [a for a in members if parse_gfx(a) is None]
    if bad:
        raise r.fail(f"{path}.members", f"not gfx targets: {', '.join(bad)}", "gfx1100")
    return GenericTarget(
        name=r.text(m["name"], f"{path}.name"),
        members=members,
        prefixes=r.texts(m["prefixes"], f"{path}.prefixes"),
        source=r.text(m["source"], f"{path}.source"),
        fallback=fallback,
        fallback_source=fallback_source,
    )
