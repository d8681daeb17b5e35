"""What the probe is asked to do: built on the host from a recipe or CLI flags.

A :class:`ProbeSpec` is plain data. The runner sends :meth:`ProbeSpec.worker_json` to the
worker (which runs exactly the steps listed there) and keeps the spec to know every step
it must report, including the ones a crashed worker never reached.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envforge.core.fsutil import FileTooLarge, NotRegularFile, read_limited
from envforge.errors import InvalidInput
from envforge.knowledge.arch import gfx_from_isa
from envforge.probe.report import printable
from envforge.recipe.checks import MAX_STEP_TIMEOUT  # one limit for recipes and --step-timeout
from envforge.recipe.model import Level, Recipe
from envforge.stack import Stack, stack_of

#: ``amd``/``nvidia``/``any``: a GPU is required (none visible → ``no-device``); ``none``:
#: every step runs on the CPU; ``auto`` (no recipe): the GPU when torch sees one, else the CPU.
ProbeVendor = Literal["amd", "nvidia", "any", "none", "auto"]

QUICK_STEPS: tuple[str, ...] = (
    "env-snapshot",
    "expected-versions",
    "device",
    "memory",
    "small-tensor",
    "matmul",
    "transfer-back",
)
FULL_STEPS: tuple[str, ...] = (*QUICK_STEPS, "conv2d", "autocast", "grad-checkpoint")
CHECK_PREFIX = "check:"
#: ``import:NAME`` imports every top-level module of the installed distribution NAME.
IMPORT_PREFIX = "import:"
#: The audit (envforge/probe/audit_step.py): run by the host side after the worker, at both
#: levels, so certification refuses what ``envforge audit`` finds. Not sent to the worker.
AUDIT_STEP = "audit"
#: GPU health facts (envforge/probe/health.py): run by the host side after the worker,
#: when asked (``--health``, ``--require-healthy``). Not sent to the worker.
HEALTH_STEP = "health"
#: The all-reduce across the visible GPUs (worker/collective.py), when asked (``--collective``).
COLLECTIVE_STEP = "collective"
#: Steps the host runs itself, after the worker.
HOST_STEPS: tuple[str, ...] = (HEALTH_STEP, AUDIT_STEP)
#: Device steps of the torch companions, run (at both levels) when the recipe asks for them.
COMPANION_STEPS: dict[str, tuple[str, ...]] = {
    "torchvision": ("torchvision-nms", "torchvision-convnet"),
    "torchaudio": ("torchaudio-melspectrogram",),
}
#: Seconds the worker may take to start (interpreter start, container start) at least.
MIN_STARTUP_TIMEOUT = 30.0
#: The largest check file read (a check is a short Python file).
MAX_CHECK_BYTES = 1 << 20


def requested_extras(lines: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(canonical distribution, its extras) of each requirement line that asks for extras
    (``black[d]>=24`` -> ``("black", ("d",))``), once per distribution, in order."""
    found: dict[str, list[str]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.extras:
            names = found.setdefault(canonicalize_name(req.name), [])
            names += [e for e in sorted(canonicalize_name(x) for x in req.extras) if e not in names]
    return tuple((name, tuple(extras)) for name, extras in found.items())


def step_timeout_problem(value: float) -> str | None:
    """Why ``value`` cannot be a step deadline (not finite, not above 0, over a day), or None."""
    if not math.isfinite(value) or not 0 < value <= MAX_STEP_TIMEOUT:
        return f"must be positive and at most {MAX_STEP_TIMEOUT:g} seconds, got {value:g}"
    return None


#: The largest ``--require-free`` (GiB): far above any GPU's memory, below nonsense.
MAX_REQUIRE_FREE = 1 << 20


def require_free_problem(value: float) -> str | None:
    """Why ``value`` cannot be ``--require-free`` GiB (not finite, not above 0, absurd), or None."""
    if not math.isfinite(value) or not 0 < value <= MAX_REQUIRE_FREE:
        return f"must be a positive number of GiB at most {MAX_REQUIRE_FREE}, got {value:g}"
    return None


@dataclass(frozen=True)
class Expectations:
    """What must be installed; None means "whatever is there" for that item."""

    python: str | None = None  # "3.10"
    torch: str | None = None  # "1.13.1" or "1.13.1+rocm5.2" (then matched exactly)
    numpy: str | None = None  # PEP 440 specifier, "<2"
    hip: str | None = None  # ROCm major.minor torch must be built for, "5.2"
    cuda: str | None = None  # CUDA major.minor, "12.6"
    accelerator: str | None = None  # "rocm5.2", "cu126", "cpu": the wheel's local label
    arch: str | None = None  # effective GPU arch that must be compiled in, "gfx1030"

    def to_dict(self) -> dict[str, str | None]:
        return {
            "python": self.python,
            "torch": self.torch,
            "numpy": self.numpy,
            "hip": self.hip,
            "cuda": self.cuda,
            "accelerator": self.accelerator,
            "arch": self.arch,
        }

    @classmethod
    def from_recipe(cls, recipe: Recipe, stack: Stack | None = None) -> Expectations:
        stack = stack_of(recipe) if stack is None else stack
        return cls(
            python=recipe.python,
            torch=recipe.torch.version,
            numpy=stack.numpy_bound,
            hip=recipe.rocm,
            cuda=recipe.cuda,
            accelerator=stack.accelerator,
            arch=effective_arch(recipe),
        )


def effective_arch(recipe: Recipe) -> str | None:
    """The arch the GPU runtime will look for: the override's when HSA_OVERRIDE_GFX_VERSION is set.

    ``gfx1010`` with ``HSA_OVERRIDE_GFX_VERSION=10.3.0`` → ``gfx1030``. None for non-AMD
    recipes (CUDA's forward compatibility makes a plain membership test misleading).
    """
    if recipe.gpu.vendor != "amd" or not recipe.gpu.arch:
        return None
    override = recipe.env_map.get("HSA_OVERRIDE_GFX_VERSION")
    target = gfx_from_isa(override) if override else None
    return target or recipe.gpu.arch


@dataclass(frozen=True)
class CheckFile:
    """A user check: a Python file run in the worker; it passes if it does not raise."""

    step: str
    path: str
    source: str

    @classmethod
    def read(cls, path: Path | str, step: str | None = None) -> CheckFile:
        """Read a check file: a regular file, without blocking, at most MAX_CHECK_BYTES."""
        p = Path(path)
        hint = "pass an existing Python file to --check (or fix certify.extra_checks)"
        try:
            source = _read_regular(p, MAX_CHECK_BYTES).decode("utf-8")
        except _NotRegular as exc:
            raise InvalidInput(f"check file {printable(str(p))}: {exc}", hint=hint) from None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInput(
                f"check file {printable(str(p))}: cannot be read: {reason}", hint=hint
            ) from None
        return cls(
            step=step or CHECK_PREFIX + printable(p.name), path=str(p.resolve()), source=source
        )


class _NotRegular(Exception):
    """A check path that is not a regular file, or too large."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of regular file ``path`` (fsutil's bounded, non-blocking reader), with
    what is in the way named: a FIFO, a device, a folder, a file over ``limit``."""
    try:
        return read_limited(path, limit)
    except (NotRegularFile, IsADirectoryError):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = 0
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise _NotRegular(f"not a regular file ({kind})") from None
    except FileTooLarge as exc:
        size = f"{exc.size} bytes" if exc.size is not None else f"more than {limit} bytes"
        raise _NotRegular(f"too large ({size}, at most {limit})") from None


def read_checks(paths: Sequence[Path | str]) -> tuple[CheckFile, ...]:
    """Read check files, giving each a unique step name (``check:name.py``, ``check:name.py#2``)."""
    out: list[CheckFile] = []
    used: set[str] = set()
    for path in paths:
        base = CHECK_PREFIX + printable(Path(path).name)
        name, n = base, 1
        while name in used:
            n += 1
            name = f"{base}#{n}"
        used.add(name)
        out.append(CheckFile.read(path, name))
    return tuple(out)


@dataclass(frozen=True)
class GpuChecks:
    """The probe's optional GPU steps as a command settled them: ``health`` (the host's
    health facts; ``require_healthy``: a failing fact fails the step) and ``collective``
    (the all-reduce across the visible GPUs). :meth:`chosen` holds the defaults."""

    health: bool = False
    require_healthy: bool = False
    collective: bool = False

    @classmethod
    def chosen(
        cls,
        *,
        health: bool | None,
        require_healthy: bool,
        collective: bool | None,
        vendor: str,
        gpus: int | None,
    ) -> GpuChecks:
        """What ``--health/--no-health``, ``--require-healthy`` and
        ``--collective/--no-collective`` (None: not given) come to. Health is recorded by
        default for a GPU recipe (``vendor`` not ``none``: well under a second, and a
        tool that is not installed is a fact, not a failure); ``--require-healthy`` implies
        it. The collective runs by default for a GPU recipe when two or more GPUs were
        chosen (``gpus``: ``--gpu``'s or the scheduler's count; None: no choice, none by
        default); a CPU recipe's probe uses no GPU, so it has nothing to reduce across."""
        if require_healthy and health is False:
            raise InvalidInput(
                "--require-healthy and --no-health contradict each other",
                hint="leave one of them out",
            )
        gpu = vendor != "none"
        return cls(
            health=require_healthy or (health if health is not None else gpu),
            require_healthy=require_healthy,
            collective=collective if collective is not None else gpu and (gpus or 0) > 1,
        )

    def applied(self, spec: ProbeSpec) -> ProbeSpec:
        """``spec`` with these steps."""
        return replace(
            spec,
            health=self.health,
            require_healthy=self.require_healthy,
            collective=self.collective,
        )

    def argv(self) -> list[str]:
        """These choices as ``build``/``certify`` flags (every one said: a node's defaults
        never decide what a plan asked for)."""
        return [
            "--health" if self.health else "--no-health",
            *(["--require-healthy"] if self.require_healthy else []),
            "--collective" if self.collective else "--no-collective",
        ]

    def to_dict(self) -> dict[str, bool]:
        return {
            "health": self.health,
            "require_healthy": self.require_healthy,
            "collective": self.collective,
        }


@dataclass(frozen=True)
class ProbeSpec:
    level: Level = "full"
    vendor: ProbeVendor = "auto"
    step_timeout: float = 60.0
    expect: Expectations = field(default_factory=Expectations)
    checks: tuple[CheckFile, ...] = ()
    #: Environment variables the target must set for the worker (the recipe's env).
    env: tuple[tuple[str, str], ...] = ()
    #: Seconds for the worker to start and say hello; None → max(step_timeout, 30).
    startup_timeout: float | None = None
    recipe_name: str | None = None
    recipe_hash: str | None = None
    #: Canonical names of the distributions the stack asks for (``Stack.distributions()``:
    #: torch, numpy, the companions, the recipe's packages); empty without a recipe. Each
    #: gets an ``import:NAME`` step; torchvision and torchaudio add their device steps.
    distributions: tuple[str, ...] = ()
    #: Run only these of the steps (in the usual order); None: every step. An incremental
    #: certification re-runs what a change can affect (the venv backend's rebuilds).
    only: tuple[str, ...] | None = None
    #: (module, reason): top-level modules the import steps do not import (a project's
    #: ``skip_imports``); each step names the ones it skipped and why.
    skip_imports: tuple[tuple[str, str], ...] = ()
    #: (distribution, extras asked for): what the stack's requirement lines ask for
    #: (``black[d]``). A module that needs a distribution only an extra *not* asked for
    #: requires is skipped, named with that extra; one of an extra asked for must import.
    extras: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: ``--require-free GIB``: the memory step fails when a device has less free (None:
    #: it only warns when other processes hold most of a GPU's memory).
    require_free: float | None = None
    #: Add the host-run ``audit`` step (recipes' probes; see AUDIT_STEP).
    audit: bool = False
    #: Add the host-run ``health`` step (HEALTH_STEP); ``require_healthy``: a failing
    #: health fact fails it (else it warns).
    health: bool = False
    require_healthy: bool = False
    #: Add the worker's ``collective`` step (COLLECTIVE_STEP; skipped below two devices).
    collective: bool = False

    def __post_init__(self) -> None:
        problem = step_timeout_problem(self.step_timeout)
        if problem is not None:
            raise InvalidInput(f"step timeout {problem}", hint="--step-timeout 60")
        if self.require_free is not None and require_free_problem(self.require_free):
            raise InvalidInput(
                f"--require-free {require_free_problem(self.require_free)}",
                hint="--require-free 8 (GiB)",
            )
        if self.startup_timeout is not None and step_timeout_problem(self.startup_timeout):
            raise InvalidInput(f"startup timeout {step_timeout_problem(self.startup_timeout)}")

    @property
    def steps(self) -> tuple[str, ...]:
        """Every step, in order: the torch steps of the level, one import step per
        distribution, the companions' device steps, then user checks (both levels)."""
        base = QUICK_STEPS if self.level == "quick" else FULL_STEPS
        imports = tuple(IMPORT_PREFIX + name for name in self.distributions)
        companions = tuple(
            step for name in self.distributions for step in COMPANION_STEPS.get(name, ())
        )
        audit = (AUDIT_STEP,) if self.audit else ()
        collective = (COLLECTIVE_STEP,) if self.collective else ()
        health = (HEALTH_STEP,) if self.health or self.require_healthy else ()
        every = (
            *base,
            *imports,
            *companions,
            *collective,
            *health,
            *audit,
            *(c.step for c in self.checks),
        )
        if self.only is None:
            return every
        return tuple(step for step in every if step in self.only)

    @property
    def startup_deadline(self) -> float:
        if self.startup_timeout is not None:
            return self.startup_timeout
        return max(self.step_timeout, MIN_STARTUP_TIMEOUT)

    def deadline(self, step: str) -> float:
        """Seconds ``step`` may take: one knob (``step_timeout``) for every step today."""
        del step
        return self.step_timeout

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    def worker_dict(self) -> dict[str, Any]:
        """The spec as the worker reads it (see worker/driver.py)."""
        return {
            "protocol": 1,
            "level": self.level,
            "vendor": self.vendor,
            "steps": [s for s in self.steps if s not in HOST_STEPS],
            "step_timeout": self.step_timeout,
            "deadlines": {s: self.deadline(s) for s in self.steps if s not in HOST_STEPS},
            "expect": self.expect.to_dict(),
            "checks": [{"step": c.step, "path": c.path, "source": c.source} for c in self.checks],
            **({"require_free": self.require_free} if self.require_free is not None else {}),
            # only when there are some: a spec without them reads as it did before
            **({"skip_imports": dict(self.skip_imports)} if self.skip_imports else {}),
            **({"extras": {d: list(e) for d, e in self.extras}} if self.extras else {}),
        }

    def worker_json(self) -> str:
        return json.dumps(self.worker_dict(), sort_keys=True)

    @classmethod
    def from_recipe(
        cls,
        recipe: Recipe,
        *,
        level: Level | None = None,
        step_timeout: float | None = None,
        extra_checks: Sequence[Path | str] = (),
        stack: Stack | None = None,
        checks: Sequence[CheckFile] = (),
        skip_imports: Sequence[tuple[str, str]] = (),
    ) -> ProbeSpec:
        """The recipe's expectations, device and certify settings; CLI values override.
        ``stack``: the recipe's stack as the caller computed it (None: from the recipe);
        ``checks``: steps made elsewhere (a project's), run after the check files;
        ``skip_imports``: (module, reason) the import steps leave out (a project's)."""
        stack = stack_of(recipe) if stack is None else stack
        return cls(
            level=level or recipe.certify.level,
            vendor=recipe.gpu.vendor,
            step_timeout=step_timeout if step_timeout is not None else recipe.certify.step_timeout,
            expect=Expectations.from_recipe(recipe, stack),
            checks=(*read_checks([*recipe.certify.extra_checks, *extra_checks]), *checks),
            env=tuple(recipe.env_map.items()),
            recipe_name=recipe.name,
            recipe_hash=recipe.hash,
            distributions=stack.distributions(),
            skip_imports=tuple(skip_imports),
            extras=requested_extras(stack.requirement_lines()),
            audit=True,
        )

    @classmethod
    def for_installed(
        cls,
        *,
        level: Level = "full",
        step_timeout: float = 60.0,
        extra_checks: Sequence[Path | str] = (),
    ) -> ProbeSpec:
        """No recipe: accept what is installed; the GPU if torch sees one, else the CPU."""
        return cls(
            level=level,
            vendor="auto",
            step_timeout=step_timeout,
            checks=read_checks(extra_checks),
        )
