"""Recipe choice: ``auto`` → the recipe for this host's GPU.

Rules, in order (see :func:`choose`):

0. The GPU chosen for is :attr:`HostInfo.primary`: a discrete GPU over an integrated one
   (gfx1036 iGPU beside an RX 7900 XTX: pytorch/pytorch#119637), and the reason says so.
   :func:`choose_per_arch` gives one recipe per arch on a host whose GPUs differ.
1. No GPU (or ``ENVFORGE_GPU_VENDOR=none``) → ``cpu``.
2. The first arch of :func:`envforge.knowledge.recipe_arch_for` that has a recipe: the
   arch itself, then archs sharing its ``HSA_OVERRIDE_GFX_VERSION`` row, then the
   override target; NVIDIA: same-major lower SMs.
3. AMD: an arch that runs another arch's code through ``HSA_OVERRIDE_GFX_VERSION``
   (gfx1032 → 10.3.0) → the recipe of its family that already sets that override
   (preferring the closest arch name: gfx1032 → gfx1031, gfx1012 → gfx1010), else the
   recipe of the target arch itself.
4. NVIDIA: the recipe whose CUDA wheel variant has SASS for the SM (newest torch first).
5. Otherwise :class:`InvalidInput`, listing the nearest recipes of the same vendor.

``auto`` (:func:`choose`, :func:`choose_each`, :func:`load_choice`: the one resolver every
command uses) takes the recipe of these rules only when it *covers* the arch: its own arch,
or (AMD) a recipe that sets the ``HSA_OVERRIDE_GFX_VERSION`` the table gives the arch.
Otherwise the stack :func:`envforge.solve.solver.solve` derives is used as a recipe under the
arch's own name (``solved``: uncertain until certified), never another arch's recipe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from envforge import knowledge
from envforge.errors import EnvforgeError, InvalidInput
from envforge.host.hostinfo import GpuInfo, HostInfo
from envforge.knowledge import load_table
from envforge.knowledge.arch import gfx_from_isa, vendor_of
from envforge.knowledge.arch import ordinal as arch_ordinal
from envforge.knowledge.platforms import solve_default
from envforge.recipe import compiled
from envforge.recipe.catalogue import Catalogue
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    from envforge.solve.solution import Solution

CPU_RECIPE = "cpu"


@dataclass(frozen=True)
class Choice:
    """Which recipe ``auto`` means on this host, and why."""

    recipe: str
    arch: str | None
    reason: str
    gpu: GpuInfo | None = None
    path: Path | None = None
    #: The solved stack as recipe data (``envforge solve``'s recipe) when no curated
    #: recipe covers the arch; None for a curated recipe.
    solved: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: Why the solved stack is only predicted from the arch's ISA family (the table has no
    #: row for the arch); "" otherwise.
    predicted: str = ""

    @property
    def ref(self) -> str:
        """What the catalogue loads: the recipe's file when it came from a folder."""
        return str(self.path) if self.path is not None else self.recipe

    def to_dict(self) -> dict[str, object]:
        return {
            "recipe": self.recipe,
            "arch": self.arch,
            "reason": self.reason,
            "gpu": self.gpu.to_dict() if self.gpu else None,
            "path": str(self.path) if self.path else None,
            "solved": self.solved is not None,
            "predicted": self.predicted or None,
        }


def override_for(arch: str) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION`` value for ``arch``, from the knowledge table
    (None where the table knows the override to be broken, e.g. gfx1103)."""
    return knowledge.override_target(arch)


def candidate_archs(arch: str) -> list[str]:
    """Archs whose recipes serve ``arch``, best first, from the knowledge table."""
    return knowledge.recipe_arch_for(arch)


def cuda_sms(recipe: Recipe) -> tuple[str, ...]:
    """SM archs the recipe's CUDA wheel runs on, from the knowledge table."""
    return knowledge.cuda_archs(recipe)


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+", 1)[0]))


def nearest(arch: str, recipes: Sequence[Recipe], limit: int = 3) -> list[Recipe]:
    """Recipes of the same vendor, closest arch first (shared prefix, then numeric distance)."""
    vendor = vendor_of(arch) or ("amd" if arch.startswith("gfx") else "nvidia")
    number = arch_ordinal(arch) or 0
    same = [r for r in recipes if r.gpu.vendor == vendor and r.gpu.arch]
    same.sort(
        key=lambda r: (
            -_common_prefix(arch, r.gpu.arch or ""),
            abs((arch_ordinal(r.gpu.arch or "") or 0) - number),
            r.name,
        )
    )
    return same[:limit]


def load_catalogue(catalogue: Catalogue | None = None) -> tuple[list[Recipe], list[str]]:
    """Every recipe that loads, plus one line per file that does not (they are skipped)."""
    cat = catalogue or Catalogue.default()
    recipes: list[Recipe] = []
    problems: list[str] = []
    for _name, path in cat.files().items():
        try:
            recipes.append(cat.load(str(path)))
        except EnvforgeError as exc:
            problems.append(exc.one_line())
    return recipes, problems


def choose_recipe(
    host: HostInfo,
    recipes: Sequence[Recipe],
    *,
    candidates: Callable[[str], list[str]] = candidate_archs,
    override: Callable[[str], str | None] = override_for,
    sms: Callable[[Recipe], tuple[str, ...]] = cuda_sms,
    paths: Mapping[str, Path] | None = None,
) -> Choice:
    """Pick the recipe for ``host`` from ``recipes`` (see the module docstring).

    On a host with an integrated GPU beside a discrete one, the discrete GPU
    (:attr:`HostInfo.primary`) is chosen for, and the reason says so.
    """
    by_name = {r.name: r for r in recipes}
    where = paths or {}
    gpu = host.primary
    if gpu is None:
        if CPU_RECIPE not in by_name:
            raise InvalidInput("no GPU detected and no cpu recipe in the catalogue")
        return Choice(CPU_RECIPE, None, "no GPU detected", None, where.get(CPU_RECIPE))
    choice = _choose_for_gpu(
        gpu, recipes, candidates=candidates, override=override, sms=sms, where=where
    )
    return _discrete_noted(choice, host, gpu)


@dataclass(frozen=True)
class ArchChoice:
    """The recipe for one arch of a host whose GPUs have several (or None and why not)."""

    arch: str
    gpus: tuple[int, ...]
    integrated: bool
    choice: Choice | None
    problem: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "arch": self.arch,
            "gpus": list(self.gpus),
            "integrated": self.integrated,
            "recipe": self.choice.recipe if self.choice else None,
            "reason": self.choice.reason if self.choice else None,
            "problem": self.problem,
        }


def choose_per_arch(
    host: HostInfo,
    recipes: Sequence[Recipe],
    *,
    paths: Mapping[str, Path] | None = None,
) -> tuple[ArchChoice, ...]:
    """One recipe per distinct arch of ``host`` (device order), each with its reason; an
    arch no recipe serves carries the reason instead."""
    out: list[ArchChoice] = []
    for arch, gpus in host.by_arch():
        try:
            choice: Choice | None = _auto_for_gpu(gpus[0], recipes, where=paths or {})
            problem = None
        except EnvforgeError as exc:
            choice, problem = None, exc.one_line()
        out.append(
            ArchChoice(
                arch=arch,
                gpus=tuple(g.index for g in gpus),
                integrated=all(g.integrated for g in gpus),
                choice=choice,
                problem=problem,
            )
        )
    return tuple(out)


def _choose_for_gpu(
    gpu: GpuInfo,
    recipes: Sequence[Recipe],
    *,
    candidates: Callable[[str], list[str]] = candidate_archs,
    override: Callable[[str], str | None] = override_for,
    sms: Callable[[Recipe], tuple[str, ...]] = cuda_sms,
    where: Mapping[str, Path],
) -> Choice:
    if gpu.arch is None:
        raise InvalidInput(
            f"cannot tell the arch of {gpu.product}",
            hint="set ENVFORGE_GPU_ARCH (e.g. gfx1031 or sm_90), or name a recipe",
        )
    arch = gpu.arch
    for serving in candidates(arch):
        found = sorted(
            (r for r in recipes if r.gpu.vendor == gpu.vendor and r.gpu.arch == serving),
            key=lambda r: (r.name != serving, r.name),
        )
        if not found:
            continue
        r = found[0]
        if serving == arch:
            reason = f"recipe for {arch} ({gpu.product})"
        else:
            reason = f"{r.name} serves {arch} ({gpu.product}) per the compatibility table"
            value = override(arch) if gpu.vendor == "amd" else None
            if value and r.env_map.get("HSA_OVERRIDE_GFX_VERSION", "").strip() != value:
                reason += f"; set HSA_OVERRIDE_GFX_VERSION={value} for it"
            elif value:
                reason += f" (it sets HSA_OVERRIDE_GFX_VERSION={value})"
        return Choice(r.name, arch, reason, gpu, where.get(r.name))

    if gpu.vendor == "amd":
        value = override(arch)
        if value:
            family = [
                r
                for r in recipes
                if r.gpu.vendor == "amd"
                and r.gpu.arch
                and r.env_map.get("HSA_OVERRIDE_GFX_VERSION", "").strip() == value
            ]
            family.sort(key=lambda r: (-_common_prefix(arch, r.gpu.arch or ""), r.name))
            if family:
                r = family[0]
                return Choice(
                    r.name,
                    arch,
                    f"{arch} runs as {gfx_from_isa(value)} with HSA_OVERRIDE_GFX_VERSION={value};"
                    f" {r.name} is the closest recipe that sets it",
                    gpu,
                    where.get(r.name),
                )
            target = gfx_from_isa(value)
            direct = [r for r in recipes if r.gpu.arch == target]
            if direct:
                r = direct[0]
                return Choice(
                    r.name,
                    arch,
                    f"{arch} runs {target} code; recipe {r.name} needs"
                    f" HSA_OVERRIDE_GFX_VERSION={value} set (envforge shell --set or export it)",
                    gpu,
                    where.get(r.name),
                )
    elif gpu.vendor == "nvidia":
        covering = [r for r in recipes if r.gpu.vendor == "nvidia" and arch in sms(r)]
        covering.sort(key=lambda r: (_version_key(r.torch.version), r.name), reverse=True)
        if covering:
            r = covering[0]
            return Choice(
                r.name,
                arch,
                f"the {r.accelerator} wheel of torch {r.torch.version} has kernels for {arch}",
                gpu,
                where.get(r.name),
            )

    near = nearest(arch, recipes)
    listed = ", ".join(f"{r.name} ({r.gpu.arch})" for r in near) or "none"
    raise InvalidInput(
        f"no recipe for {arch} ({gpu.product}); nearest: {listed}",
        hint="name one of them explicitly (they may not work on this GPU), write a recipe for "
        f"{arch}, or use the cpu recipe",
    )


def covers(
    recipe: Recipe, gpu: GpuInfo, *, override: Callable[[str], str | None] = override_for
) -> bool:
    """The recipe is made for ``gpu``'s arch: its own arch, or (AMD) it sets the
    ``HSA_OVERRIDE_GFX_VERSION`` the table gives that arch."""
    if gpu.arch is None or recipe.gpu.vendor != gpu.vendor:
        return False
    if recipe.gpu.arch == gpu.arch:
        return True
    if gpu.vendor != "amd":
        return False
    value = override(gpu.arch)
    return bool(value) and recipe.env_map.get("HSA_OVERRIDE_GFX_VERSION", "").strip() == value


def curated_cover(
    gpu: GpuInfo, recipes: Sequence[Recipe], *, where: Mapping[str, Path] | None = None
) -> tuple[Choice | None, EnvforgeError | None]:
    """The curated recipe ``auto`` takes for ``gpu`` (rules 1-4, and it :func:`covers` the
    arch), else None with why the rules found none (None: one was found, not covering)."""
    try:
        curated = _choose_for_gpu(gpu, recipes, where=where or {})
    except EnvforgeError as exc:
        return None, exc
    by_name = {r.name: r for r in recipes}
    if curated.recipe in by_name and covers(by_name[curated.recipe], gpu):
        return curated, None
    return None, None


def solver() -> ModuleType:
    """:mod:`envforge.solve.solver`, imported when a stack is solved (no curated recipe
    covers the GPU; ``show`` of a GPU recipe): choosing a curated recipe needs none."""
    from envforge.solve import solver as module  # noqa: PLC0415 - see above

    return module


def _auto_for_gpu(gpu: GpuInfo, recipes: Sequence[Recipe], *, where: Mapping[str, Path]) -> Choice:
    """A curated recipe that covers ``gpu`` (:func:`covers`), else the solved stack."""
    curated, problem = curated_cover(gpu, recipes, where=where)
    if curated is not None:
        return curated
    if gpu.arch is None:  # _choose_for_gpu asked for ENVFORGE_GPU_ARCH
        raise problem or InvalidInput(f"cannot tell the arch of {gpu.product}")
    driver = gpu.driver_version if gpu.vendor == "nvidia" else None
    solving = solver()
    request = solving.SolveRequest(arch=gpu.arch, driver=driver, platform=solve_default())
    solution: Solution = solving.solve(request, load_table())
    s = solution.stack
    sure = ""
    if solution.prediction:
        sure = "predicted, not verified, from its ISA family: the table has no row for it; "
    return Choice(
        solution.arch,
        gpu.arch,
        f"no curated recipe covers {gpu.arch} ({gpu.product}); using the solved stack "
        f"torch {s.torch}+{s.variant} py{s.python} ({sure}uncertain until certified)",
        gpu,
        None,
        solved=solution.recipe_dict(),
        predicted=solution.prediction,
    )


def choose_auto(
    host: HostInfo, recipes: Sequence[Recipe], *, paths: Mapping[str, Path] | None = None
) -> Choice:
    """``auto`` for ``host`` from ``recipes``: a curated recipe that covers the arch of
    :attr:`HostInfo.primary`, else the solved stack (see the module docstring)."""
    gpu = host.primary
    if gpu is None:
        return choose_recipe(host, recipes, paths=paths)
    choice = _auto_for_gpu(gpu, recipes, where=paths or {})
    return _discrete_noted(choice, host, gpu)


def choose_each(host: HostInfo, catalogue: Catalogue | None = None) -> tuple[ArchChoice, ...]:
    """:func:`choose_per_arch` against the catalogue (shipped plus ENVFORGE_RECIPE_PATH)."""
    cat = catalogue or Catalogue.default()
    recipes, _problems = load_catalogue(cat)
    return choose_per_arch(host, recipes, paths=cat.files())


def choose(host: HostInfo, catalogue: Catalogue | None = None) -> Choice:
    """``auto`` for ``host`` against the catalogue (shipped plus ENVFORGE_RECIPE_PATH)."""
    cat = catalogue or Catalogue.default()
    recipes, _problems = load_catalogue(cat)
    return choose_auto(host, recipes, paths=cat.files())


def load_choice(
    choice: Choice, overrides: Sequence[str] = (), catalogue: Catalogue | None = None
) -> Recipe:
    """The recipe ``choice`` names: the curated file, or the solved stack parsed as a
    recipe (``--set`` applied to either). Not yet checked against the table."""
    if choice.solved is None:
        return (catalogue or Catalogue.default()).load(choice.ref, overrides)

    source = f"<solved stack for {choice.recipe}: envforge solve {choice.recipe}>"
    return compiled.parse_recipe(dict(choice.solved), source, overrides)


def choose_named(ref: str, catalogue: Catalogue | None = None) -> Choice | None:
    """RECIPE given as a GPU (``"RX 7900 XTX"``, ``H200``) or as an arch no recipe is
    named after (``gfx1012``): what ``auto`` takes for that GPU (a curated recipe that
    covers its arch, else the solved stack). None for ``auto``, a recipe name or a path,
    and for a name that matches no GPU at all (the catalogue's own error stands). A name
    the table's GPU names match only in part is exit 2 listing the candidates."""
    from envforge.knowledge.gpu_names import resolve_name  # noqa: PLC0415 - names only

    cat = catalogue or Catalogue.default()
    if ref == "auto" or "/" in ref or ref.endswith((".yaml", ".yml")) or ref in cat.files():
        return None
    table = load_table()
    found = resolve_name(ref, table)
    if found.candidates:
        raise InvalidInput(
            f"no recipe named {ref!r}, and it is not exactly one GPU the compatibility table"
            f" names; it may mean: {found.listing()}",
            hint="name one of them exactly (quoted), its arch, or a recipe (envforge list)",
        )
    info = table.arch_info(found.arch) if found.arch is not None else None
    vendor = vendor_of(found.arch) if found.arch is not None else None
    if found.arch is None or vendor is None or info is None:
        return None
    product = ref.strip()  # the name asked for; for an arch, the table's first product
    if product.lower() == found.arch and info.products:
        product = info.products[0]
    gpu = GpuInfo(
        vendor=vendor,
        product=product,
        arch=found.arch,
        driver_version=None,
        device_nodes=(),
        source="named",
    )
    recipes, _problems = load_catalogue(cat)
    return _auto_for_gpu(gpu, recipes, where=cat.files())


def load_named(
    ref: str, overrides: Sequence[str], catalogue: Catalogue, *, say: Callable[[str], None]
) -> Recipe:
    """RECIPE that is no recipe's name: the recipe :func:`choose_named` takes for the GPU
    it names (said through ``say`` in one line), else the catalogue's own error."""
    choice = choose_named(ref, catalogue)
    if choice is None:
        return catalogue.load(ref, overrides)
    say(f"{ref} -> {choice.recipe}: {choice.reason}")
    return load_choice(choice, overrides, catalogue)


def _discrete_noted(choice: Choice, host: HostInfo, gpu: GpuInfo) -> Choice:
    """``choice`` whose reason says which integrated GPUs the discrete ``gpu`` won over."""
    skipped = host.passed_over
    if not skipped:
        return choice
    igpus = ", ".join(f"GPU {g.index} ({g.arch})" for g in skipped)
    return replace(
        choice,
        reason=f"{choice.reason}; the discrete GPU {gpu.index} is chosen over the "
        f"integrated {igpus} (pytorch/pytorch#119637)",
    )
