"""Predicted answers for GPU archs the compatibility table has no row for (issue 30, §4).

The family rules are data (``families.yaml``, :mod:`envforge.knowledge.families`):

- **NVIDIA** ``sm_XY`` (sm_88, sm_122, sm_130): the solver's own coverage decides, as for a
  known arch (SASS of the same major and a lower minor, else PTX the driver JIT-compiles);
  the prediction names which rule ran and its source.
- **AMD** ``gfxNNNN`` (gfx1154, gfx1037): LLVM's generic target of its ISA generation. No
  wheel the table knows carries a generic target, so the prediction is the
  ``HSA_OVERRIDE_GFX_VERSION`` route to the nearest member some wheel carries, as a
  predicted override row (status works, confidence uncertain) added for this solve only.

A prediction is an answer with confidence ``predicted`` ("predicted, not verified"): its
stack is uncertain, its reason names the rule and the source; ``--strict`` refuses it with
:class:`Predicted` (exit 2). An arch the table knows never takes this path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from envforge.errors import InvalidInput
from envforge.knowledge.arch import family, isa_from_gfx, ordinal, parse_gfx, parse_sm, sort_key
from envforge.knowledge.table import CompatTable, Override
from envforge.solve.coverage import known_archs
from envforge.solve.solution import HSA_OVERRIDE, Solution, Stack

if TYPE_CHECKING:
    from envforge.knowledge.families import Families, GenericTarget

#: The confidence word of a predicted answer.
PREDICTED = "predicted"


class Predicted(InvalidInput):
    """``--strict`` and the answer would only be predicted from the arch's family. Exit 2."""


@dataclass(frozen=True)
class Prediction:
    """How an arch with no row is solved: the table to solve against and the rule used."""

    arch: str
    #: The table, plus (AMD) the predicted override row for ``arch``.
    table: CompatTable
    families: Families
    generic: GenericTarget | None = None
    override: Override | None = None


def prediction_for(
    arch: str, table: CompatTable, families: Families | None = None
) -> Prediction | None:
    """The prediction for ``arch`` when the table has no row for it and a family rule
    applies; None for a known arch or one no rule speaks for (the solver then refuses it)."""
    if arch in known_archs(table):
        return None
    if families is None:  # the rules are read for an arch the table has no row for only
        from envforge.knowledge.families import load_families  # noqa: PLC0415 - see above

        families = load_families()
    rules = families
    sm = parse_sm(arch)
    if sm is not None:
        return Prediction(arch, table, rules)
    if parse_gfx(arch) is None:
        return None
    generic = rules.generic_for(arch)
    if generic is None:
        return None
    route = generic
    target = _nearest_carried(arch, generic, table)
    if target is None and generic.fallback:
        route = rules.named(generic.fallback) or generic
        target = _nearest_carried(arch, route, table)
    value = isa_from_gfx(target) if target else None
    if target is None or value is None:
        return None
    o = Override(
        arch=arch,
        value=value,
        target=target,
        status="works",
        confidence="uncertain",
        note=f"predicted, not verified: {target} is the nearest {route.name} member a wheel "
        "carries" + ("" if route is generic else f" ({generic.name} has none; the ISA differs)"),
        source=route.source if route is generic else generic.fallback_source,
        origin="families.yaml",
    )
    return Prediction(arch, replace(table, overrides=(*table.overrides, o)), rules, generic, o)


def _nearest_carried(arch: str, generic: GenericTarget, table: CompatTable) -> str | None:
    """The member of ``generic`` nearest ``arch`` that some ROCm wheel of the table lists
    and does not mark broken (only listed members share the generic target's ISA)."""
    carried = {
        a
        for r in table.releases
        for v in r.variants
        if v.kind == "rocm"
        for a in v.archs
        if a in generic.members and v.broken_arch(a) is None
    }
    if not carried:
        return None
    here = ordinal(arch) or 0
    return min(carried, key=lambda a: (abs((ordinal(a) or 0) - here), sort_key(a)))


def reason(p: Prediction, stack: Stack) -> str:
    """Why the answer holds: the family rule, what runs, the source."""
    head = f"{p.arch} has no row in the compatibility table; predicted from its ISA family"
    if p.generic is not None and p.override is not None:
        g, o = p.generic, p.override
        how = "a listed member" if p.arch in g.members else "not a listed member, same generation"
        text = f"{head} {g.name} ({how}; members {', '.join(g.members)}; {g.source}): "
        if o.target in g.members:
            return text + (
                f"no wheel carries {g.name} code, so {HSA_OVERRIDE}={o.value} runs the code "
                f"of {o.target}, the nearest member a wheel carries"
            )
        return text + (
            f"no wheel carries {g.name} code or any member's, so {HSA_OVERRIDE}={o.value} runs "
            f"the code of {o.target}, the nearest supported target of the same major ({g.fallback}"
            f"; a different ISA, as {g.fallback_source})"
        )
    fam = family(p.arch) or p.arch
    if stack.via == "ptx":
        return (
            f"{head} {fam}: no wheel has SASS of its major, so the driver JIT-compiles the "
            f"wheel's {stack.runs} PTX (first start-up compiles every kernel: minutes; cached "
            f"after) ({p.families.ptx.rule}; {p.families.ptx.source})"
        )
    return (
        f"{head} {fam}: the wheel's {stack.runs} SASS runs on it (same major, lower minor: "
        f"{p.families.same_major.source})"
    )


def mark(p: Prediction, solution: Solution, *, strict: bool) -> Solution:
    """``solution`` marked as predicted (or :class:`Predicted` under ``--strict``)."""
    why = reason(p, solution.stack)
    if strict:
        raise Predicted(
            f"--strict: {solution.arch}'s answer (torch {solution.stack.torch}+"
            f"{solution.stack.variant}) would be predicted, not verified: {why}",
            hint=f"drop --strict, or add a row for {solution.arch} to the table (an overlay: "
            "envforge knowledge refresh -o FILE; docs/knowledge.md)",
        )

    def uncertain(s: Stack) -> Stack:
        return replace(
            s, confidence="uncertain", doubts=(f"predicted, not verified: {why}", *s.doubts)
        )

    return replace(
        solution,
        stack=uncertain(solution.stack),
        runner_ups=tuple(uncertain(s) for s in solution.runner_ups),
        notes=(f"predicted, not verified: {why}", *solution.notes),
        prediction=why,
    )
