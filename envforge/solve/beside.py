"""``solve`` beside the curated recipe: when both answer for one arch and differ, say so and why.

``envforge solve ARCH`` derives the newest stack the table verifies; a curated recipe
may pin an older one on purpose (gfx1031: torch 2.5.1+rocm6.2, because RDNA2 users
report "Module not initialized" aborts on the ROCm 6.4+ wheels). :func:`for_solution`
(``solve``'s side) and :func:`for_recipe` (``show``'s side) make one :class:`Beside`:
the recipe that ``build auto`` takes for the arch (:func:`envforge.solve.choose.curated_cover`),
its pins and the solution's, why the recipe pins what it does and what ``auto`` uses.

Why the recipe differs is read from the recipe file's own fields, never invented: the
sentences of its ``description`` that name its torch version, its runtime or ``solve``,
and its ``known_issues`` whose workaround keeps to "this recipe" (what the pin avoids),
with their evidence (else the recipe's ``sources``).

Start-up stays light: the catalogue's row cache (:mod:`envforge.recipe.listing`) says
which recipes can cover the arch; only those are loaded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envforge.core.paths import state_dir
from envforge.errors import EnvforgeError
from envforge.host.hostinfo import GpuInfo
from envforge.knowledge import load_table
from envforge.knowledge.arch import gfx_from_isa, vendor_of
from envforge.knowledge.platforms import solve_default
from envforge.recipe import listing
from envforge.recipe.catalogue import Catalogue
from envforge.solve.choose import candidate_archs, curated_cover, override_for, solver

if TYPE_CHECKING:
    from envforge.recipe.model import KnownIssue, Recipe
    from envforge.solve.solution import Solution

_SENTENCE = re.compile(r"(?<=[.!?])(?<!e\.g\.)(?<!i\.e\.)\s+(?=[A-Za-z(])")
#: Known issues whose workaround says to stay on this recipe's pins (and not "this
#: recipe is newer": those are about older stacks).
_KEEPS = re.compile(r"\bthis recipe\b(?! is newer)", re.IGNORECASE)


@dataclass(frozen=True)
class Beside:
    """A curated recipe and ``solve``'s answer for one arch."""

    arch: str
    recipe: str
    #: ``torch 2.5.1+rocm6.2 py3.10``
    recipe_stack: str
    #: ``torch 2.14.1+rocm7.2 py3.12``; None when solve finds no stack for the arch.
    solved_stack: str | None
    #: The torch version or its runtime differs (Python alone does not count).
    differs: bool
    #: Why the recipe pins what it does (its description's sentences about its stack).
    why: str
    #: What the pin avoids: known issues whose workaround keeps to the recipe.
    avoids: tuple[str, ...]
    evidence: tuple[str, ...]
    #: Why solve picks its torch (its pick's reason and confidence), or why it found none.
    solve_why: str
    #: The recipe ``build auto`` uses on this arch (the curated one covers it).
    auto_uses: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "recipe": self.recipe,
            "recipe_stack": self.recipe_stack,
            "solved_stack": self.solved_stack,
            "differs": self.differs,
            "why": self.why,
            "avoids": list(self.avoids),
            "evidence": list(self.evidence),
            "solve_why": self.solve_why,
            "auto_uses": self.auto_uses,
        }

    def _reasons(self) -> list[str]:
        out = [f"      reason: {self.why}"] if self.why else []
        out += [f"      avoids: {a}" for a in self.avoids]
        if self.evidence:
            out.append(f"      evidence: {', '.join(self.evidence)}")
        return out

    def solve_lines(self) -> list[str]:
        """What ``solve`` prints when the recipe differs (none when it does not)."""
        if not self.differs:
            return []
        head = (
            f"  curated    recipe {self.recipe} pins {self.recipe_stack} for {self.arch}, not "
            f"this solution's {self.solved_stack}; `build auto` on {self.arch} uses the "
            f"recipe (envforge show {self.recipe})"
        )
        return [head, *self._reasons()]

    def show_lines(self) -> list[str]:
        """What ``show`` prints when ``solve`` answers differently (none when it does not)."""
        if not self.differs:
            return []
        auto = "this recipe" if self.auto_uses == self.recipe else f"recipe {self.auto_uses}"
        if self.solved_stack is None:
            solved = f"envforge solve {self.arch} finds no stack ({self.solve_why})"
        else:
            solved = f"envforge solve {self.arch} picks {self.solved_stack} ({self.solve_why})"
        head = (
            f"  solve      {solved}; this recipe keeps {self.recipe_stack} on purpose, and "
            f"`build auto` on {self.arch} uses {auto}"
        )
        return [head, *self._reasons()]


def stack_label(torch: str, variant: str, python: str) -> str:
    return f"torch {torch.split('+', 1)[0]}+{variant} py{python}"


def recipe_reason(recipe: Recipe) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(why, avoids, evidence) for the recipe's pins, from its own fields (module doc)."""
    version = recipe.torch.version.split("+", 1)[0]
    words = (version, recipe.accelerator, "solve")
    sentences = [s.strip() for s in _SENTENCE.split(" ".join(recipe.description.split()))]
    why = " ".join(s for s in sentences if any(w in s for w in words))
    kept: Sequence[KnownIssue] = [k for k in recipe.known_issues if _KEEPS.search(k.workaround)]
    avoids = tuple(f"{k.symptom} (workaround: {k.workaround})" for k in kept)
    evidence = tuple(dict.fromkeys(link for k in kept for link in k.evidence))
    return why, avoids, evidence or tuple(recipe.sources)


def compare(
    recipe: Recipe, arch: str, solution: Solution | None, problem: str | None, auto_uses: str
) -> Beside:
    """``recipe`` beside ``solution`` (None: solve found none, ``problem`` says why)."""
    mine = stack_label(recipe.torch.version, recipe.accelerator, recipe.python)
    solved: str | None = None
    differs = True
    solve_why = problem or "no stack"
    if solution is not None:
        s = solution.stack
        solved = stack_label(s.torch, s.variant, s.python)
        differs = (s.torch.split("+", 1)[0], s.variant) != (
            recipe.torch.version.split("+", 1)[0],
            recipe.accelerator,
        )
        pick = next((p for p in solution.picks if p.key == "torch"), None)
        solve_why = (
            f"{pick.reason}; {s.confidence}"
            if pick is not None
            else f"the table's choice; {s.confidence}"
        )
    why, avoids, evidence = recipe_reason(recipe)
    return Beside(
        arch=arch,
        recipe=recipe.name,
        recipe_stack=mine,
        solved_stack=solved,
        differs=differs,
        why=why,
        avoids=avoids,
        evidence=evidence,
        solve_why=solve_why,
        auto_uses=auto_uses,
    )


def covering_recipe(
    arch: str, catalogue: Catalogue | None = None, known: Recipe | None = None
) -> Recipe | None:
    """The curated recipe ``build auto`` takes for ``arch`` (it covers the arch), or None.

    Only the recipes the row cache says could serve the arch are loaded: its own arch
    when a recipe has it (``auto`` looks there first), else the archs the table serves
    it with and (AMD) those sharing its ``HSA_OVERRIDE_GFX_VERSION`` or that override's
    target. ``known``: a recipe already loaded (``show``'s), not loaded again.
    """
    vendor = vendor_of(arch)
    if vendor is None:
        return None
    cat = catalogue or Catalogue.default()
    files = cat.files()
    serving = {arch, *candidate_archs(arch)}
    value = override_for(arch) if vendor == "amd" else None
    if value:
        serving.add(gfx_from_isa(value) or arch)

    def could(row: listing.Row) -> bool:
        if row.error is not None or row.vendor != vendor or row.arch is None:
            return False
        return row.arch in serving or bool(value and override_for(row.arch) == value)

    rows = [r for r in listing.rows(files, state_dir() / "cache") if could(r)]
    own = [r for r in rows if r.arch == arch]
    if own and candidate_archs(arch)[:1] == [arch]:
        rows = own
    recipes = []
    for row in rows:
        if known is not None and known.origin == row.path:
            recipes.append(known)
            continue
        try:
            recipes.append(cat.load(row.path))
        except EnvforgeError:
            continue
    gpu = GpuInfo(
        vendor=vendor, product=arch, arch=arch, driver_version=None, device_nodes=(), source="solve"
    )
    choice, _problem = curated_cover(gpu, recipes, where={r.name: files[r.name] for r in rows})
    if choice is None:
        return None
    return next((r for r in recipes if r.name == choice.recipe), None)


def for_solution(solution: Solution, catalogue: Catalogue | None = None) -> Beside | None:
    """``solve``'s side: the curated recipe that covers the solved arch, beside it."""
    recipe = covering_recipe(solution.arch, catalogue)
    if recipe is None:
        return None
    return compare(recipe, solution.arch, solution, None, recipe.name)


def for_recipe(recipe: Recipe, catalogue: Catalogue | None = None) -> Beside | None:
    """``show``'s side: what ``solve`` picks for the recipe's arch, beside the recipe
    (None for a recipe without an arch: cpu)."""
    arch = recipe.gpu.arch
    if not arch or recipe.gpu.vendor not in ("amd", "nvidia"):
        return None
    solving = solver()  # show only
    solution: Solution | None = None
    problem: str | None = None
    try:
        solution = solving.solve(
            solving.SolveRequest(arch=arch, platform=solve_default()), load_table()
        )
    except EnvforgeError as exc:
        problem = exc.message
    auto = covering_recipe(arch, catalogue, known=recipe)
    return compare(recipe, arch, solution, problem, auto.name if auto else recipe.name)
